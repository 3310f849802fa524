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
//!    cells ([`embed`]). With neither `log_transform` nor thinning ([`linear`]), the doublets
//!    are not made: only their parents are drawn ([`doublet_pairs`]), and their coordinates
//!    follow from the parents' ([`embed_linear`]); steps 1 to 4 then run on the GPU when one
//!    is given (`prepare_gpu`), with the pipeline's own kernels;
//! 5. the doublets among each one's `k_adj = round(k (1 + n_sim / n_obs))` nearest, where
//!    `k = round(0.5 sqrt(n_obs))` unless given ([`count_host`], [`count_gpu`]: exact up to
//!    [`EXACT_POINTS`] cells and doublets, an inverted file above), and each cell's score from
//!    them ([`scores_from_counts`]);
//! 6. the threshold at the minimum between the two modes of the doublets' scores
//!    ([`threshold_minimum`]), unless given, and the call.
//!
//! The doublets are scanpy's for the same seed (numpy's `RandomState` repeated, see
//! [`simulate_doublets`]). Differences from scanpy, on purpose: the kNN is exact up to
//! [`EXACT_POINTS`] (scanpy switches to pynndescent's approximate kNN from 2,731 cells); a gene
//! equal in every
//! observed cell gets a z-score of 0 (scanpy's PCA fails on its NaN); thinned doublets
//! (`synthetic_doublet_umi_subsampling < 1`) are drawn with our own numbers.

mod embed;
mod neighbors;
mod neighbors_gpu;
mod prepare_gpu;
mod score;
mod simulate;
#[cfg(test)]
mod tests;
mod threshold;

pub use embed::{doublets_from_parents, embed, embed_linear, Manifold, Preparation};
pub use neighbors::{count_host, Counted, Search, EXACT_POINTS};
pub use neighbors_gpu::{count_gpu, MAX_DIMS as GPU_MAX_DIMS};
pub use score::{call_at, scores_from_counts, Call, Scores};
pub use simulate::{doublet_pairs, simulate_doublets, Simulated};
pub use threshold::threshold_minimum;

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::filter::{filter_cells, filter_genes, CellFilter, GeneFilter};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceCsr, GpuContext};
use crate::hvg::{highly_variable_genes, HvgParams, HvgResult};
use crate::log1p::log1p;
use crate::normalize::{check_counts_gpu, normalize_total, NormalizeParams};
use crate::stats::row_sums;
use prepare_gpu::prepare_gpu;
use std::borrow::Cow;

/// The modules scrublet's GPU route launches: its embedding's and counts' own, and the kNN's
/// scan (the lists' k-means); the preparation's other kernels are their steps'.
pub const KERNELS: [KernelSource; 3] = [
    prepare_gpu::SRC,
    neighbors_gpu::SRC,
    crate::neighbors::scan::device::SRC,
];

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

/// Scrublet on one batch's raw counts (cells x genes); with `gpu`, the preparation (for the
/// linear settings, see [`linear`]) and the neighbour counts on the device, the rest on the
/// host. A preparation that runs out of device memory is done again on the host.
pub fn scrublet(
    counts: &CsrMatrix<f32>,
    params: &ScrubletParams,
    gpu: Option<&GpuContext>,
) -> Result<Doublets> {
    check_rates(params)?;
    counts.check_counts()?;
    let embedded = match gpu {
        Some(ctx) if linear(params) => or_on_host(
            ctx.bind_to_thread()
                .and_then(|()| DeviceCsr::upload(ctx, counts))
                .and_then(|x| prepare_gpu(ctx, &x, params)),
            || Ok(Cow::Borrowed(counts)),
            params,
        )?,
        _ => prepare_host(counts, params, !linear(params))?,
    };
    finish(embedded, params, gpu)
}

/// [`scrublet`] of counts already on `ctx`'s device (X kept there between steps): nothing
/// crosses to the host but the embedding, unless the settings are not [`linear`] (their
/// doublets are made on the host) or the device's memory runs out.
pub fn scrublet_device(
    ctx: &GpuContext,
    counts: &DeviceCsr,
    params: &ScrubletParams,
) -> Result<Doublets> {
    check_rates(params)?;
    ctx.bind_to_thread()?;
    check_counts_gpu(ctx, counts, "scrublet")?;
    let embedded = if linear(params) {
        or_on_host(
            prepare_gpu(ctx, counts, params),
            || Ok(Cow::Owned(counts.download(ctx)?)),
            params,
        )?
    } else {
        prepare_host(&counts.download(ctx)?, params, true)?
    };
    finish(embedded, params, Some(ctx))
}

