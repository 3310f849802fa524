//! `neighbors` (scanpy's `pp.neighbors` with `method="umap"`): k nearest neighbours
//! (euclidean, the cell itself included as its first neighbour), exact or, from
//! [`AUTO_IVF_CELLS`] cells or when asked, approximate within an inverted file ([`ivf`]), and
//! UMAP's fuzzy simplicial set as the connectivities, exactly as
//! `umap.umap_.fuzzy_simplicial_set` computes it.
//!
//! kNN: blocks of queries against blocks of references, the inner products by faer matrix
//! products (`|b|^2 - 2 a.b` ranks the references of a query), `k + 8` candidates kept per query,
//! then their distances recomputed exactly in `f64` and the best `k` taken (ties by index, the
//! cell itself first).
//!
//! Connectivities (float32 arithmetic, as umap's numba code): per cell, `rho` = distance to the
//! nearest neighbour at a non-zero distance (`local_connectivity = 1`), `sigma` by a 64-step
//! binary search until `sum_j exp(-(d_j - rho) / sigma) = log2(k)` within 1e-5 (at least
//! `1e-3 * mean distance`); memberships `exp(-(d - rho) / sigma)` (1 within `rho`, 0 to itself);
//! then the fuzzy union `A + A^T - A o A^T` (with `set_op_mix_ratio` mixing in the intersection).
//!
//! `distances` is scanpy's `obsp['distances']`: the `k - 1` non-self neighbours of each cell.
//!
//! [`neighbors_gpu`] is the GPU twin (same results; see `gpu.rs` for how).

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Mat, MatRef};
use rayon::prelude::*;

pub mod descent;
pub(crate) mod gpu;
mod host_scan;
pub mod ivf;
mod ivf_tensor;
pub mod pruned;
pub mod tensor;

use host_scan::{exact_best, products_into, Candidates};

/// The step's kernel modules, for the warm-up ([`crate::warm_up`]): the f32 scan and the
/// connectivities, the tensor-core scan and the exact kNN's list pruning.
pub const KERNELS: [crate::gpu::module_cache::KernelSource; 3] =
    [gpu::SRC, tensor::SRC, pruned::SRC];
pub use gpu::{
    knn_exact_gpu, knn_exact_gpu_with, knn_rows_gpu, neighbors_from_knn_gpu, neighbors_gpu,
    neighbors_on_device, Products, MAX_DIMS as GPU_MAX_DIMS, MAX_K as GPU_MAX_K,
};

/// How a kNN's candidates were ranked before their exact f64 distances chose the neighbours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scan {
    /// On the CPU (f32 matrix products).
    Cpu,
    /// On the GPU's CUDA cores (f32).
    F32,
    /// On tensor cores (FP16), `f32_queries` of the queries not certified by the bound and
    /// scanned again in f32.
    Tensor { f32_queries: usize },
    /// Exact, on tensor cores within the lists of an inverted file that the bounds of
    /// [`pruned`] keep.
    Pruned(pruned::PrunedStats),
    /// Approximate: within the lists of an inverted file (CPU or GPU), and how it did.
    Ivf(ivf::IvfStats),
}

impl Scan {
    /// Two parts of one kNN (e.g. the row ranges of several GPUs) as one.
    pub fn join(self, other: Scan) -> Scan {
        match (self, other) {
            (Scan::Tensor { f32_queries: a }, Scan::Tensor { f32_queries: b }) => {
                Scan::Tensor { f32_queries: a + b }
            }
            (Scan::Tensor { .. }, o) | (o, Scan::Tensor { .. }) => o,
            (a, _) => a,
        }
    }
}

/// Parameters, with scanpy's defaults (and the search chosen by size, as scanpy, which
/// searches approximately from 4,096 cells).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighborsParams {
    /// Neighbours per cell, the cell itself included (scanpy's `n_neighbors`).
    pub n_neighbors: usize,
    pub set_op_mix_ratio: f64,
    pub local_connectivity: f64,
    pub method: KnnMethod,
}

