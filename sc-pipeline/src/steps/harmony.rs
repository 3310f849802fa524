//! `harmony_integrate` (scanpy's `external.pp.harmony_integrate`, rapids-singlecell's
//! `pp.harmony_integrate` with `flavor="harmony2"`): batch correction of the PCA embedding.
//!
//! Reads `obsm['X_pca']` and the batch of each cell from `obs[key]` (categorical, string,
//! integer or boolean; at least two distinct values, none missing); writes
//! `obsm['X_pca_harmony']` (float32, cells x comps, as rapids-singlecell's `adjusted_basis`).
//! Runs on the GPU when X lives there (as pca decides; `X_pca` is uploaded, the result
//! downloaded), else on the CPU; both compute the same algorithm from the same random numbers
//! (`sc_kernels::harmony`), equal within the GPU tests' tolerance.

use super::kernel_error;
use super::step::{no_budget_check, no_device_bytes, Phase, Step, StepEnv};
use crate::anndata::DenseArray;
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::comm::{all_ranks_ok, rank_rows};
use sc_kernels::gpu::GpuContext;
use sc_kernels::harmony::{
    harmony_integrate as harmony_cpu, harmony_integrate_gpu, harmony_integrate_gpu_rows,
    HarmonyParams, HarmonyResult,
};
use sc_kernels::{Communicator, DenseMatrix};
use std::sync::Arc;

