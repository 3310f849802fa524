//! `scrublet` (scanpy's `pp.scrublet`, Wolock et al. 2019): doublets found by a kNN classifier
//! of the observed cells among simulated doublets, for one batch of cells, as scanpy 1.12 runs
//! it:
//! 1. genes in fewer than 3 cells and cells with fewer than 3 genes dropped;
//! 2. the counts normalized to the median total; the highly variable genes (seurat flavour,
//!    scanpy's default cutoffs) of their `log1p`;
//! 3. `int(n_obs * sim_doublet_ratio)` doublets simulated from the raw counts of those genes
//!    ([`simulate_doublets`]);
//! 4. observed cells and doublets normalized to 1e6 (after `log1p` with `log_transform`),
//!    z-scored with the observed cells' statistics and embedded by a PCA fitted on the observed
//!    cells ([`embed`]);
//! 5. the exact kNN of all of them with `k_adj = round(k (1 + n_sim / n_obs))`, where
//!    `k = round(0.5 sqrt(n_obs))` unless given, and each cell's score from the doublets among
//!    its neighbours ([`scores_from_counts`]);
//! 6. the threshold at the minimum between the two modes of the doublets' scores
//!    ([`threshold_minimum`]), unless given, and the call.
//!
//! The doublets are scanpy's for the same seed (numpy's `RandomState` repeated, see
//! [`simulate_doublets`]). Differences from scanpy, on purpose: the kNN is exact at every size
//! (scanpy switches to pynndescent's approximate kNN from 2,731 cells); a gene equal in every
//! observed cell gets a z-score of 0 (scanpy's PCA fails on its NaN); thinned doublets
//! (`synthetic_doublet_umi_subsampling < 1`) are drawn with our own numbers.

mod embed;
mod score;
mod simulate;
#[cfg(test)]
mod tests;
mod threshold;

pub use embed::{embed, Manifold, Preparation};
pub use score::{call_at, scores_from_counts, Call, Scores};
pub use simulate::{simulate_doublets, Simulated};
pub use threshold::threshold_minimum;

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::filter::{filter_cells, filter_genes, CellFilter, GeneFilter};
use crate::hvg::{highly_variable_genes, HvgParams};
use crate::log1p::log1p;
use crate::neighbors::exact::knn_exact;
use crate::normalize::{normalize_total, NormalizeParams};

/// scanpy's parameters of `pp.scrublet`, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScrubletParams {
    pub sim_doublet_ratio: f64,
    pub expected_doublet_rate: f64,
    pub stdev_doublet_rate: f64,
    pub synthetic_doublet_umi_subsampling: f64,
    pub prep: Preparation,
    pub log_transform: bool,
    pub n_prin_comps: usize,
    /// `None`: `round(0.5 sqrt(n_obs))`.
    pub n_neighbors: Option<usize>,
    /// `None`: found by [`threshold_minimum`].
    pub threshold: Option<f64>,
    pub random_state: u64,
    /// Also find each observed cell's doublet neighbours' parents (scanpy's
    /// `get_doublet_neighbor_parents`).
    pub neighbor_parents: bool,
}

impl Default for ScrubletParams {
    fn default() -> Self {
        ScrubletParams {
            sim_doublet_ratio: 2.0,
            expected_doublet_rate: 0.05,
            stdev_doublet_rate: 0.02,
            synthetic_doublet_umi_subsampling: 1.0,
            prep: Preparation {
                mean_center: true,
                normalize_variance: true,
            },
            log_transform: false,
            n_prin_comps: 30,
            n_neighbors: None,
            threshold: None,
            random_state: 0,
            neighbor_parents: false,
        }
    }
}

/// What scrublet finds in one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Doublets {
    /// The input cells that were scored (those with at least 3 genes after the gene filter).
    pub scored: Vec<bool>,
    /// The scores of the scored cells and of the doublets, and their errors.
    pub scores: Scores,
    /// The call; `None` when no threshold was given and none was found.
    pub call: Option<Call>,
    /// Each doublet's parents, as rows among the scored cells.
    pub parents: Vec<[u32; 2]>,
    /// The `k` used (before the adjustment for the doublets).
    pub n_neighbors: usize,
    /// With `neighbor_parents`: for each scored cell, the parents (rows among the scored cells,
    /// ascending, each once) of the doublets among its neighbours.
    pub neighbor_parents: Option<Vec<Vec<u32>>>,
}

/// Scrublet on one batch's raw counts (cells x genes).
pub fn scrublet(counts: &CsrMatrix<f32>, params: &ScrubletParams) -> Result<Doublets> {
    check_rates(params)?;
    counts.check_counts()?;
    let genes = filter_genes(counts, GeneFilter::MinCells(3))?;
    let x = counts.select_cols(&genes.keep)?;
    let cells = filter_cells(&x, CellFilter::MinGenes(3))?;
    let raw = x.select_rows(&cells.keep)?;
    if raw.n_rows < 2 {
        return Err(KernelError::param(
            "scrublet",
            format!(
                "{} of {} cells have counts in at least 3 genes (each in at least 3 cells); \
                 scrublet needs at least 2",
                raw.n_rows, counts.n_rows
            ),
        ));
    }
    let mut norm = raw.clone();
    normalize_total(&mut norm, &NormalizeParams::default())?;
    let mut logged = norm.clone();
    log1p(&mut logged, None)?;
    let hvg = highly_variable_genes(&logged, &HvgParams::default(), None, None)?;
    drop(logged);
    if !hvg.highly_variable.iter().any(|&h| h) {
        return Err(KernelError::param(
            "scrublet",
            "no gene passes scanpy's highly variable cutoffs (seurat flavour) in this batch",
        ));
    }
    let raw = raw.select_cols(&hvg.highly_variable)?;
    let mut obs = norm.select_cols(&hvg.highly_variable)?;
    drop(norm);
    let simulated = simulate_doublets(
        &raw,
        params.sim_doublet_ratio,
        params.synthetic_doublet_umi_subsampling,
        params.random_state,
    )?;
    let mut sim = simulated.counts;
    if params.log_transform {
        log1p(&mut obs, None)?;
        log1p(&mut sim, None)?;
    }
    let per_million = NormalizeParams {
        target_sum: Some(1e6),
        per_cell: false,
        ..NormalizeParams::default()
    };
    normalize_total(&mut obs, &per_million)?;
    normalize_total(&mut sim, &per_million)?;
    let mut found = call_doublets(&obs, &sim, simulated.parents, params)?;
    found.scored = cells.keep;
    Ok(found)
}