impl Default for NeighborsParams {
    fn default() -> Self {
        NeighborsParams {
            n_neighbors: 15,
            set_op_mix_ratio: 1.0,
            local_connectivity: 1.0,
            method: KnnMethod::Auto(ivf::IvfParams::default()),
        }
    }
}

/// How the kNN is searched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KnnMethod {
    /// Every cell against every cell.
    Exact,
    /// Within the probed lists of an inverted file ([`ivf`]).
    Ivf(ivf::IvfParams),
    /// Exact below [`AUTO_IVF_CELLS`] cells, the inverted file from there.
    Auto(ivf::IvfParams),
}

/// Cells from which [`KnnMethod::Auto`] searches an inverted file. On the H200
/// (`benches/RESULTS.md` (b3), bench-knn) the inverted file took 0.077-0.079 s at 200k cells
/// against the exact tensor-core kNN's 0.109-0.139 s, and 0.33-0.35 s at 1 M against
/// 2.43-2.61 s. Below, the exact kNN's time falls as n^2 (0.032 s at 100k) while the inverted
/// file keeps its fixed costs (training, lists, the recall sample: about 0.06 s). Since the
/// exact kNN prunes its lists ([`pruned`], (b2)), it takes 0.064-0.088 s at 200k and
/// 0.47-1.27 s at 1 M (workload C, the demo's PCs): alike at 200k, still slower at 1 M.
pub const AUTO_IVF_CELLS: usize = 200_000;

impl KnnMethod {
    /// The inverted file's parameters when `n` cells are searched with it; `None`: exactly.
    pub fn ivf_for(self, n: usize) -> Option<ivf::IvfParams> {
        match self {
            KnnMethod::Exact => None,
            KnnMethod::Ivf(p) => Some(p),
            KnnMethod::Auto(p) => (n >= AUTO_IVF_CELLS).then_some(p),
        }
    }
}

/// The k nearest neighbours of each cell, nearest first; row `i` is `[i*k, (i+1)*k)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Knn {
    pub n_obs: usize,
    pub k: usize,
    pub indices: Vec<u32>,
    pub distances: Vec<f32>,
}

impl Knn {
    /// Neighbours of cell `i`.
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        (
            &self.indices[i * self.k..(i + 1) * self.k],
            &self.distances[i * self.k..(i + 1) * self.k],
        )
    }
}

/// What `neighbors` produces.
#[derive(Debug, Clone)]
pub struct NeighborsResult {
    /// The `n_neighbors` actually used (scanpy lowers it on tiny data).
    pub n_neighbors: usize,
    pub knn: Knn,
    /// `obsp['distances']`: `k - 1` non-self neighbours per row.
    pub distances: CsrMatrix<f32>,
    /// `obsp['connectivities']`: the symmetric fuzzy union.
    pub connectivities: CsrMatrix<f32>,
    /// How the kNN's candidates were ranked.
    pub scan: Scan,
}

const QUERY_BLOCK: usize = 256;
const REF_BLOCK: usize = 2048;
/// Candidates kept per query beyond `k` before the exact distances decide.
pub(crate) const EXTRA: usize = 8;

/// `k` must be 1 to `n`.
pub(crate) fn check_k(n: usize, k: usize) -> Result<()> {
    if k == 0 || k > n {
        return Err(KernelError::param(
            "n_neighbors",
            format!("must be between 1 and the number of cells ({n}), got {k}"),
        ));
    }
    Ok(())
}

/// Every coordinate must be finite.
pub(crate) fn check_finite<T: Real>(x: &DenseMatrix<T>) -> Result<()> {
    let d = x.n_cols;
    match crate::first_match::par_position_first(&x.data, |v| !v.is_finite()) {
        Some(p) => Err(KernelError::NonFinite {
            row: p / d.max(1),
            col: p % d.max(1),
            value: x.data[p].to_f64(),
        }),
        None => Ok(()),
    }
}

