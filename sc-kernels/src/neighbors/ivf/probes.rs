//! How many lists a cell's search probes: a fixed count, or the fewest that reach a recall
//! target on the sample.

use crate::neighbors::ivf::recall::SampleKnn;
use crate::neighbors::ivf::Probes;
use crate::neighbors::lists::probe_order;
use rayon::prelude::*;

/// The probe count of `probes`: a given one, or [`probes_for`] its target on `sample`.
pub(crate) fn settle_probes(
    probes: Probes,
    sample: &SampleKnn,
    assign: &[u32],
    centroids: &[f32],
    d: usize,
) -> usize {
    match probes {
        Probes::Fixed(p) => p,
        Probes::Target(t) => probes_for(t, sample, assign, centroids, d),
    }
}

pub(crate) fn target_of(probes: Probes) -> Option<f64> {
    match probes {
        Probes::Fixed(_) => None,
        Probes::Target(t) => Some(t),
    }
}

/// The fewest probes with which the search finds `target` of the sample's exact neighbours.
/// Within the probed lists the search is exact, so a sampled cell of list `l` finds its true
/// neighbour of list `m` exactly when `m` is among `l`'s probes: with `m`'s place in
/// [`probe_order`] plus one. The `target` quantile of those counts over the sample is the
/// answer, and the recall then measured on the same sample is at least `target` (neighbours
/// tied with the k-th aside).
pub fn probes_for(
    target: f64,
    sample: &SampleKnn,
    assign: &[u32],
    centroids: &[f32],
    d: usize,
) -> usize {
    let (k, n_lists) = (sample.k, centroids.len() / d);
    let mut by_list: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (s, &c) in sample.cells.iter().enumerate() {
        by_list.entry(assign[c as usize]).or_default().push(s);
    }
    let by_list: Vec<(u32, Vec<usize>)> = by_list.into_iter().collect();
    let mut need: Vec<u32> = by_list
        .par_iter()
        .flat_map_iter(|(l, members)| {
            let mut place = vec![0u32; n_lists];
            for (r, m) in probe_order(centroids, d, *l as usize)
                .into_iter()
                .enumerate()
            {
                place[m as usize] = r as u32 + 1;
            }
            let rows = members.iter().flat_map(move |&s| {
                sample.indices[s * k + 1..(s + 1) * k]
                    .iter()
                    .map(|&j| assign[j as usize])
            });
            rows.map(move |m| place[m as usize]).collect::<Vec<_>>()
        })
        .collect();
    if need.is_empty() {
        return 1;
    }
    let at = ((target * need.len() as f64).ceil() as usize).clamp(1, need.len()) - 1;
    let (_, p, _) = need.select_nth_unstable(at);
    (*p as usize).max(1)
}
