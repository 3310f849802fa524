//! The inverted file's search on the CPU.

use crate::dense::DenseMatrix;
use crate::error::Result;
use crate::neighbors::descent::{descend_host, Trial};
use crate::neighbors::ivf::probes::{settle_probes, target_of};
use crate::neighbors::ivf::recall::{exact_sample_host, recall, Gate};
use crate::neighbors::ivf::{IvfParams, IvfStats};
use crate::neighbors::knn::{check_k, Knn, EXTRA};
use crate::neighbors::lists::{
    gather, nearest_host, probe_table, refs_per_cell, row_norms_host, train, training_sample, Lists,
};
use crate::neighbors::scan::host::{exact_best, products, Candidates};
use faer::MatRef;
use rayon::prelude::*;

/// The approximate kNN (self included) of the rows of `x` on the CPU, and what it did
/// (recall included).
pub fn knn_ivf<T: crate::real::Real>(
    x: &DenseMatrix<T>,
    k: usize,
    params: &IvfParams,
) -> Result<(Knn, IvfStats)> {
    let (n, d) = (x.n_rows, x.n_cols);
    check_k(n, k)?;
    x.check_finite()?;
    let shape = params.settle(n)?;
    let xf: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
    let kc = (k + EXTRA).min(n);
    let pts = training_sample(&xf, n, d, shape.n_lists);
    let centroids = train(&pts, d, shape.n_lists, |c| Ok(nearest_host(&pts, c, d)))?;
    let assign = nearest_host(&xf, &centroids, d);
    let lists = Lists::new(&assign, shape.n_lists);
    let norms = row_norms_host(&xf, d);
    let sample = exact_sample_host(&xf, &norms, n, d, k);
    let n_probes = settle_probes(shape.probes, &sample, &assign, &centroids, d);
    let (probe_ptr, probes) = probe_table(&centroids, d, &lists.sizes, n_probes, kc);
    // The cells in list order once (as the GPU lays them out), padding left out: each list is
    // then one block of rows, its norms one slice.
    let order: Vec<u32> = lists
        .perm
        .iter()
        .copied()
        .filter(|&c| c != u32::MAX)
        .collect();
    let xo = gather(&xf, d, &order);
    let no: Vec<f32> = order.iter().map(|&c| norms[c as usize]).collect();
    let mut first = vec![0usize; shape.n_lists + 1];
    for (l, &s) in lists.sizes.iter().enumerate() {
        first[l + 1] = first[l] + s as usize;
    }
    let list = |l: usize| first[l]..first[l + 1];
    let mut indices = vec![0u32; n * k];
    let mut distances = vec![0f32; n * k];
    let rows: Vec<(&[u32], Vec<u32>, Vec<f32>)> = (0..shape.n_lists)
        .into_par_iter()
        .map(|l| {
            let (qr, queries) = (list(l), &order[list(l)]);
            let a = MatRef::from_row_major_slice(&xo[qr.start * d..qr.end * d], qr.len(), d);
            let mut cand = Candidates::new(queries.len(), kc);
            for &p in &probes[probe_ptr[l] as usize..probe_ptr[l + 1] as usize] {
                let rr = list(p as usize);
                let b = MatRef::from_row_major_slice(&xo[rr.start * d..rr.end * d], rr.len(), d);
                let prod = products(b, a);
                cand.offer(prod.as_ref(), &no[rr.clone()], |j| order[rr.start + j]);
            }
            let (mut oi, mut od) = (vec![0u32; queries.len() * k], vec![0f32; queries.len() * k]);
            for (q, c) in cand.lists.iter().enumerate() {
                let (i, dd) = (&mut oi[q * k..(q + 1) * k], &mut od[q * k..(q + 1) * k]);
                exact_best(&xf, d, queries[q] as usize, c.iter().map(|e| e.1), i, dd);
            }
            (queries, oi, od)
        })
        .collect();
    for (cells, oi, od) in rows {
        for (q, &c) in cells.iter().enumerate() {
            let c = c as usize;
            indices[c * k..(c + 1) * k].copy_from_slice(&oi[q * k..(q + 1) * k]);
            distances[c * k..(c + 1) * k].copy_from_slice(&od[q * k..(q + 1) * k]);
        }
    }
    let knn = Knn {
        n_obs: n,
        k,
        indices,
        distances,
    };
    let scan_recall = recall(&sample, &knn);
    let mut gate = Gate::new(&sample, scan_recall.value);
    let mut worth = |_: &[u32], dist: &[f32]| gate.worth(dist);
    let trial = Trial {
        cells: &sample.cells,
        worth: &mut worth,
    };
    let (knn, done) = descend_host(&xf, d, knn, shape.descent_rounds, Some(trial));
    let stats = IvfStats {
        n_lists: shape.n_lists,
        n_probes,
        target_recall: target_of(shape.probes),
        refs_per_cell: refs_per_cell(&lists.sizes, &probe_ptr, &probes, n),
        recall: Some(recall(&sample, &knn)),
        f32_queries: None,
        bound_probes: None,
        descent_rounds: done.rounds,
        scan_recall: Some(scan_recall),
        descent_replaced: done.replaced,
        descent_declined: gate.declined,
    };
    Ok((knn, stats))
}