/// Exact k nearest neighbours (self included) of the rows of `x`.
pub fn knn_exact<T: Real>(x: &DenseMatrix<T>, k: usize) -> Result<Knn> {
    let (n, d) = (x.n_rows, x.n_cols);
    check_k(n, k)?;
    check_finite(x)?;
    let xf: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
    let norms: Vec<f32> = (0..n)
        .map(|i| xf[i * d..(i + 1) * d].iter().map(|v| v * v).sum())
        .collect();
    let kc = (k + EXTRA).min(n);
    let mut indices = vec![0u32; n * k];
    let mut distances = vec![0f32; n * k];
    indices
        .par_chunks_mut(QUERY_BLOCK * k)
        .zip(distances.par_chunks_mut(QUERY_BLOCK * k))
        .enumerate()
        .for_each(|(qb, (oi, od))| {
            let q0 = qb * QUERY_BLOCK;
            let nq = oi.len() / k;
            let a = MatRef::from_row_major_slice(&xf[q0 * d..(q0 + nq) * d], nq, d);
            let mut cand = Candidates::new(nq, kc);
            let mut prod = Mat::<f32>::zeros(REF_BLOCK, nq);
            let mut r0 = 0;
            while r0 < n {
                let nr = REF_BLOCK.min(n - r0);
                let b = MatRef::from_row_major_slice(&xf[r0 * d..(r0 + nr) * d], nr, d);
                let mut pm = prod.as_mut().submatrix_mut(0, 0, nr, nq);
                products_into(pm.rb_mut(), b, a);
                cand.offer(pm.rb(), &norms[r0..r0 + nr], |j| (r0 + j) as u32);
                r0 += nr;
            }
            for (q, c) in cand.lists.iter().enumerate() {
                let (oi, od) = (&mut oi[q * k..(q + 1) * k], &mut od[q * k..(q + 1) * k]);
                exact_best(&xf, d, q0 + q, c.iter().map(|e| e.1), oi, od);
            }
        });
    Ok(Knn {
        n_obs: n,
        k,
        indices,
        distances,
    })
}

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
        } else {
            rho = interp * nz[0];
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
    let a = csr_from_rows(n, &rows);
    let at = a.transpose();
    let mix = set_op_mix_ratio as f32;
    // Union of the patterns of A and A^T, row by row (both have sorted indices).
    let merged: Vec<Vec<(u32, f32)>> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (ca, va) = a.row(i);
            let (cb, vb) = at.row(i);
            let mut out = Vec::with_capacity(ca.len() + cb.len());
            let (mut p, mut q) = (0, 0);
            while p < ca.len() || q < cb.len() {
                let (j, x, y) = if q >= cb.len() || (p < ca.len() && ca[p] < cb[q]) {
                    p += 1;
                    (ca[p - 1], va[p - 1], 0.0f32)
                } else if p >= ca.len() || cb[q] < ca[p] {
                    q += 1;
                    (cb[q - 1], 0.0f32, vb[q - 1])
                } else {
                    p += 1;
                    q += 1;
                    (ca[p - 1], va[p - 1], vb[q - 1])
                };
                let prod = x * y;
                let v = if mix == 1.0 {
                    (x + y) - prod
                } else {
                    mix * ((x + y) - prod) + (1.0 - mix) * prod
                };
                if v != 0.0 {
                    out.push((j, v));
                }
            }
            out
        })
        .collect();
    Ok(csr_from_rows(n, &merged))
}

