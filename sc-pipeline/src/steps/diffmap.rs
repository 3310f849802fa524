//! `diffmap` (scanpy's `tl.diffmap`): the diffusion map of the neighbors graph
//! (`sc_kernels::diffmap`) into `obsm['X_diffmap']` and `uns['diffmap_evals']`, both f32 as
//! scanpy writes them. Its row (`--diffmap`, off by default) runs after tsne. On the GPU when
//! there is one (the eigensolver's basis and products there: the host's bits), else on the host.

use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{connectivities, kernel_error};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::diffmap::{diffmap as diffusion_map, diffmap_gpu, Diffmap};
use sc_kernels::gpu::GpuContext;

/// The pipeline's row: on the first GPU of the run (none: the CPU), the eigensolver's start
/// from scanpy's seed 0.
pub(crate) const ROW: Step = Step {
    name: "diffmap",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_diffmap,
    run: |a, env: &StepEnv<'_>| {
        let n_comps = env.config.diffmap.expect("the row runs only with diffmap");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        diffmap(a, n_comps, 0, gpu)?;
        let on = if gpu.is_some() { "GPU" } else { "CPU" };
        Ok(format!("{n_comps} components on the {on}"))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::diffmap::KERNELS,
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The eigensolver's basis (`m + 1` columns of f64, `m = max(2 n_comps + 1, 20)`), a restart's
/// `m` new columns, its work vector and the transition matrix on the device (its stored values
/// counted from the cells: a kNN graph's few dozen a cell, twice for safety).
fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    let m = (2 * config.diffmap.unwrap_or(15) as u64 + 1).max(20);
    let columns = 2 * m + 2;
    StepBytes {
        kept: 0,
        transient: s.n_obs as u64 * (columns * 8 + 2 * 30 * 12 + 8),
    }
}

/// The diffusion map of `obsp['connectivities']` with `n_comps` components, the eigensolver's
/// start from `seed`: on `gpu` when given (the same bits), else on the host.
pub fn diffmap(
    adata: &mut AnnData,
    n_comps: usize,
    seed: u64,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    const STEP: &str = "diffmap";
    let graph = connectivities(adata, STEP)?;
    let n = graph.n_rows;
    let Diffmap {
        evals,
        components,
        n_comps,
    } = match gpu {
        Some(ctx) => diffmap_gpu(ctx, graph, n_comps, seed),
        None => diffusion_map(graph, n_comps, seed),
    }
    .map_err(kernel_error(STEP))?;
    adata.obsm.insert(
        "X_diffmap".into(),
        DenseArray::new(vec![n, n_comps], ArrayData::F32(components))?,
    );
    adata.uns.insert(
        "diffmap_evals".into(),
        Value::Array(DenseArray::new(vec![n_comps], ArrayData::F32(evals))?),
    );
    Ok(())
}
