//! UMAP's fuzzy simplicial set of a kNN graph (the connectivities) and scanpy's distances
//! matrix, on the CPU; [`gpu`] is the device twin.
//!
//!
//! Connectivities (float32 arithmetic, as umap's numba code): per cell, `rho` = distance to the
//! nearest neighbour at a non-zero distance (`local_connectivity = 1`), `sigma` by a 64-step
//! binary search until `sum_j exp(-(d_j - rho) / sigma) = log2(k)` within 1e-5 (at least
//! `1e-3 * mean distance`); memberships `exp(-(d - rho) / sigma)` (1 within `rho`, 0 to itself);
//! then the fuzzy union `A + A^T - A o A^T` (with `set_op_mix_ratio` mixing in the intersection).
//!
//! `distances` is scanpy's `obsp['distances']`: the `k - 1` non-self neighbours of each cell.

mod gpu;
pub(crate) use gpu::{graphs_on_device, SRC};

use crate::csr::{csr_from_rows, CsrMatrix};
use crate::error::{KernelError, Result};
use crate::neighbors::knn::Knn;
use rayon::prelude::*;

/// UMAP's `smooth_knn_dist` (float32 arithmetic as umap's numba code): `(sigmas, rhos)`.
pub fn smooth_knn_dist(knn: &Knn, local_connectivity: f64, bandwidth: f64) -> (Vec<f32>, Vec<f32>) {
    let k = knn.k;
    let target = (k as f64).log2() * bandwidth;
    let mean_all: f32 = {
        let s: f64 = knn.distances.iter().map(|&v| v as f64).sum();
        (s / knn.distances.len().max(1) as f64) as f32
    };
    let pairs: Vec<(f32, f32)> = (0..knn.n_obs)
        .into_par_iter()
        .map(|i| smooth_row(knn.row(i).1, k, target, local_connectivity, mean_all))
        .collect();
    pairs.into_iter().unzip()
}

/// `smooth_knn_dist` of one cell: `(sigma, rho)`.
#[inline(never)]
fn smooth_row(
    dist: &[f32],
    k: usize,
    target: f64,
    local_connectivity: f64,
    mean_all: f32,
) -> (f32, f32) {
    const N_ITER: usize = 64;
    const TOL: f64 = 1e-5;
    const MIN_K_DIST_SCALE: f32 = 1e-3;
    let nz: Vec<f32> = dist.iter().copied().filter(|&v| v > 0.0).collect();
    let mut rho = 0f32;
    if nz.len() as f64 >= local_connectivity {
        let index = local_connectivity.floor() as usize;
        let interp = (local_connectivity - index as f64) as f32;
        if index > 0 {
            rho = nz[index - 1];
            if interp as f64 > TOL {
                rho += interp * (nz[index] - nz[index - 1]);
            }
        } else if let Some(&first) = nz.first() {
            // ingest's transform asks for 0 (umap-learn's `local_connectivity - 1`).
            rho = interp * first;
        }
    } else if !nz.is_empty() {
        rho = nz.iter().copied().fold(f32::MIN, f32::max);
    }
    let (mut lo, mut hi, mut mid) = (0f32, f32::MAX, 1f32);
    for _ in 0..N_ITER {
        let mut psum = 0f32;
        for &dj in &dist[1..] {
            let dd = dj - rho;
            psum += if dd > 0.0 { exp_neg(dd / mid) } else { 1.0 };
        }
        if (psum as f64 - target).abs() < TOL {
            break;
        }
        if psum as f64 > target {
            hi = mid;
            mid = ((lo as f64 + hi as f64) / 2.0) as f32;
        } else {
            lo = mid;
            if hi >= f32::MAX {
                mid *= 2.0;
            } else {
                mid = ((lo as f64 + hi as f64) / 2.0) as f32;
            }
        }
    }
    let mut sigma = mid;
    if rho > 0.0 {
        let mean_i = (dist.iter().map(|&v| v as f64).sum::<f64>() / k as f64) as f32;
        if sigma < MIN_K_DIST_SCALE * mean_i {
            sigma = MIN_K_DIST_SCALE * mean_i;
        }
    } else if sigma < MIN_K_DIST_SCALE * mean_all {
        sigma = MIN_K_DIST_SCALE * mean_all;
    }
    (sigma, rho)
}