/// Scrublet's classifier on observed cells and simulated doublets already normalized over the
/// same genes (scanpy's `scrublet(adata, adata_sim=...)`): embedding, kNN, scores and call.
/// `parents` are the doublets' parents (kept in the result). Every observed cell is scored.
pub fn call_doublets(
    obs: &CsrMatrix<f32>,
    sim: &CsrMatrix<f32>,
    parents: Vec<[u32; 2]>,
    params: &ScrubletParams,
) -> Result<Doublets> {
    check_rates(params)?;
    let (n_obs, n_sim) = (obs.n_rows, sim.n_rows);
    if n_obs == 0 || n_sim == 0 {
        return Err(KernelError::param(
            "scrublet",
            format!("needs observed cells and simulated doublets, got {n_obs} and {n_sim}"),
        ));
    }
    let k = match params.n_neighbors {
        Some(0) => return Err(KernelError::param("n_neighbors", "must be at least 1")),
        Some(k) => k,
        None => (0.5 * (n_obs as f64).sqrt()).round_ties_even() as usize,
    }
    .max(1);
    let k_adj = (k as f64 * (1.0 + n_sim as f64 / n_obs as f64)).round_ties_even() as usize;
    if k_adj > n_obs + n_sim {
        return Err(KernelError::param(
            "n_neighbors",
            format!(
                "{k} neighbours ({k_adj} with the doublets) exceed the {} cells and doublets",
                n_obs + n_sim
            ),
        ));
    }
    let manifold = embed(obs, sim, params.n_prin_comps, params.prep)?;
    let (counts, sim_neighbors) = sim_neighbors(&manifold, k_adj, params.neighbor_parents)?;
    let neighbor_parents = sim_neighbors.map(|lists| {
        lists
            .into_iter()
            .map(|doublets| {
                let mut p: Vec<u32> = doublets.iter().flat_map(|&d| parents[d as usize]).collect();
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect()
    });
    let scores = scores_from_counts(
        &counts,
        n_obs,
        k_adj,
        params.expected_doublet_rate,
        params.stdev_doublet_rate,
    );
    let threshold = params.threshold.or_else(|| threshold_minimum(&scores.sim));
    let call = threshold.map(|t| call_at(&scores, t));
    Ok(Doublets {
        scored: vec![true; n_obs],
        scores,
        call,
        parents,
        n_neighbors: k,
        neighbor_parents,
    })
}

/// How many doublets are among each cell's neighbours, counted as scanpy counts them (see
/// `score.rs`): the cell itself and its `k_adj - 1` nearest other cells, or only those others
/// when two points coincide. With `lists`, also each observed cell's doublet neighbours (as
/// doublet rows) among its `k_adj - 1` nearest others.
fn sim_neighbors(
    m: &Manifold,
    k_adj: usize,
    lists: bool,
) -> Result<(Vec<u32>, Option<Vec<Vec<u32>>>)> {
    let n_obs = m.obs.n_rows;
    let mut all = m.obs.clone();
    all.n_rows += m.sim.n_rows;
    all.data.extend_from_slice(&m.sim.data);
    let drop_self = has_coincident_rows(&all);
    let knn = knn_exact(&all, k_adj)?;
    let others = |i: usize| {
        knn.indices[i * k_adj..(i + 1) * k_adj]
            .iter()
            .filter(move |&&j| j as usize != i)
            .take(k_adj - 1)
            .filter(move |&&j| j as usize >= n_obs)
    };
    let counts = (0..all.n_rows)
        .map(|i| others(i).count() as u32 + u32::from(!drop_self && i >= n_obs))
        .collect();
    let lists = lists.then(|| {
        (0..n_obs)
            .map(|i| others(i).map(|&j| j - n_obs as u32).collect())
            .collect()
    });
    Ok((counts, lists))
}

/// Whether two rows are equal bit for bit (a doublet and the doublet of the same pair reversed).
fn has_coincident_rows(x: &crate::dense::DenseMatrix<f32>) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(x.n_rows);
    (0..x.n_rows).any(|i| {
        let bits: Vec<u32> = x.row(i).iter().map(|v| v.to_bits()).collect();
        !seen.insert(bits)
    })
}

fn check_rates(p: &ScrubletParams) -> Result<()> {
    if !(p.expected_doublet_rate > 0.0 && p.expected_doublet_rate < 1.0) {
        return Err(KernelError::param(
            "expected_doublet_rate",
            format!("must be in (0, 1), got {}", p.expected_doublet_rate),
        ));
    }
    if !(p.stdev_doublet_rate >= 0.0 && p.stdev_doublet_rate.is_finite()) {
        return Err(KernelError::param(
            "stdev_doublet_rate",
            format!("must be a number >= 0, got {}", p.stdev_doublet_rate),
        ));
    }
    if let Some(t) = p.threshold {
        if !t.is_finite() {
            return Err(KernelError::param(
                "threshold",
                format!("must be a number, got {t}"),
            ));
        }
    }
    Ok(())
}