/// The device's preparation, or the host's (of the counts `host` gives) when it ran out of
/// device memory.
fn or_on_host<'a>(
    prepared: Result<Embedded>,
    host: impl FnOnce() -> Result<Cow<'a, CsrMatrix<f32>>>,
    params: &ScrubletParams,
) -> Result<Embedded> {
    match prepared {
        Err(e) if e.out_of_memory().is_some() => {
            PhaseTrace::on_host("scrublet")
                .mark("the device's memory ran out: the preparation again on the host")?;
            prepare_host(&*host()?, params, !linear(params))
        }
        prepared => prepared,
    }
}

/// Steps 5 and 6 on the prepared embedding, the scored cells kept.
fn finish(
    embedded: Embedded,
    params: &ScrubletParams,
    gpu: Option<&GpuContext>,
) -> Result<Doublets> {
    let mut found = classify(embedded.manifold, embedded.parents, params, gpu)?;
    found.scored = embedded.scored;
    Ok(found)
}

/// Whether the doublets' embedding follows from their parents' ([`embed_linear`]): with their
/// counts neither logged (`log_transform`) nor thinned, a doublet's normalized counts are a
/// weighted mean of its parents'.
pub fn linear(params: &ScrubletParams) -> bool {
    !params.log_transform && params.synthetic_doublet_umi_subsampling >= 1.0
}

/// The scored cells, the embedding of them and of the doublets, and the doublets' parents.
struct Embedded {
    scored: Vec<bool>,
    manifold: Manifold,
    parents: Vec<[u32; 2]>,
}

/// Normalized to a million counts per cell, nothing kept per cell.
const PER_MILLION: NormalizeParams = NormalizeParams {
    target_sum: Some(1e6),
    exclude_highly_expressed: false,
    max_fraction: 0.05,
    per_cell: false,
};

/// Steps 1 to 4 on the host: with `make_doublets` the doublets are made and embedded (as
/// settings that are not [`linear`] need), else their coordinates follow from their parents'.
fn prepare_host(
    counts: &CsrMatrix<f32>,
    params: &ScrubletParams,
    make_doublets: bool,
) -> Result<Embedded> {
    let mut trace = PhaseTrace::on_host("scrublet");
    let genes = filter_genes(counts, GeneFilter::MinCells(3))?;
    let x = counts.select_cols(&genes.keep)?;
    let cells = filter_cells(&x, CellFilter::MinGenes(3))?;
    let raw = x.select_rows(&cells.keep)?;
    check_scored(raw.n_rows, counts.n_rows)?;
    trace.mark("filters")?;
    let mut norm = raw.clone();
    normalize_total(&mut norm, &NormalizeParams::default())?;
    let mut logged = norm.clone();
    log1p(&mut logged, None)?;
    let hvg = highly_variable_genes(&logged, &HvgParams::default(), None, None)?;
    drop(logged);
    check_hvg(&hvg)?;
    trace.mark("normalize, log1p, highly variable genes")?;
    let raw = raw.select_cols(&hvg.highly_variable)?;
    let mut obs = norm.select_cols(&hvg.highly_variable)?;
    drop(norm);
    if !make_doublets {
        let totals = row_sums(&raw);
        normalize_total(&mut obs, &PER_MILLION)?;
        let parents = doublet_pairs(raw.n_rows, params.sim_doublet_ratio, params.random_state)?;
        trace.mark("per million, doublets drawn")?;
        let manifold = embed_linear(&obs, &totals, &parents, params.n_prin_comps, params.prep)?;
        trace.mark("embedding (z-scores, PCA, doublets from parents)")?;
        return Ok(Embedded {
            scored: cells.keep,
            manifold,
            parents,
        });
    }
    let simulated = simulate_doublets(
        &raw,
        params.sim_doublet_ratio,
        params.synthetic_doublet_umi_subsampling,
        params.random_state,
    )?;
    trace.mark("doublets simulated")?;
    let mut sim = simulated.counts;
    if params.log_transform {
        log1p(&mut obs, None)?;
        log1p(&mut sim, None)?;
    }
    normalize_total(&mut obs, &PER_MILLION)?;
    normalize_total(&mut sim, &PER_MILLION)?;
    trace.mark("both normalized")?;
    let manifold = embed(&obs, &sim, params.n_prin_comps, params.prep)?;
    trace.mark("embedding (z-scores, PCA, projection)")?;
    Ok(Embedded {
        scored: cells.keep,
        manifold,
        parents: simulated.parents,
    })
}

