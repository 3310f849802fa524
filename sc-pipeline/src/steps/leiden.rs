//! `leiden` (scanpy's `tl.leiden`, igraph flavour's defaults): clusters of the neighbors graph.
//!
//! Reads `obsp['connectivities']`; writes, for each resolution, `obs[key]` (categorical,
//! string labels `'0'`, `'1'`, ... numbered by cluster size, largest first) and `uns[key]`
//! (`params`: `resolution`, `random_state`, `n_iterations`; and the partition's `modularity`).
//! On the run's first GPU when it has one (`sc_kernels::leiden::leiden_gpu`, the parallel
//! algorithm: the same labels bit for bit as its CPU twin `leiden_parallel`), else on the CPU
//! (`sc_kernels::leiden::leiden`, the sequential algorithm); each the same labels bit for bit on
//! every run, the two of the same quality but not the same labels.

use super::connectivities;
use super::kernel_error;
use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use crate::anndata::Value;
use crate::steps::{LeidenOptions, PipelineConfig};
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::leiden::{LeidenParams, Partition};

/// The pipeline's row: one partition per resolution.
pub(crate) const ROW: Step = Step {
    name: "leiden",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_leiden,
    run: |a, env: &StepEnv<'_>| {
        let options = env
            .config
            .leiden
            .as_ref()
            .expect("the row runs only with leiden");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let notes = leiden_all_on(a, options, gpu)?
            .iter()
            .zip(&options.resolutions)
            .map(|(p, r)| {
                format!(
                    "resolution {r}: {} clusters, modularity {:.4}",
                    p.n_communities, p.quality
                )
            })
            .collect::<Vec<_>>();
        let on = if gpu.is_some() {
            "on the GPU (parallel Leiden)"
        } else {
            "on the CPU"
        };
        Ok(format!("{}; {on}", notes.join("; ")))
    },
    generated: None,
    device_bytes,
    kernels: &[sc_kernels::leiden::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The GPU Leiden holds the first level (at most `2 k` edges a cell once symmetrized: a column,
/// a fixed-point weight, and a hash-table slot of key and sum for up to four entries each), the
/// next level built from it (at most as large), and a few arrays of a value per cell.
pub(crate) fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    let (n, k) = (s.n_obs as u64, config.n_neighbors.unwrap_or(15) as u64);
    let edges = 2 * k * n;
    StepBytes {
        kept: 0,
        transient: edges * (2 * (4 + 8) + 4 * (4 + 8)) + n * 96,
    }
}

/// Every resolution of `options`, each into its column ([`LeidenOptions::key`]), on the GPU of
/// X when it lives on one.
pub fn leiden_all(adata: &mut AnnData, options: &LeidenOptions) -> Result<Vec<Partition>> {
    let gpu = super::x_gpu(adata);
    leiden_all_on(adata, options, gpu.as_deref())
}

/// [`leiden_all`] on `gpu` (none: the CPU).
pub fn leiden_all_on(
    adata: &mut AnnData,
    options: &LeidenOptions,
    gpu: Option<&GpuContext>,
) -> Result<Vec<Partition>> {
    options
        .resolutions
        .iter()
        .enumerate()
        .map(|(i, &resolution)| {
            let params = LeidenParams {
                resolution,
                ..options.params
            };
            leiden_on(adata, &params, &options.key(i), gpu)
        })
        .collect()
}

/// Clusters the cells of `adata` (scanpy's `tl.leiden`) into `obs[key]`, on the GPU of X when it
/// lives on one.
pub fn leiden(adata: &mut AnnData, params: &LeidenParams, key: &str) -> Result<Partition> {
    let gpu = super::x_gpu(adata);
    leiden_on(adata, params, key, gpu.as_deref())
}

/// [`leiden`] on `gpu` (none: the sequential CPU algorithm).
pub fn leiden_on(
    adata: &mut AnnData,
    params: &LeidenParams,
    key: &str,
    gpu: Option<&GpuContext>,
) -> Result<Partition> {
    const STEP: &str = "leiden";
    let graph = connectivities(adata, STEP)?;
    let p = partition(graph, params, gpu, STEP)?;
    write_partition(
        adata,
        key,
        &p,
        Value::dict([
            ("resolution", Value::float(params.resolution)),
            ("random_state", Value::int(params.random_state as i64)),
            ("n_iterations", Value::int(params.n_iterations as i64)),
        ]),
    )?;
    Ok(p)
}

/// The partition of `graph` on `gpu` (none: the sequential CPU algorithm).
pub(crate) fn partition(
    graph: &sc_kernels::CsrMatrix<f32>,
    params: &LeidenParams,
    gpu: Option<&GpuContext>,
    step: &'static str,
) -> Result<Partition> {
    match gpu {
        Some(ctx) => sc_kernels::leiden::leiden_gpu(ctx, graph, params),
        None => sc_kernels::leiden::leiden(graph, params),
    }
    .map_err(kernel_error(step))
}

/// `obs[key]` (the clusters, categorical) and `uns[key]` (`params`, the modularity), as scanpy.
pub(crate) fn write_partition(
    adata: &mut AnnData,
    key: &str,
    p: &Partition,
    params: Value,
) -> Result<()> {
    adata
        .obs
        .set(key, super::cluster_column(&p.membership, p.n_communities))?;
    adata.uns.insert(
        key.into(),
        Value::dict([("params", params), ("modularity", Value::float(p.quality))]),
    );
    Ok(())
}
