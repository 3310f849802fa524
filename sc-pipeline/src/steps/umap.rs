//! `umap` (scanpy's `tl.umap`): a 2-D layout of the cells from the neighbors graph.
//!
//! Reads `obsp['connectivities']`; writes `obsm['X_umap']` (float32, cells x components) and
//! `uns['umap']` with scanpy's keys (`params`: `a`, `b`, and `random_state` when not 0). On a GPU
//! when the run has one (the epochs, and the spectral start's Lanczos vectors from 50,000 cells
//! on), else on the CPU: the same layout bit for bit on both (`sc_kernels::umap`).

use super::kernel_error;
use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::umap::{Layout, UmapParams};

/// The pipeline's row: on the first GPU of the run (none: the CPU).
pub(crate) const ROW: Step = Step {
    name: "umap",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_umap,
    run: |a, env: &StepEnv<'_>| {
        let params = env.config.umap.expect("the row runs only with umap");
        let layout = umap_on(a, &params, env.gpus.first().map(|g| g.as_ref()))?;
        Ok(format!(
            "checks and schedule {:.2} s; start: {} ({:.2} s); {} epochs on the {} ({:.2} s)",
            layout.schedule_seconds,
            layout.init,
            layout.start_seconds,
            layout.n_epochs,
            if env.gpus.is_empty() { "CPU" } else { "GPU" },
            layout.epochs_seconds
        ))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::umap::KERNELS,
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: true,
    waits_for_beside: false,
};

/// The GPU's epochs hold the graph (at most `2 k` edges a cell once symmetrized), each edge's
/// column (4 bytes) and four f64 schedule entries, the row offsets, and two layouts; before
/// them the spectral start holds the graph (8 bytes an edge), its Lanczos basis (101 vectors of
/// f64 per cell) and a few vectors more.
fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    let (n, k) = (s.n_obs as u64, config.n_neighbors.unwrap_or(15) as u64);
    let dim = config.umap.map_or(2, |u| u.n_components) as u64;
    let epochs = 2 * k * n * (4 + 4 * 8) + (n + 1) * 8 + 2 * n * dim * 4;
    let start = 2 * k * n * 8 + (n + 1) * 8 + (101 + 5 + dim) * n * 8;
    StepBytes {
        kept: 0,
        transient: epochs.max(start),
    }
}

/// Lays out the cells of `adata` (scanpy's `tl.umap`) on `gpu` (none: the CPU).
pub fn umap_on(
    adata: &mut AnnData,
    params: &UmapParams,
    gpu: Option<&GpuContext>,
) -> Result<Layout> {
    const STEP: &str = "umap";
    let graph = super::connectivities(adata, STEP)?;
    let layout = match gpu {
        Some(ctx) => sc_kernels::umap::umap_gpu(ctx, graph, params),
        None => sc_kernels::umap::umap(graph, params),
    }
    .map_err(kernel_error(STEP))?;
    let e = &layout.embedding;
    adata.obsm.insert(
        "X_umap".into(),
        DenseArray::new(vec![e.n_rows, e.n_cols], ArrayData::F32(e.data.clone()))?,
    );
    let mut p = vec![("a", Value::float(layout.a)), ("b", Value::float(layout.b))];
    if params.random_state != 0 {
        p.push(("random_state", Value::int(params.random_state as i64)));
    }
    adata
        .uns
        .insert("umap".into(), Value::dict([("params", Value::dict(p))]));
    Ok(layout)
}

/// [`umap_on`] where X lives (its GPU when on one).
pub fn umap(adata: &mut AnnData, params: &UmapParams) -> Result<Layout> {
    let gpu = super::x_gpu(adata);
    umap_on(adata, params, gpu.as_deref())
}
