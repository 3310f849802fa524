//! `harmony_integrate` (scanpy's `external.pp.harmony_integrate`, rapids-singlecell's
//! `pp.harmony_integrate` with its default `flavor="harmony2"`): removes batch effects from a
//! PCA embedding `Z` (cells x PCs) by alternating soft clustering with a diversity penalty and a
//! per-cluster ridge-regression correction (Korsunsky et al. 2019; harmony2's stabilized
//! penalty and dynamic ridge, Patikas et al. 2026).
//!
//! ## The algorithm, as computed here
//!
//! Cells are first sorted by batch (stable; the result is returned in the input order), so each
//! batch is a contiguous range of rows: per-batch sums become plain matrix products.
//!
//! - `Zn` = the rows of `Z` scaled to unit length (a zero row stays zero); `B` batches with
//!   `N_b` cells, `Pr_b = N_b / N`; `theta_b = theta` (times `1 - exp(-(N_b / (K tau))^2)` when
//!   `tau > 0`); `K` clusters, by default `max(2, floor(min(100, N / 30)))` as
//!   rapids-singlecell (harmonypy rounds instead of flooring).
//! - **Initial centroids** ([`kmeans`]): k-means++ seeding on a keyed random sample of
//!   `min(N, 64 K)` rows of `Zn`, then Lloyd iterations on all rows (at most 25, until no
//!   assignment changes; an empty cluster keeps its centroid). rapids-singlecell runs cuML's
//!   k-means (k-means||, 25 iterations) here; the seeds differ, the role is the same.
//! - **Soft assignments**: `sim = Zn Yn^T` with `Yn` the unit-length centroids,
//!   `R_ik ∝ exp(-(2 / sigma) (1 - sim_ik)) * penalty(b_i, k)`, each row summing to 1 (computed
//!   as `exp((2 / sigma) (sim_ik - max_k sim_ik))`, the same after normalization and safe for
//!   small `sigma`). `O_bk = sum of R_ik over the cells of batch b`, `E_bk = Pr_b sum_b' O_b'k`.
//! - **Clustering round** (at most `max_iter_clustering` iterations): `Y = R^T Zn`, rows scaled
//!   to unit length; `sim = Zn Yn^T`; then the cells in a keyed random order ([`rng`]), in
//!   blocks of `floor(N * block_proportion)` cells (the last block holds what is left): remove the
//!   block's rows from `O`, `penalty_bk = ((E_bk + 1) / (O_bk + E_bk + 1))^theta_b` (harmony2;
//!   harmony1: `((E_bk + 1) / (O_bk + 1))^theta_b`), recompute the block's rows, add them back.
//!   Objective after each iteration: `sum R (2 (1 - sim)) + sigma sum R ln R + sigma sum_bk
//!   theta_b O_bk ln((O_bk + E_bk + 1) / (E_bk + 1))` (harmony1: `ln((O + 1) / (E + 1))`);
//!   the round stops when, over a window of 3, `old - new < tol_clustering |old|`
//!   (`old`, `new`: sums of the 3 objectives before and ending at the latest).
//! - **Correction** ([`correct`]): per cluster `k`, the ridge regression of `Z` (not `Zn`) on
//!   the design `[1, one-hot batch]` weighted by `R_:k`, with penalties `lambda = (0,
//!   lambda_1k, ..., lambda_Bk)`: harmony2 `lambda_bk = alpha E_bk`, and `1e30` (no correction)
//!   where `O_bk / N_b < batch_prune_threshold` or `N_b = 0`; harmony1 `lambda_bk =
//!   ridge_lambda`. The normal matrix `[[N_k, o^T], [o, diag(o + lambda)]]` is an arrowhead, so
//!   the solve is closed-form: with `w_b = lambda_b / (o_b + lambda_b)` and `mu =
//!   sum_b w_b M_b / sum_b w_b o_b` (`M_b = sum over batch b of R_ik Z_i`), the batch
//!   coefficients are `W_bk = (M_b - o_b mu) / (o_b + lambda_b)` and the intercept `mu` is kept.
//!   `Z_hat_i = Z_i - sum_k R_ik W_{b_i k}`; `Zn` becomes `Z_hat` at unit length.
//! - **Harmony rounds** (at most `max_iter_harmony`): clustering round, then correction; the
//!   objective list starts with the objective of the initial assignments and gets the last
//!   objective of each round; stop when `old - new < tol_harmony |old|` for the last two.
//!
//! Precision: `Z`, `Zn`, `R`, `sim` and the matrix products are `f32` (faer, as cuBLAS on the
//! GPU); `O`, the penalties, the objective and the ridge coefficients are `f64`. Sums over cells
//! are taken in fixed chunks and added in order, so the result does not depend on the number
//! of threads.
//!
//! [`harmony_integrate_gpu`] is the GPU twin: the same seeds, block order and formulas, with
//! `O` summed by atomics (see its module for the kernels).

