//! `embedding_density` (scanpy's `tl.embedding_density`): each cell's scaled Gaussian kernel
//! density among the cells of its group in two components of an embedding
//! (`sc_kernels::embedding_density`) into `obs[key]` (f64). The Python front end picks the
//! components and writes `uns[f'{key}_params']`. Its row (`--embedding-density`, off by
//! default) runs on the UMAP after the clustering steps, so that `--embedding-density-groupby`
//! may name leiden's, louvain's or kmeans' column. On the GPU when there is one (the `n^2` sums
//! a group: seconds at a million cells), else on the host.

use super::step::{no_budget_check, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{check_groups_column, kernel_error, obs_labels};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::embedding_density::{
    embedding_density as density, embedding_density_gpu, NO_GROUP,
};
use sc_kernels::gpu::GpuContext;

const STEP: &str = "embedding_density";

/// The pipeline's row: on the first GPU of the run (none: the CPU), scanpy's default basis
/// (`umap`) and components (1, 2).
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_embedding_density,
    run: |a, env: &StepEnv<'_>| {
        let options = env
            .config
            .embedding_density
            .as_ref()
            .expect("the row runs only with embedding_density");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let groupby = options.groupby.as_deref();
        let (key, left_out) = embedding_density_of_umap(a, groupby, gpu)?;
        Ok(format!(
            "obs['{key}']{} on the {}{}",
            groupby.map_or(String::new(), |g| format!(" within each '{g}' group")),
            if gpu.is_some() { "GPU" } else { "CPU" },
            match left_out {
                0 => String::new(),
                n => format!("; {n} cells in groups of fewer than 3 get 0"),
            }
        ))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::embedding_density::KERNELS,
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: true,
};

/// A group's points and their sums (f64 each) on the device; at most all the cells in one.
fn device_bytes(s: &Sizes, _: &PipelineConfig) -> StepBytes {
    StepBytes {
        kept: 0,
        transient: s.n_obs as u64 * 24,
    }
}

/// An `--embedding-density-groupby` column that no clustering step of the run makes must be
/// in obs before any step runs.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let groupby = config
        .embedding_density
        .as_ref()
        .and_then(|o| o.groupby.as_ref());
    match groupby {
        Some(g) => check_groups_column(adata, config, STEP, "--embedding-density-groupby", g),
        None => Ok(()),
    }
}

/// scanpy's `tl.embedding_density(adata, basis='umap', groupby=groupby)`: `obs[key]` with key
/// `umap_density` (or `umap_density_{groupby}`) and `uns[f'{key}_params']` (`covariate`,
/// `components` `[1, 2]`); returns the key and how many cells were left out. A group of fewer
/// than 3 cells has no density (scanpy's KDE fails on it; a clustering of the run may well make
/// one): its cells get 0, as scanpy leaves cells outside every group.
pub fn embedding_density_of_umap(
    adata: &mut AnnData,
    groupby: Option<&str>,
    gpu: Option<&GpuContext>,
) -> Result<(String, usize)> {
    let (mut groups, n_groups) = match groupby {
        Some(g) => {
            let (codes, names) = obs_labels(adata, STEP, "--embedding-density-groupby", g)?;
            (codes, names.len())
        }
        None => (vec![0; adata.n_obs()], 1),
    };
    let mut sizes = vec![0usize; n_groups];
    groups.iter().for_each(|&g| sizes[g as usize] += 1);
    let mut left_out = 0;
    for g in groups.iter_mut().filter(|g| sizes[**g as usize] < 3) {
        *g = NO_GROUP;
        left_out += 1;
    }
    let key = groupby.map_or("umap_density".to_string(), |g| format!("umap_density_{g}"));
    embedding_density(adata, "X_umap", &groups, n_groups, &key, gpu)?;
    adata.uns.insert(
        format!("{key}_params"),
        Value::dict([
            ("covariate", groupby.map_or(Value::Null, Value::str)),
            (
                "components",
                Value::Array(DenseArray::new(vec![2], ArrayData::I64(vec![1, 2]))?),
            ),
        ]),
    );
    Ok((key, left_out))
}

/// Writes `obs[key]` from `obsm[xy]` (cells x 2) and each cell's group (`groups`,
/// `sc_kernels::embedding_density::NO_GROUP` for none), on `gpu` (none: the host).
pub fn embedding_density(
    adata: &mut AnnData,
    xy: &str,
    groups: &[u32],
    n_groups: usize,
    key: &str,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    let Some(DenseArray { shape, data }) = adata.obsm.get(xy) else {
        return Err(Error::Missing {
            step: STEP,
            problem: format!("obsm has no '{xy}'"),
        });
    };
    if shape.as_slice() != [adata.n_obs(), 2] {
        return Err(Error::invalid(
            format!("obsm['{xy}']"),
            format!("must be cells x 2, has shape {shape:?}"),
        ));
    }
    let values: Vec<f64> = match data {
        ArrayData::F64(v) => v.clone(),
        ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
        other => {
            return Err(Error::invalid(
                format!("obsm['{xy}']"),
                format!("holds {}, not numbers", other.type_name()),
            ))
        }
    };
    let z = match gpu {
        Some(ctx) => embedding_density_gpu(ctx, &values, groups, n_groups),
        None => density(&values, groups, n_groups),
    }
    .map_err(kernel_error(STEP))?;
    adata.obs.set_values(key, ArrayData::F64(z))?;
    Ok(())
}
