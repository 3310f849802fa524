//! `leiden` (scanpy's `tl.leiden`, igraph flavour's defaults): clusters of the neighbors graph.
//!
//! Reads `obsp['connectivities']`; writes, for each resolution, `obs[key]` (categorical,
//! string labels `'0'`, `'1'`, ... numbered by cluster size, largest first) and `uns[key]`
//! (`params`: `resolution`, `random_state`, `n_iterations`; and the partition's `modularity`).
//! On the CPU (`sc_kernels::leiden`): the same labels bit for bit on every run.

use super::kernel_error;
use super::umap::connectivities;
use crate::anndata::{ArrayData, Column, Value};
use crate::run::step::{no_device_bytes, no_input_check, Phase, Step, StepEnv};
use crate::run::{LeidenOptions, PipelineConfig};
use crate::{AnnData, Result};
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
        let notes = leiden_all(a, options)?
            .iter()
            .zip(&options.resolutions)
            .map(|(p, r)| {
                format!(
                    "resolution {r}: {} clusters, modularity {:.4}",
                    p.n_communities, p.quality
                )
            })
            .collect::<Vec<_>>();
        Ok(format!("{}; on the CPU", notes.join("; ")))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
};

/// Every resolution of `options`, each into its column ([`LeidenOptions::key`]).
pub fn leiden_all(adata: &mut AnnData, options: &LeidenOptions) -> Result<Vec<Partition>> {
    options
        .resolutions
        .iter()
        .enumerate()
        .map(|(i, &resolution)| {
            let params = LeidenParams {
                resolution,
                ..options.params
            };
            leiden(adata, &params, &options.key(i))
        })
        .collect()
}

/// Clusters the cells of `adata` (scanpy's `tl.leiden`) into `obs[key]`.
pub fn leiden(adata: &mut AnnData, params: &LeidenParams, key: &str) -> Result<Partition> {
    const STEP: &str = "leiden";
    let graph = connectivities(adata, STEP)?;
    let p = sc_kernels::leiden::leiden(graph, params).map_err(kernel_error(STEP))?;
    let categories: Vec<String> = (0..p.n_communities).map(|c| c.to_string()).collect();
    adata.obs.set(
        key,
        Column::Categorical {
            codes: p.membership.iter().map(|&c| c as i32).collect(),
            categories: ArrayData::Str(categories),
            ordered: false,
        },
    )?;
    adata.uns.insert(
        key.into(),
        Value::dict([
            (
                "params",
                Value::dict([
                    ("resolution", Value::float(params.resolution)),
                    ("random_state", Value::int(params.random_state as i64)),
                    ("n_iterations", Value::int(params.n_iterations as i64)),
                ]),
            ),
            ("modularity", Value::float(p.quality)),
        ]),
    );
    Ok(p)
}