pub(crate) fn check_union_params(set_op_mix_ratio: f64, local_connectivity: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&set_op_mix_ratio) {
        return Err(KernelError::param(
            "set_op_mix_ratio",
            "must be between 0 and 1",
        ));
    }
    if !(local_connectivity >= 0.0) {
        return Err(KernelError::param(
            "local_connectivity",
            "must be non-negative",
        ));
    }
    Ok(())
}

/// UMAP's fuzzy simplicial set of the kNN graph, symmetrized (scanpy's connectivities).
pub fn umap_connectivities(
    knn: &Knn,
    set_op_mix_ratio: f64,
    local_connectivity: f64,
) -> Result<CsrMatrix<f32>> {
    check_union_params(set_op_mix_ratio, local_connectivity)?;
    let (sigmas, rhos) = smooth_knn_dist(knn, local_connectivity, 1.0);
    let n = knn.n_obs;
    // Membership strengths, one row per cell, zeros (and the cell itself) left out.
    let rows: Vec<Vec<(u32, f32)>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (idx, dist) = knn.row(i);
            let mut e: Vec<(u32, f32)> = idx
                .iter()
                .zip(dist)
                .map(|(&j, &dd)| (j, membership(i, j, dd, rhos[i], sigmas[i])))
                .filter(|e| e.1 != 0.0)
                .collect();
            e.sort_unstable_by_key(|e| e.0);
            e
        })
        .collect();
    let a = csr_from_rows(n, n, &rows);
    let mix = set_op_mix_ratio as f32;
    // Union of the patterns of A and A^T (both have sorted indices).
    Ok(a.union_with(&a.transpose(), |x, y| {
        let prod = x * y;
        let v = if mix == 1.0 {
            (x + y) - prod
        } else {
            mix * ((x + y) - prod) + (1.0 - mix) * prod
        };
        (v != 0.0).then_some(v)
    }))
}

/// `exp(-z)` in `f32` (evaluated in `f64` and rounded once, see [`crate::fastmath`]; libm's
/// `expf` proved many times slower on rayon's worker threads here). Results below the smallest
/// normal float are 0: they add nothing to a sum that is at least 1 (the nearest neighbour
/// always contributes 1).
#[inline(always)]
fn exp_neg(z: f32) -> f32 {
    if z > 87.0 {
        0.0
    } else {
        crate::fastmath::exp_f32(-z)
    }
}

#[inline]
pub(crate) fn membership(i: usize, j: u32, d: f32, rho: f32, sigma: f32) -> f32 {
    if j as usize == i {
        0.0
    } else if d - rho <= 0.0 || sigma == 0.0 {
        1.0
    } else {
        crate::fastmath::exp_f32(-((d - rho) / sigma))
    }
}

/// scanpy's `obsp['distances']`: the `k - 1` non-self neighbours of each cell (sorted by index).
pub fn distance_matrix(knn: &Knn) -> CsrMatrix<f32> {
    let k = knn.k;
    crate::csr::build_csr(
        knn.n_obs,
        knn.n_obs,
        |_| k.saturating_sub(1),
        |i, ci, vi| {
            let (idx, dist) = knn.row(i);
            let mut e: Vec<(u32, f32)> = idx[1..]
                .iter()
                .copied()
                .zip(dist[1..].iter().copied())
                .collect();
            e.sort_by_key(|e| e.0);
            for (t, (j, v)) in e.into_iter().enumerate() {
                ci[t] = j;
                vi[t] = v;
            }
        },
    )
}