mod cluster;
pub mod correct;
pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub mod kmeans;
pub mod lisi;
pub mod rng;

pub use gpu::{harmony_integrate_gpu, harmony_integrate_gpu_rows, GPU_MAX_CLUSTERS};
pub use lisi::{compute_lisi, LisiParams};

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;

/// Which harmony: rapids-singlecell's `flavor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HarmonyFlavor {
    /// Stabilized diversity penalty, dynamic ridge `alpha E_bk`, batch pruning (the default).
    #[default]
    Harmony2,
    /// The original algorithm: penalty `((E + 1) / (O + 1))^theta`, fixed `ridge_lambda`.
    Harmony1,
}

/// Parameters, with rapids-singlecell's defaults. [`Default`] is harmony2 with the stopping
/// rules harmony2 has in rapids-singlecell 0.18, harmonypy 2 and R harmony 2 (at most 4
/// clustering iterations a round, tolerances 1e-3 for clustering and 1e-2 for the rounds);
/// [`HarmonyParams::harmony1`] is the original algorithm with its own (200, 1e-5, 1e-4), as
/// rapids-singlecell and harmony-pytorch stop it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HarmonyParams {
    pub flavor: HarmonyFlavor,
    /// Soft k-means clusters; `None`: `max(2, floor(min(100, n_cells / 30)))`.
    pub n_clusters: Option<usize>,
    /// Diversity penalty weight (every batch).
    pub theta: f64,
    /// Width of the soft-clustering kernel.
    pub sigma: f64,
    /// Discount of `theta` for small batches (0: none).
    pub tau: f64,
    /// Share of the cells updated per block of a clustering iteration.
    pub block_proportion: f64,
    pub max_iter_harmony: usize,
    pub max_iter_clustering: usize,
    pub tol_harmony: f64,
    pub tol_clustering: f64,
    /// Ridge penalty of harmony1.
    pub ridge_lambda: f64,
    /// harmony2's dynamic ridge: `lambda_bk = alpha E_bk`.
    pub alpha: f64,
    /// harmony2: no correction of batch `b` in cluster `k` when `O_bk / N_b` is below this.
    pub batch_prune_threshold: Option<f64>,
    /// Seed of the k-means initialization and of the block order.
    pub seed: u64,
}

impl Default for HarmonyParams {
    fn default() -> Self {
        HarmonyParams {
            flavor: HarmonyFlavor::Harmony2,
            n_clusters: None,
            theta: 2.0,
            sigma: 0.1,
            tau: 0.0,
            block_proportion: 0.05,
            max_iter_harmony: 10,
            max_iter_clustering: 4,
            tol_harmony: 1e-2,
            tol_clustering: 1e-3,
            ridge_lambda: 1.0,
            alpha: 0.2,
            batch_prune_threshold: Some(1e-5),
            seed: 0,
        }
    }
}

impl HarmonyParams {
    /// harmony1 (`flavor="harmony1"`) with its stopping rules: at most 200 clustering
    /// iterations a round, tolerances 1e-5 for clustering and 1e-4 for the rounds.
    pub fn harmony1() -> Self {
        HarmonyParams {
            flavor: HarmonyFlavor::Harmony1,
            max_iter_clustering: 200,
            tol_harmony: 1e-4,
            tol_clustering: 1e-5,
            ..HarmonyParams::default()
        }
    }
}

/// What harmony produces.
#[derive(Debug, Clone)]
pub struct HarmonyResult {
    /// The corrected embedding (`obsm['X_pca_harmony']`), in the input's row order.
    pub corrected: DenseMatrix<f32>,
    /// Harmony rounds run.
    pub iterations: usize,
    /// Whether the harmony objective converged within `max_iter_harmony`.
    pub converged: bool,
    /// The objective of the initial assignments, then the last one of each round.
    pub objective: Vec<f64>,
    /// Clustering iterations of each round.
    pub clustering_iterations: Vec<usize>,
    /// The number of clusters used.
    pub n_clusters: usize,
}

/// The penalty `1e30` that switches a batch's correction off in a cluster (rapids-singlecell's
/// sentinel).
pub const SUPPRESS_PENALTY: f64 = 1e30;

