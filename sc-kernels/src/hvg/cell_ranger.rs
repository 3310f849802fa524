//! The `cell_ranger` flavour: on `X` as given, dispersion = var / mean (mean 0 -> 1e-12);
//! bins at the 10th, 15th, ..., 100th percentiles of the means (open at both ends);
//! normalized dispersion = (d - bin median) / (bin MAD / 0.6744897501960817).
//!
//! scanpy raises when two percentiles coincide (typically genes without counts, whose means are
//! all 1e-12); here duplicate edges are merged instead (pandas' `duplicates="drop"`), which gives
//! the same bins whenever scanpy succeeds.

use super::binning::{cut_edges, group, mad, normalize_by_bin, np_median, percentile};
use crate::error::Result;

/// `(means, dispersions, dispersions_norm)` from per-gene means and variances of `X`.
pub(crate) fn normalized_dispersion(
    mean: &[f64],
    var: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let m: Vec<f64> = mean
        .iter()
        .map(|&v| if v == 0.0 { 1e-12 } else { v })
        .collect();
    let disp: Vec<f64> = m.iter().zip(var).map(|(&mm, &vv)| vv / mm).collect();
    if m.is_empty() {
        return Ok((m, disp, Vec::new()));
    }
    let mut sorted = m.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let mut edges = vec![f64::NEG_INFINITY];
    edges.extend((10..105).step_by(5).map(|q| percentile(&sorted, q as f64)));
    edges.push(f64::INFINITY);
    let bins = cut_edges(&m, &edges);
    let n_bins = edges.len() - 1;
    let groups = group(&disp, &bins, n_bins);
    let stats: Vec<(f64, f64)> = groups
        .iter()
        .map(|g| {
            let vals: Vec<f64> = g.iter().copied().filter(|v| !v.is_nan()).collect();
            (np_median(&vals), mad(g))
        })
        .collect();
    let norm = normalize_by_bin(&disp, &bins, &stats);
    Ok((m, disp, norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad_per_bin() {
        // 40 genes with distinct means: two per bin of the 20 percentile bins.
        let mean: Vec<f64> = (1..=40).map(|k| k as f64).collect();
        let var: Vec<f64> = (1..=40)
            .map(|k| (k * k) as f64 * if k % 2 == 0 { 2.0 } else { 1.0 })
            .collect();
        let (m, d, n) = normalized_dispersion(&mean, &var).unwrap();
        assert_eq!(m, mean);
        assert_eq!(d[1], 4.0);
        for v in &n {
            assert!(v.is_finite());
        }
        // Zero-count genes get mean 1e-12 and share a bin without failing.
        let (_, _, n) =
            normalized_dispersion(&[0.0, 0.0, 0.0, 1.0, 2.0], &[0.0, 0.0, 0.0, 1.0, 3.0]).unwrap();
        assert_eq!(n.len(), 5);
    }
}
