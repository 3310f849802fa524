//! `ingest` (scanpy's `tl.ingest`): new cells (this AnnData) mapped onto a reference's PCA,
//! UMAP and labels (`sc_kernels::ingest`). Not a row of a run (it needs a second, annotated
//! dataset): `scpipe.tl.ingest` gathers the reference's parts ([`Reference`]) and calls
//! [`ingest`], which writes `obsm['X_pca']` and `obsm['X_umap']` (float32) and, for each label,
//! `obs[label]` as codes into the reference's categories (-1: none). With a GPU, the
//! projection, the neighbour search and the UMAP transform run there (the host's values; the
//! neighbours the host's wherever the scan's candidates hold them), the vote on the host.

use super::{kernel_error, obsm_matrix};
use crate::anndata::{ArrayData, DenseArray};
use crate::{AnnData, Error, Result};
use sc_kernels::dense::DenseMatrix;
use sc_kernels::gpu::GpuContext;
use sc_kernels::ingest::{
    project_pca, project_pca_gpu, umap_transform, umap_transform_gpu, vote, TransformParams, Values,
};
use sc_kernels::neighbors::exact::knn_query_gpu;
use sc_kernels::neighbors::knn_query;

const STEP: &str = "ingest";

/// The reference's PCA: its principal axes over the genes it used (`varm['PCs']` rows of
/// `genes`, all genes when `None`) and, when it was centred, the reference's means of those
/// genes (the new cells are centred by them, as scanpy 1.12 does).
pub struct ReferencePca {
    pub basis: DenseMatrix<f32>,
    pub genes: Option<Vec<bool>>,
    pub mean: Option<Vec<f64>>,
}

/// Where the new cells' representation for the neighbour search comes from (scanpy's
/// `Ingest._same_rep`).
pub enum NewRepresentation {
    /// Their projection on the reference's first `n` principal axes.
    Pca(usize),
    /// Given as `obsm['rep']` (X itself, or the reference's `use_rep` of the new cells).
    Given,
}

/// What ingest takes of the reference.
pub struct Reference {
    pub pca: Option<ReferencePca>,
    pub representation: NewRepresentation,
    /// The reference's cells in the representation its neighbors used.
    pub cells: DenseMatrix<f32>,
    /// Its neighbors' `n_neighbors` (or the `k` asked for).
    pub k: usize,
    /// Its UMAP layout and settings, when the UMAP is mapped.
    pub umap: Option<(DenseMatrix<f32>, TransformParams)>,
    /// Whether the PCA is mapped (`obsm['X_pca']`).
    pub map_pca: bool,
    /// Labels to map: name, the reference cells' codes (-1: none) and their categories' count.
    pub labels: Vec<(String, Vec<i32>, usize)>,
}

/// Maps `adata`'s cells (X over the reference's genes) onto `reference`, on `gpu` when given.
pub fn ingest(adata: &mut AnnData, reference: &Reference, gpu: Option<&GpuContext>) -> Result<()> {
    // Every component at once: the first n of them are the projection on n.
    let projection = match (&reference.representation, reference.map_pca) {
        (NewRepresentation::Given, false) => None,
        _ => Some(project(adata, reference, gpu)?),
    };
    let rep = match (&reference.representation, &projection) {
        (NewRepresentation::Pca(n), Some(y)) => {
            super::first_columns(y.clone(), (*n).min(y.n_cols)).map_err(kernel_error(STEP))?
        }
        _ => obsm_matrix(adata, "rep")?
            .ok_or_else(|| Error::param(STEP, "the new cells' representation is missing"))?,
    };
    if rep.n_cols != reference.cells.n_cols {
        return Err(Error::param(
            STEP,
            format!(
                "the new cells' representation has {} columns, the reference's {}",
                rep.n_cols, reference.cells.n_cols
            ),
        ));
    }
    if let Some(y) = projection.filter(|_| reference.map_pca) {
        adata.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(y.n_rows, y.n_cols, y.data)?,
        );
    }
    // The neighbours, for the UMAP and the labels.
    if reference.umap.is_some() || !reference.labels.is_empty() {
        let knn = match gpu {
            Some(ctx) => knn_query_gpu(ctx, &rep, &reference.cells, reference.k),
            None => knn_query(&rep, &reference.cells, reference.k),
        }
        .map_err(kernel_error(STEP))?;
        if let Some((layout, params)) = &reference.umap {
            let y = match gpu {
                Some(ctx) => umap_transform_gpu(ctx, layout, &knn, params),
                None => umap_transform(layout, &knn, params),
            }
            .map_err(kernel_error(STEP))?;
            adata.obsm.insert(
                "X_umap".into(),
                DenseArray::matrix_f32(y.n_rows, y.n_cols, y.data)?,
            );
        }
        for (name, codes, n_categories) in &reference.labels {
            let mapped = vote(codes, *n_categories, &knn).map_err(kernel_error(STEP))?;
            adata.obs.set_values(name, ArrayData::I32(mapped))?;
        }
    }
    adata.obsm.remove("rep");
    Ok(())
}

/// X (over the reference's PCA genes) projected on all of the reference's principal axes.
fn project(
    adata: &AnnData,
    reference: &Reference,
    gpu: Option<&GpuContext>,
) -> Result<DenseMatrix<f32>> {
    let pca = reference.pca.as_ref().ok_or_else(|| {
        Error::param(
            STEP,
            "the reference has no PCA (uns['pca'], varm['PCs']): run pp.pca on it",
        )
    })?;
    let x = adata.x.to_csr()?;
    let x = match &pca.genes {
        Some(mask) => std::borrow::Cow::Owned(x.select_cols(mask).map_err(kernel_error(STEP))?),
        None => x,
    };
    let mean = pca.mean.as_deref();
    match gpu {
        Some(ctx) => project_pca_gpu(ctx, &x, &pca.basis, mean),
        None => project_pca(Values::Sparse(&x), &pca.basis, mean),
    }
    .map_err(kernel_error(STEP))
}