/// The default number of clusters for `n` cells.
pub fn default_n_clusters(n: usize) -> usize {
    ((n as f64 / 30.0).min(100.0).floor() as usize).max(2)
}

/// Validated input, cells sorted by batch: what the CPU and GPU implementations share.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub n: usize,
    pub d: usize,
    pub k: usize,
    pub b: usize,
    /// Internal row `i` is input row `order[i]`.
    pub order: Vec<u32>,
    /// Batch `b` is internal rows `offsets[b]..offsets[b + 1]`.
    pub offsets: Vec<usize>,
    /// Batch of each internal row.
    pub batch_of: Vec<u32>,
    pub n_b: Vec<f64>,
    pub pr_b: Vec<f64>,
    /// Per batch, with `tau` applied.
    pub theta: Vec<f64>,
    pub block_size: usize,
    /// `Z` in internal order, `n x d`.
    pub x: Vec<f32>,
}

impl Setup {
    /// Checks the input and sorts the cells by batch, with `x` the rows of `z` in that order.
    pub fn new(
        z: &DenseMatrix<f32>,
        batches: &[u32],
        n_batches: usize,
        params: &HarmonyParams,
    ) -> Result<Setup> {
        let mut s = Setup::without_rows(z, batches, n_batches, params)?;
        let d = s.d;
        let mut x = vec![0f32; s.n * d];
        x.par_chunks_mut(d)
            .zip(s.order.par_iter())
            .for_each(|(row, &o)| row.copy_from_slice(z.row(o as usize)));
        s.x = x;
        Ok(s)
    }

    /// As [`Setup::new`] with `x` left empty (the GPU gathers the rows itself).
    pub fn without_rows(
        z: &DenseMatrix<f32>,
        batches: &[u32],
        n_batches: usize,
        params: &HarmonyParams,
    ) -> Result<Setup> {
        validate_params(params)?;
        let (n, d) = (z.n_rows, z.n_cols);
        if d == 0 {
            return Err(KernelError::param(
                "z",
                "the embedding has no components (0 columns)",
            ));
        }
        if z.data.len() != n * d {
            return Err(KernelError::Shape(format!(
                "embedding {n} x {d} holds {} values",
                z.data.len()
            )));
        }
        if batches.len() != n {
            return Err(KernelError::Shape(format!(
                "{} batch labels for {n} cells",
                batches.len()
            )));
        }
        if n >= (1usize << 31) {
            return Err(KernelError::Unsupported(format!(
                "harmony: {n} cells exceed the 2^31 - 1 this implementation indexes"
            )));
        }
        z.check_finite()?;
        if let Some((i, &c)) = batches
            .iter()
            .enumerate()
            .find(|(_, &c)| c as usize >= n_batches)
        {
            return Err(KernelError::param(
                "batches",
                format!("cell {i} has batch code {c}, but there are {n_batches} batches"),
            ));
        }
        let mut n_b = vec![0f64; n_batches];
        for &c in batches {
            n_b[c as usize] += 1.0;
        }
        let present = n_b.iter().filter(|&&c| c > 0.0).count();
        if present < 2 {
            return Err(KernelError::param(
                "batches",
                format!(
                    "harmony needs cells from at least 2 batches, the cells come from {present}"
                ),
            ));
        }
        let k = match params.n_clusters {
            Some(k) => k,
            None => default_n_clusters(n),
        };
        if k < 2 {
            return Err(KernelError::param(
                "n_clusters",
                format!("must be at least 2, got {k}"),
            ));
        }
        if n < k {
            return Err(KernelError::param(
                "n_clusters",
                format!("{k} clusters need at least as many cells; there are {n}"),
            ));
        }
        let (order, offsets) = crate::group_by::group_by_key(batches, n_batches);
        let mut batch_of = vec![0u32; n];
        for b in 0..n_batches {
            batch_of[offsets[b]..offsets[b + 1]].fill(b as u32);
        }
        let pr_b: Vec<f64> = n_b.iter().map(|&c| c / n as f64).collect();
        let theta: Vec<f64> = n_b
            .iter()
            .map(|&c| {
                if params.tau > 0.0 {
                    params.theta * (1.0 - (-(c / (k as f64 * params.tau)).powi(2)).exp())
                } else {
                    params.theta
                }
            })
            .collect();
        let block_size = ((n as f64 * params.block_proportion).floor() as usize).max(1);
        Ok(Setup {
            n,
            d,
            k,
            b: n_batches,
            order,
            offsets,
            batch_of,
            n_b,
            pr_b,
            theta,
            block_size,
            x: Vec::new(),
        })
    }

