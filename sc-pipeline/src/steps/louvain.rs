//! `louvain` (scanpy's `tl.louvain`): communities of the neighbors graph by Louvain's local
//! moving and aggregation (`LeidenParams::louvain`: Leiden's code without its refinement, until
//! an iteration changes nothing), on every edge counted as 1 unless `use_weights` (scanpy's
//! default; rapids-singlecell's uses the weights). Writes `obs['louvain']` (categorical, by
//! decreasing size) and `uns['louvain']` (`params`: resolution, random_state; the modularity).
//! Its row (`--louvain`, off by default) runs after leiden, on the run's first GPU when it has
//! one (the parallel algorithm), else on the CPU.

use super::connectivities;
use super::leiden::{partition, write_partition};
use super::step::{no_budget_check, no_input_check, Phase, Step, StepEnv};
use crate::anndata::Value;
use crate::steps::{LouvainOptions, PipelineConfig};
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::leiden::Partition;
use sc_kernels::CsrMatrix;

/// The pipeline's row.
pub(crate) const ROW: Step = Step {
    name: "louvain",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_louvain,
    run: |a, env: &StepEnv<'_>| {
        let options = env
            .config
            .louvain
            .as_ref()
            .expect("the row runs only with louvain");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let p = louvain_on(a, options, "louvain", gpu)?;
        Ok(format!(
            "resolution {}: {} clusters, modularity {:.4}; on the {}",
            options.params.resolution,
            p.n_communities,
            p.quality,
            if gpu.is_some() { "GPU" } else { "CPU" }
        ))
    },
    generated: None,
    device_bytes: super::leiden::device_bytes,
    kernels: &[sc_kernels::leiden::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// Louvain's communities of `obsp['connectivities']` into `obs[key]` and `uns[key]`, on `gpu`
/// (none: the CPU).
pub fn louvain_on(
    adata: &mut AnnData,
    options: &LouvainOptions,
    key: &str,
    gpu: Option<&GpuContext>,
) -> Result<Partition> {
    const STEP: &str = "louvain";
    let graph = connectivities(adata, STEP)?;
    let unweighted;
    let graph = if options.use_weights {
        graph
    } else {
        unweighted = CsrMatrix {
            data: vec![1.0; graph.data.len()],
            ..graph.clone()
        };
        &unweighted
    };
    let p = partition(graph, &options.params, gpu, STEP)?;
    write_partition(
        adata,
        key,
        &p,
        Value::dict([
            ("resolution", Value::float(options.params.resolution)),
            (
                "random_state",
                Value::int(options.params.random_state as i64),
            ),
        ]),
    )?;
    Ok(p)
}