/// A square CSR matrix from per-row sorted entries.
fn csr_from_rows(n: usize, rows: &[Vec<(u32, f32)>]) -> CsrMatrix<f32> {
    crate::csr::build_csr(
        n,
        n,
        |i| rows[i].len(),
        |i, ci, vi| {
            for (t, &(j, v)) in rows[i].iter().enumerate() {
                ci[t] = j;
                vi[t] = v;
            }
        },
    )
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
fn membership(i: usize, j: u32, d: f32, rho: f32, sigma: f32) -> f32 {
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

/// kNN graph and UMAP connectivities of the rows of `x` (e.g. `X_pca`). As scanpy, when
/// `n_neighbors` exceeds the number of cells it becomes `1 + n_obs / 2`.
pub fn neighbors<T: Real>(x: &DenseMatrix<T>, params: &NeighborsParams) -> Result<NeighborsResult> {
    let k = effective_k(x.n_rows, params)?;
    let (knn, scan) = match params.method.ivf_for(x.n_rows) {
        None => (knn_exact(x, k)?, Scan::Cpu),
        Some(p) => {
            let (knn, stats) = ivf::knn_ivf(x, k, &p)?;
            (knn, Scan::Ivf(stats))
        }
    };
    let connectivities =
        umap_connectivities(&knn, params.set_op_mix_ratio, params.local_connectivity)?;
    let distances = distance_matrix(&knn);
    Ok(NeighborsResult {
        n_neighbors: k,
        knn,
        distances,
        connectivities,
        scan,
    })
}

/// The `k` scanpy uses for `n` cells (`1 + n / 2` when `n_neighbors` exceeds `n`).
pub fn effective_k(n: usize, params: &NeighborsParams) -> Result<usize> {
    if params.n_neighbors < 2 {
        return Err(KernelError::param(
            "n_neighbors",
            "must be at least 2 (the cell itself and one other)",
        ));
    }
    if n < 2 {
        return Err(KernelError::Unsupported(format!(
            "neighbors needs at least 2 cells, got {n}"
        )));
    }
    Ok(if params.n_neighbors > n {
        1 + n / 2
    } else {
        params.n_neighbors
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn random(n: usize, d: usize, seed: u64) -> DenseMatrix<f32> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        DenseMatrix::new(
            n,
            d,
            (0..n * d).map(|_| rng.random_range(-3.0f32..3.0)).collect(),
        )
        .unwrap()
    }

    fn brute(x: &DenseMatrix<f32>, k: usize) -> Vec<Vec<(f64, u32)>> {
        (0..x.n_rows)
            .map(|i| {
                let mut v: Vec<(f64, u32)> = (0..x.n_rows)
                    .map(|j| {
                        (
                            (0..x.n_cols)
                                .map(|c| (x.get(i, c) as f64 - x.get(j, c) as f64).powi(2))
                                .sum::<f64>()
                                .sqrt(),
                            j as u32,
                        )
                    })
                    .collect();
                v.sort_by(|a, b| {
                    a.0.partial_cmp(&b.0)
                        .unwrap()
                        .then(((a.1 as usize) != i).cmp(&((b.1 as usize) != i)))
                        .then(a.1.cmp(&b.1))
                });
                v.truncate(k);
                v
            })
            .collect()
    }

    #[test]
    fn hand_checked_line() {
        // Points on a line at 0, 1, 3, 7.
        let x = DenseMatrix::new(4, 1, vec![0.0f32, 1.0, 3.0, 7.0]).unwrap();
        let knn = knn_exact(&x, 3).unwrap();
        assert_eq!(knn.row(0).0, [0, 1, 2]);
        assert_eq!(knn.row(0).1, [0.0, 1.0, 3.0]);
        assert_eq!(knn.row(3).0, [3, 2, 1]);
        let dm = distance_matrix(&knn);
        assert_eq!(dm.row(3), (&[1u32, 2][..], &[6.0f32, 4.0][..]));
        let (sigmas, rhos) = smooth_knn_dist(&knn, 1.0, 1.0);
        assert_eq!(rhos, [1.0, 1.0, 2.0, 4.0]);
        // k = 3: target log2(3); the nearest other point has membership 1, the next exp(-(d-rho)/sigma).
        let s0 = sigmas[0];
        let want = 1.0 + (-(3.0f32 - 1.0) / s0).exp();
        assert!((want as f64 - 3f64.log2()).abs() < 1e-4, "{want}");
        let c = umap_connectivities(&knn, 1.0, 1.0).unwrap();
        // Symmetric, no diagonal, values in (0, 1].
        let d = c.to_dense();
        for i in 0..4 {
            assert_eq!(d.get(i, i), 0.0);
            for j in 0..4 {
                assert_eq!(d.get(i, j), d.get(j, i));
                assert!(d.get(i, j) >= 0.0 && d.get(i, j) <= 1.0);
            }
        }
        assert_eq!(d.get(0, 1), 1.0);
    }

    #[test]
    fn duplicates_and_tiny_data() {
        let x = DenseMatrix::new(3, 2, vec![1.0f32, 1.0, 1.0, 1.0, 5.0, 5.0]).unwrap();
        let r = neighbors(&x, &NeighborsParams::default()).unwrap();
        assert_eq!(r.n_neighbors, 2); // 15 > 3 cells: 1 + 3 / 2
        assert_eq!(r.knn.row(0).0, [0, 1]);
        assert_eq!(r.knn.row(1).0, [1, 0]);
        assert!(r.connectivities.data.iter().all(|v| v.is_finite()));
        assert!(neighbors(
            &DenseMatrix::new(1, 2, vec![0.0f32, 0.0]).unwrap(),
            &NeighborsParams::default()
        )
        .is_err());
        let bad = DenseMatrix::new(2, 1, vec![0.0f32, f32::NAN]).unwrap();
        assert!(matches!(
            knn_exact(&bad, 2),
            Err(KernelError::NonFinite { .. })
        ));
        assert!(knn_exact(&x, 4).is_err());
        assert!(umap_connectivities(&r.knn, 2.0, 1.0).is_err());
    }

    #[test]
    fn blocks_larger_than_one() {
        // More cells than one reference block and one query block.
        let x = random(REF_BLOCK + 300, 5, 9);
        let knn = knn_exact(&x, 6).unwrap();
        let want = brute(&x, 6);
        for i in (0..x.n_rows).step_by(97) {
            let got: Vec<u32> = knn.row(i).0.to_vec();
            let w: Vec<u32> = want[i].iter().map(|e| e.1).collect();
            assert_eq!(got, w, "row {i}");
        }
    }

    proptest! {
        #[test]
        fn knn_matches_brute_force(n in 2usize..60, d in 1usize..6, k in 1usize..8, seed in any::<u64>()) {
            let k = k.min(n);
            let x = random(n, d, seed);
            let knn = knn_exact(&x, k).unwrap();
            let want = brute(&x, k);
            for i in 0..n {
                prop_assert_eq!(knn.row(i).0[0] as usize, i);
                for t in 0..k {
                    prop_assert!((knn.row(i).1[t] as f64 - want[i][t].0).abs() <= 1e-6 * (1.0 + want[i][t].0));
                }
            }
        }

        #[test]
        fn connectivities_are_a_symmetric_fuzzy_union(n in 3usize..40, seed in any::<u64>()) {
            let x = random(n, 3, seed);
            let k = 4.min(n);
            let knn = knn_exact(&x, k).unwrap();
            let c = umap_connectivities(&knn, 1.0, 1.0).unwrap().to_dense();
            let (sig, rho) = smooth_knn_dist(&knn, 1.0, 1.0);
            let mut a = vec![0f32; n * n];
            for i in 0..n {
                let (idx, dist) = knn.row(i);
                for t in 0..k {
                    a[i * n + idx[t] as usize] = membership(i, idx[t], dist[t], rho[i], sig[i]);
                }
            }
            for i in 0..n {
                for j in 0..n {
                    let (x1, y1) = (a[i * n + j], a[j * n + i]);
                    prop_assert_eq!(c.get(i, j), (x1 + y1) - x1 * y1);
                }
            }
        }
    }
}