    /// Rows in internal order back to the input's order.
    pub fn unsort(&self, internal: &[f32]) -> DenseMatrix<f32> {
        let d = self.d;
        let mut inverse = vec![0u32; self.n];
        for (i, &o) in self.order.iter().enumerate() {
            inverse[o as usize] = i as u32;
        }
        let mut out = vec![0f32; self.n * d];
        out.par_chunks_mut(d)
            .zip(inverse.par_iter())
            .for_each(|(row, &i)| {
                row.copy_from_slice(&internal[i as usize * d..(i as usize + 1) * d])
            });
        DenseMatrix {
            n_rows: self.n,
            n_cols: d,
            data: out,
        }
    }
}

/// The cells of one rank of a run split across GPUs (input rows `rows`) in their place in the
/// batch order: the rank keeps its cells sorted by batch as [`Setup`] sorts all of them, so a
/// batch's cells on a rank are a contiguous piece of that batch, and every rank follows the
/// same keyed block order over all cells, updating only the cells it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalRows {
    /// Local row `i` is input row `rows.start + order[i]`.
    pub order: Vec<u32>,
    /// Local rows of batch `b`: `offsets[b]..offsets[b + 1]`.
    pub offsets: Vec<usize>,
    pub batch_of: Vec<u32>,
    /// Of each internal row of all cells: its local row, or `u32::MAX` when another rank holds it.
    pub local_of: Vec<u32>,
}

/// `local_of`'s mark for a cell another rank holds.
pub(crate) const NOT_HERE: u32 = u32::MAX;

impl LocalRows {
    pub fn new(setup: &Setup, rows: std::ops::Range<usize>) -> LocalRows {
        let mut local_of = vec![NOT_HERE; setup.n];
        let (mut order, mut batch_of) = (Vec::new(), Vec::new());
        let mut offsets = vec![0usize; setup.b + 1];
        for (g, &input) in setup.order.iter().enumerate() {
            let input = input as usize;
            if rows.contains(&input) {
                local_of[g] = order.len() as u32;
                order.push((input - rows.start) as u32);
                batch_of.push(setup.batch_of[g]);
                offsets[setup.batch_of[g] as usize + 1] += 1;
            }
        }
        for b in 0..setup.b {
            offsets[b + 1] += offsets[b];
        }
        LocalRows {
            order,
            offsets,
            batch_of,
            local_of,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }
}

fn validate_params(p: &HarmonyParams) -> Result<()> {
    let positive = |name: &'static str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(KernelError::param(
                name,
                format!("must be finite and positive, got {v}"),
            ))
        }
    };
    let non_negative = |name: &'static str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(KernelError::param(
                name,
                format!("must be finite and not negative, got {v}"),
            ))
        }
    };
    positive("sigma", p.sigma)?;
    non_negative("theta", p.theta)?;
    non_negative("tau", p.tau)?;
    non_negative("tol_harmony", p.tol_harmony)?;
    non_negative("tol_clustering", p.tol_clustering)?;
    if !(p.block_proportion > 0.0 && p.block_proportion <= 1.0) {
        return Err(KernelError::param(
            "block_proportion",
            format!("must be in (0, 1], got {}", p.block_proportion),
        ));
    }
    if p.max_iter_harmony == 0 {
        return Err(KernelError::param("max_iter_harmony", "must be at least 1"));
    }
    if p.max_iter_clustering == 0 {
        return Err(KernelError::param(
            "max_iter_clustering",
            "must be at least 1",
        ));
    }
    match p.flavor {
        HarmonyFlavor::Harmony2 => {
            positive("alpha", p.alpha)?;
            if let Some(t) = p.batch_prune_threshold {
                if !(0.0..=1.0).contains(&t) {
                    return Err(KernelError::param(
                        "batch_prune_threshold",
                        format!("must be in [0, 1], got {t}"),
                    ));
                }
            }
        }
        HarmonyFlavor::Harmony1 => non_negative("ridge_lambda", p.ridge_lambda)?,
    }
    Ok(())
}

/// Rows scaled to unit length (norms in `f64`; a zero row stays zero).
pub(crate) fn normalize_rows(x: &[f32], d: usize) -> Vec<f32> {
    let mut out = x.to_vec();
    out.par_chunks_mut(d).for_each(normalize_row);
    out
}

