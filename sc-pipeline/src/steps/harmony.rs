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
use crate::anndata::DenseArray;
use crate::{AnnData, Error, Result};
use sc_kernels::harmony::{harmony_integrate as harmony_cpu, harmony_integrate_gpu, HarmonyParams};
use sc_kernels::DenseMatrix;

/// The embedding harmony corrects.
pub const HARMONY_BASIS: &str = "X_pca";
/// Where the corrected embedding goes.
pub const HARMONY_ADJUSTED_BASIS: &str = "X_pca_harmony";

/// A harmony run: the obs column with the batches and the algorithm's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct HarmonyOptions {
    pub key: String,
    pub params: HarmonyParams,
}

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
    gpu: Option<&std::sync::Arc<sc_kernels::gpu::GpuContext>>,
) -> Result<HarmonySummary> {
    const STEP: &str = "harmony_integrate";
    let z = basis(adata)?;
    let column = adata.obs.column(key).ok_or_else(|| Error::Missing {
        step: STEP,
        problem: format!(
            "obs has no column '{key}' (the batch key); obs has: {}",
            adata.obs.column_names().collect::<Vec<_>>().join(", ")
        ),
    })?;
    let (codes, groups) = column.group_labels(key)?;
    if groups.len() < 2 {
        return Err(Error::param(
            STEP,
            format!(
                "obs['{key}'] has a single value ({}): harmony needs at least 2 batches",
                groups.first().map_or("none", |g| g.as_str())
            ),
        ));
    }
    let result = match gpu {
        Some(ctx) => harmony_integrate_gpu(ctx, &z, &codes, groups.len(), params),
        None => harmony_cpu(&z, &codes, groups.len(), params),
    }
    .map_err(kernel_error(STEP))?;
    let summary = HarmonySummary {
        n_batches: groups.len(),
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

/// `obsm['X_pca']` as an `f32` matrix.
fn basis(adata: &AnnData) -> Result<DenseMatrix<f32>> {
    super::obsm_matrix(adata, HARMONY_BASIS)?.ok_or_else(|| Error::Missing {
        step: "harmony_integrate",
        problem: format!("obsm has no '{HARMONY_BASIS}': run pca first"),
    })
}