/// The pipeline's row: harmony2's defaults on the batches of `--harmony KEY`; its cells split
/// across the GPUs when they have communicators, else on the first GPU (none: the CPU).
pub(crate) const ROW: Step = Step {
    name: "harmony_integrate",
    phase: Phase::CellGraph,
    enabled: |c| c.harmony.is_some(),
    run: run_step,
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &[sc_kernels::harmony::KERNELS],
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The batch column must exist with at least two batches before any step runs (found after PCA,
/// the error would cost the whole run).
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let h = config
        .harmony
        .as_ref()
        .expect("the row runs only with harmony");
    batches(adata, &h.key).map(|_| ())
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let h = env
        .config
        .harmony
        .as_ref()
        .expect("the row runs only with harmony");
    let (gpus, group) = (env.gpus, env.group);
    let split = gpus.len() > 1 && group.len() == gpus.len();
    let s = if split {
        let ranks: Vec<_> = gpus.iter().cloned().zip(group.iter().cloned()).collect();
        harmony_integrate_across(a, &h.key, &h.params, &ranks)?
    } else {
        harmony_integrate_on(a, &h.key, &h.params, gpus.first())?
    };
    Ok(format!(
        "key={}: {} batches, {} clusters, {} rounds{}{}",
        h.key,
        s.n_batches,
        s.n_clusters,
        s.iterations,
        if s.converged { "" } else { " (not converged)" },
        if split {
            format!(", cells split across {} GPUs", gpus.len())
        } else {
            String::new()
        }
    ))
}

/// The embedding harmony corrects.
pub const HARMONY_BASIS: &str = "X_pca";
/// Where the corrected embedding goes.
pub const HARMONY_ADJUSTED_BASIS: &str = "X_pca_harmony";

/// What a run did, for the step's report line.
#[derive(Debug, Clone, PartialEq)]
pub struct HarmonySummary {
    pub n_batches: usize,
    pub n_clusters: usize,
    pub iterations: usize,
    pub converged: bool,
}

/// Corrects `obsm['X_pca']` for the batches in `obs[key]` into `obsm['X_pca_harmony']`.
pub fn harmony_integrate(
    adata: &mut AnnData,
    key: &str,
    params: &HarmonyParams,
) -> Result<HarmonySummary> {
    let gpu = super::x_gpu(adata);
    harmony_integrate_on(adata, key, params, gpu.as_ref())
}

/// [`harmony_integrate`] on the given GPU (`None`: the CPU), wherever X is.
pub fn harmony_integrate_on(
    adata: &mut AnnData,
    key: &str,
    params: &HarmonyParams,
    gpu: Option<&Arc<GpuContext>>,
) -> Result<HarmonySummary> {
    let (codes, n_batches) = batches(adata, key)?;
    let result = with_basis(adata, |z| match gpu {
        Some(ctx) => harmony_integrate_gpu(ctx, z, &codes, n_batches, params),
        None => harmony_cpu(z, &codes, n_batches, params),
    })?
    .map_err(kernel_error(STEP))?;
    store(adata, n_batches, result)
}

/// [`harmony_integrate`] with the cells split across a group of GPUs: rank `r` (`group[r]`,
/// a context and its communicator) corrects the `r`-th block of rows, and the cluster
/// statistics are summed across the group (`sc_kernels::harmony::harmony_integrate_gpu_rows`).
pub fn harmony_integrate_across(
    adata: &mut AnnData,
    key: &str,
    params: &HarmonyParams,
    group: &[(Arc<GpuContext>, Arc<dyn Communicator>)],
) -> Result<HarmonySummary> {
    let (codes, n_batches) = batches(adata, key)?;
    let parts = with_basis(adata, |z| {
        harmony_on_ranks(z, &codes, n_batches, params, group)
    })?;
    let mut results = all_ranks_ok(parts).map_err(kernel_error(STEP))?;
    let mut whole = results.remove(0);
    for r in results {
        whole.corrected.data.extend(r.corrected.data);
        whole.corrected.n_rows += r.corrected.n_rows;
    }
    store(adata, n_batches, whole)
}

/// Each rank of `group` corrects its block of `z`'s rows (one thread a rank).
fn harmony_on_ranks(
    z: &DenseMatrix<f32>,
    codes: &[u32],
    n_batches: usize,
    params: &HarmonyParams,
    group: &[(Arc<GpuContext>, Arc<dyn Communicator>)],
) -> Vec<sc_kernels::Result<HarmonyResult>> {
    let (n, size) = (z.n_rows, group.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(r, (ctx, comm))| {
                s.spawn(move || {
                    let part = harmony_integrate_gpu_rows(
                        ctx,
                        comm.as_ref(),
                        z,
                        codes,
                        n_batches,
                        params,
                        rank_rows(n, size, r),
                    );
                    if let Err(e) = &part {
                        comm.abort(&format!("rank {r}: harmony: {e}"));
                    }
                    part
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

const STEP: &str = "harmony_integrate";

/// Each cell's batch code in `obs[key]` and the number of batches (at least 2).
fn batches(adata: &AnnData, key: &str) -> Result<(Vec<u32>, usize)> {
    let (codes, groups) = super::obs_labels(adata, STEP, "the batch key", key)?;
    if groups.len() < 2 {
        return Err(Error::param(
            STEP,
            format!(
                "obs['{key}'] has a single value ({}): harmony needs at least 2 batches",
                groups.first().map_or("none", |g| g.as_str())
            ),
        ));
    }
    Ok((codes, groups.len()))
}

/// `obsm['X_pca_harmony']` from the result, and the step's summary.
fn store(adata: &mut AnnData, n_batches: usize, result: HarmonyResult) -> Result<HarmonySummary> {
    let summary = HarmonySummary {
        n_batches,
        n_clusters: result.n_clusters,
        iterations: result.iterations,
        converged: result.converged,
    };
    let c = result.corrected;
    adata.obsm.insert(
        HARMONY_ADJUSTED_BASIS.into(),
        DenseArray::matrix_f32(c.n_rows, c.n_cols, c.data)?,
    );
    Ok(summary)
}

/// Runs `f` on `obsm['X_pca']` (moved out of `adata` for the call, not copied).
fn with_basis<T>(adata: &mut AnnData, f: impl FnOnce(&DenseMatrix<f32>) -> T) -> Result<T> {
    super::with_obsm_matrix(adata, HARMONY_BASIS, f)?.ok_or_else(|| Error::Missing {
        step: "harmony_integrate",
        problem: format!("obsm has no '{HARMONY_BASIS}': run pca first"),
    })
}