/// Refuses a batch with fewer than 2 cells left by the filters (of `n_cells`).
fn check_scored(n_scored: usize, n_cells: usize) -> Result<()> {
    if n_scored < 2 {
        return Err(KernelError::param(
            "scrublet",
            format!(
                "{n_scored} of {n_cells} cells have counts in at least 3 genes (each in at \
                 least 3 cells); scrublet needs at least 2"
            ),
        ));
    }
    Ok(())
}

fn check_hvg(hvg: &HvgResult) -> Result<()> {
    if !hvg.highly_variable.iter().any(|&h| h) {
        return Err(KernelError::param(
            "scrublet",
            "no gene passes scanpy's highly variable cutoffs (seurat flavour) in this batch",
        ));
    }
    Ok(())
}

/// Scrublet's classifier on observed cells and simulated doublets already normalized over the
/// same genes (scanpy's `scrublet(adata, adata_sim=...)`): embedding, kNN, scores and call.
/// `parents` are the doublets' parents (kept in the result). Every observed cell is scored.
/// The neighbour counts run on `gpu` when given, unless the neighbours' parents are asked for
/// or the components exceed [`GPU_MAX_DIMS`].
pub fn call_doublets(
    obs: &CsrMatrix<f32>,
    sim: &CsrMatrix<f32>,
    parents: Vec<[u32; 2]>,
    params: &ScrubletParams,
    gpu: Option<&GpuContext>,
) -> Result<Doublets> {
    check_rates(params)?;
    let (n_obs, n_sim) = (obs.n_rows, sim.n_rows);
    if n_obs == 0 || n_sim == 0 {
        return Err(KernelError::param(
            "scrublet",
            format!("needs observed cells and simulated doublets, got {n_obs} and {n_sim}"),
        ));
    }
    neighbours(params, n_obs, n_sim)?;
    let mut trace = PhaseTrace::on_host("scrublet");
    let manifold = embed(obs, sim, params.n_prin_comps, params.prep)?;
    trace.mark("embedding (z-scores, PCA, projection)")?;
    classify(manifold, parents, params, gpu)
}

/// `k` (scanpy's `n_neighbors`) and `k_adj`, the neighbours counted among cells and doublets.
fn neighbours(params: &ScrubletParams, n_obs: usize, n_sim: usize) -> Result<(usize, usize)> {
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
    Ok((k, k_adj))
}

/// Steps 5 and 6 on an embedding: the neighbour counts (on `gpu` where it can), the scores and
/// the call.
fn classify(
    manifold: Manifold,
    parents: Vec<[u32; 2]>,
    params: &ScrubletParams,
    gpu: Option<&GpuContext>,
) -> Result<Doublets> {
    let (n_obs, n_sim) = (manifold.obs.n_rows, manifold.sim.n_rows);
    let (k, k_adj) = neighbours(params, n_obs, n_sim)?;
    let mut trace = PhaseTrace::on_host("scrublet");
    let (counts, sim_neighbors) = sim_neighbors(&manifold, k_adj, params.neighbor_parents, gpu)?;
    trace.mark(if gpu.is_some() && !params.neighbor_parents {
        "neighbour counts (lists and scan on the GPU)"
    } else {
        "neighbour counts (on the host)"
    })?;
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
/// doublet rows) among its `k_adj - 1` nearest others (on the host).
fn sim_neighbors(
    m: &Manifold,
    k_adj: usize,
    lists: bool,
    gpu: Option<&GpuContext>,
) -> Result<(Vec<u32>, Option<Vec<Vec<u32>>>)> {
    let (n_obs, d) = (m.obs.n_rows, m.obs.n_cols);
    let n = n_obs + m.sim.n_rows;
    let mut all = Vec::with_capacity(n * d);
    all.extend_from_slice(&m.obs.data);
    all.extend_from_slice(&m.sim.data);
    let counted = match gpu {
        Some(ctx) if !lists && d <= GPU_MAX_DIMS => {
            let mut trace = PhaseTrace::new(ctx, "scrublet neighbours");
            let xd = ctx.upload(&all)?;
            let search = Search::gpu(ctx, &xd, n, d, k_adj)?;
            trace.mark("lists (k-means on the GPU, probes on the host)")?;
            let counted = count_gpu(ctx, &xd, d, n_obs, k_adj, &search)?;
            trace.mark("scan (scrublet_counts)")?;
            counted
        }
        _ => count_host(
            &all,
            d,
            n_obs,
            k_adj,
            &Search::host(&all, n, d, k_adj),
            lists,
        ),
    };
    let drop_self = counted.coincident;
    let counts = counted
        .counts
        .iter()
        .enumerate()
        .map(|(i, &c)| c + u32::from(!drop_self && i >= n_obs))
        .collect();
    Ok((counts, counted.lists))
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