/// One row scaled to unit length, as [`normalize_rows`].
pub(crate) fn normalize_row(row: &mut [f32]) {
    let s: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
    if s > 0.0 {
        let inv = (1.0 / s.sqrt()) as f32;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// `E_bk = Pr_b sum_b' O_b'k` (`o` is `B x K`).
pub(crate) fn expected(o: &[f64], pr_b: &[f64], k: usize) -> Vec<f64> {
    let mut s = vec![0f64; k];
    for row in o.chunks_exact(k) {
        s.iter_mut().zip(row).for_each(|(a, &v)| *a += v);
    }
    pr_b.iter()
        .flat_map(|&p| s.iter().map(move |&v| p * v))
        .collect()
}

/// The diversity penalty factors `B x K`.
pub(crate) fn penalty(
    o: &[f64],
    e: &[f64],
    theta: &[f64],
    k: usize,
    flavor: HarmonyFlavor,
) -> Vec<f64> {
    o.iter()
        .zip(e)
        .enumerate()
        .map(|(i, (&o, &e))| {
            let denom = match flavor {
                HarmonyFlavor::Harmony2 => o + e + 1.0,
                HarmonyFlavor::Harmony1 => o + 1.0,
            };
            ((e + 1.0) / denom).powf(theta[i / k])
        })
        .collect()
}

/// The diversity term of the objective, `sigma sum theta_b O ln(...)`.
pub(crate) fn diversity(
    o: &[f64],
    pr_b: &[f64],
    theta: &[f64],
    sigma: f64,
    k: usize,
    flavor: HarmonyFlavor,
) -> f64 {
    let e = expected(o, pr_b, k);
    let s: f64 = o
        .iter()
        .zip(&e)
        .enumerate()
        .map(|(i, (&o, &e))| {
            let numer = match flavor {
                HarmonyFlavor::Harmony2 => o + e + 1.0,
                HarmonyFlavor::Harmony1 => o + 1.0,
            };
            theta[i / k] * o * (numer / (e + 1.0)).ln()
        })
        .sum();
    sigma * s
}

/// The window-of-3 test of a clustering round (`objs`: this round's objectives).
pub(crate) fn clustering_converged(objs: &[f64], tol: f64) -> bool {
    const WINDOW: usize = 3;
    let n = objs.len();
    if n < WINDOW + 1 {
        return false;
    }
    let old: f64 = objs[n - 1 - WINDOW..n - 1].iter().sum();
    let new: f64 = objs[n - WINDOW..].iter().sum();
    old - new < tol * old.abs()
}

/// The test between harmony rounds.
pub(crate) fn harmony_converged(objs: &[f64], tol: f64) -> bool {
    let n = objs.len();
    n >= 2 && objs[n - 2] - objs[n - 1] < tol * objs[n - 2].abs()
}

/// Harmony on the CPU (multithreaded with rayon). `z`: cells x components; `batches`: each
/// cell's batch code in `0..n_batches` (batches without cells are allowed; at least two must
/// have cells).
pub fn harmony_integrate(
    z: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    params: &HarmonyParams,
) -> Result<HarmonyResult> {
    let setup = Setup::new(z, batches, n_batches, params)?;
    let (n, d, k) = (setup.n, setup.d, setup.k);
    let mut zn = normalize_rows(&setup.x, d);
    let mut centroids = kmeans::seed_centroids(&zn, n, d, k, params.seed);
    crate::kmeans::lloyd(&zn, n, d, k, &mut centroids, kmeans::LLOYD_MAX_ITER, 0.0);
    let (mut state, obj0) = cluster::initial_state(&setup, &zn, &centroids, params);
    let mut objective = vec![obj0];
    let mut clustering_iterations = vec![];
    let mut z_hat = setup.x.clone();
    let mut converged = false;
    let mut iterations = 0;
    for h in 0..params.max_iter_harmony {
        let (obj, its) = cluster::round(&setup, &zn, &mut state, params, h);
        objective.push(obj);
        clustering_iterations.push(its);
        let lambda = correct::ridge_lambdas(&state.o, &setup.pr_b, &setup.n_b, k, params);
        let m = correct::batch_moments(&setup, &state.r);
        let w = correct::ridge_coefficients(&state.o, &lambda, &m, setup.b, k, d);
        z_hat = correct::apply(&setup, &state.r, &w);
        zn = normalize_rows(&z_hat, d);
        iterations = h + 1;
        if harmony_converged(&objective, params.tol_harmony) {
            converged = true;
            break;
        }
    }
    Ok(HarmonyResult {
        corrected: setup.unsort(&z_hat),
        iterations,
        converged,
        objective,
        clustering_iterations,
        n_clusters: k,
    })
}

#[cfg(test)]
mod tests;
