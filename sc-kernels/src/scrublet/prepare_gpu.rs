//! Scrublet's preparation on the GPU, for the linear settings (see [`super::linear`]): the
//! host's [`super::prepare_host`] step for step with the pipeline's own device kernels (the
//! filters, the median normalization, `log1p`, the highly variable genes, the per-million
//! counts, the genes' moments) and the PCA's device route fed block by block with z-scores
//! (`embed.cu`); the doublets' coordinates come from their parents' on the host
//! ([`doublets_from_parents`]). Up to f32 rounding, the host's embedding.

use super::embed::{check_components, doublets_from_parents, gene_factors, Manifold};
use super::simulate::doublet_pairs;
use super::{check_hvg, check_scored, Embedded, ScrubletParams, PER_MILLION};
use crate::error::Result;
use crate::filter::{filter_cells_gpu, filter_genes_gpu, CellFilter, GeneFilter};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::{col_moments, row_stats, Transform};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{compact, DeviceCsr, DeviceDense, GpuContext};
use crate::hvg::{highly_variable_genes_gpu, HvgParams};
use crate::log1p::log1p_gpu;
use crate::normalize::{normalize_total_gpu, NormalizeParams};
use crate::pca::{pca_dense_blocks, PcaParams};
use crate::stats::mean_var_from_sums;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "scrublet_embed",
    source: include_str!("embed.cu"),
};

/// Bytes of one dense block of z-scores handed to the PCA (two are on the device at a time).
const BLOCK_BYTES: usize = 256 << 20;

/// The scored cells, their embedding and the doublets' (drawn as the host draws them), of the
/// counts `counts` on the device (only read; the callers bind `ctx` to the thread first).
pub(super) fn prepare_gpu(
    ctx: &GpuContext,
    counts: &DeviceCsr,
    params: &ScrubletParams,
) -> Result<Embedded> {
    let mut trace = PhaseTrace::new(ctx, "scrublet");
    let genes = filter_genes_gpu(ctx, counts, GeneFilter::MinCells(3))?;
    let x = compact::select_cols(ctx, counts, &genes.keep)?;
    let cells = filter_cells_gpu(ctx, &x, CellFilter::MinGenes(3))?;
    let raw = compact::select_rows(ctx, &x, &cells.keep)?;
    drop(x);
    check_scored(raw.n_rows, counts.n_rows)?;
    trace.mark("filters")?;
    let mut norm = raw.try_clone(ctx)?;
    normalize_total_gpu(ctx, &mut norm, &NormalizeParams::default())?;
    let mut logged = norm.try_clone(ctx)?;
    log1p_gpu(ctx, &mut logged, None)?;
    let hvg = highly_variable_genes_gpu(ctx, &logged, &HvgParams::default(), None, None)?;
    drop(logged);
    check_hvg(&hvg)?;
    trace.mark("normalize, log1p, highly variable genes")?;
    let totals = row_stats(ctx, &compact::select_cols(ctx, &raw, &hvg.highly_variable)?)?.0;
    drop(raw);
    let mut obs = compact::select_cols(ctx, &norm, &hvg.highly_variable)?;
    drop(norm);
    normalize_total_gpu(ctx, &mut obs, &PER_MILLION)?;
    let parents = doublet_pairs(obs.n_rows, params.sim_doublet_ratio, params.random_state)?;
    trace.mark("per million, doublets drawn")?;
    let manifold = embed_gpu(ctx, &obs, &totals, &parents, params)?;
    trace.mark("embedding (z-scores, PCA, doublets from parents)")?;
    Ok(Embedded {
        scored: cells.keep,
        manifold,
        parents,
    })
}

/// [`super::embed::embed_linear`] of the per-million counts `obs` on the device.
fn embed_gpu(
    ctx: &GpuContext,
    obs: &DeviceCsr,
    totals: &[f64],
    parents: &[[u32; 2]],
    params: &ScrubletParams,
) -> Result<Manifold> {
    let (n, g) = (obs.n_rows, obs.n_cols);
    check_components(params.n_prin_comps, n, g)?;
    let m = col_moments(ctx, obs, Transform::Identity, None)?;
    let (_, var) = mean_var_from_sums(&m.sums, &m.sq, n);
    let factor = ctx.upload(&gene_factors(&var, params.prep))?;
    // The blocks are made on the copy lane's stream: the counts and factors must be there.
    ctx.synchronize()?;
    let rows = (BLOCK_BYTES / (4 * g.max(1))).max(1);
    let make = |lane: &GpuContext, k: usize| -> Result<DeviceDense> {
        let row0 = k * rows;
        let len = rows.min(n - row0);
        let out = lane.alloc::<f32>(len * g)?;
        let f = lane.function(SRC, "scrublet_scaled_rows")?;
        let (row0_64, len64, g64) = (row0 as u64, len as u64, g as u64);
        let mut l = lane.launcher(&f);
        l.arg(&obs.indptr)
            .arg(&obs.indices)
            .arg(&obs.data)
            .arg(&row0_64)
            .arg(&len64)
            .arg(&g64)
            .arg(&factor)
            .arg(&out);
        lane.launch(l, lane.filling_rows(len), "scrublet_scaled_rows")?;
        Ok(DeviceDense {
            n_rows: len,
            n_cols: g,
            data: out,
        })
    };
    let fit = pca_dense_blocks(
        ctx,
        n,
        g,
        n.div_ceil(rows),
        make,
        None,
        &PcaParams {
            n_comps: params.n_prin_comps,
            zero_center: params.prep.mean_center,
        },
    )?;
    let sim = doublets_from_parents(&fit, totals, parents);
    Ok(Manifold {
        obs: fit.x_pca,
        sim,
    })
}
