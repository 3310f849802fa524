//! `diffmap` (scanpy's `tl.diffmap`): the diffusion map of the neighbors graph
//! (`sc_kernels::diffmap`) into `obsm['X_diffmap']` and `uns['diffmap_evals']`, both f32 as
//! scanpy writes them. Its row (`--diffmap`, off by default) runs after tsne. Computed on the
//! host.

use super::step::{no_budget_check, no_device_bytes, no_input_check, Phase, Step, StepEnv};
use super::{connectivities, kernel_error};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::diffmap::{diffmap as diffusion_map, Diffmap};

/// The pipeline's row: on the host, the eigensolver's start from scanpy's seed 0.
pub(crate) const ROW: Step = Step {
    name: "diffmap",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_diffmap,
    run: |a, env: &StepEnv<'_>| {
        let n_comps = env.config.diffmap.expect("the row runs only with diffmap");
        diffmap(a, n_comps, 0)?;
        Ok(format!("{n_comps} components on the CPU"))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The diffusion map of `obsp['connectivities']` with `n_comps` components, the eigensolver's
/// start from `seed`.
pub fn diffmap(adata: &mut AnnData, n_comps: usize, seed: u64) -> Result<()> {
    const STEP: &str = "diffmap";
    let graph = connectivities(adata, STEP)?;
    let n = graph.n_rows;
    let Diffmap {
        evals,
        components,
        n_comps,
    } = diffusion_map(graph, n_comps, seed).map_err(kernel_error(STEP))?;
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
