//! `neighbors` (scanpy's `pp.neighbors`, `method='umap'`): exact k nearest neighbours
//! (euclidean, the cell itself included) on `obsm['X_pca']`, and UMAP connectivities.
//!
//! Writes `obsp['distances']`, `obsp['connectivities']` and `uns['neighbors']` with scanpy's
//! keys: `connectivities_key`, `distances_key` and `params` (`n_neighbors`, `method`, `metric`,
//! `random_state`, `use_rep`).

use super::kernel_error;
use crate::anndata::{Matrix, Value};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::neighbors::NeighborsParams;
use sc_kernels::DenseMatrix;
use std::sync::Arc;

/// Representation used: `obsm[use_rep]` when named (an error when it is missing); otherwise
/// `X_pca` when present; otherwise X when it has at most 50 genes (as scanpy decides);
/// otherwise an error asking for PCA first.
fn representation(adata: &AnnData, use_rep: Option<&str>) -> Result<(DenseMatrix<f32>, String)> {
    let rep = use_rep.unwrap_or("X_pca");
    if let Some(m) = super::obsm_matrix(adata, rep)? {
        return Ok((m, rep.to_string()));
    }
    if let Some(rep) = use_rep {
        return Err(Error::Missing {
            step: "neighbors",
            problem: format!("use_rep: obsm has no '{rep}'"),
        });
    }
    if adata.n_vars() <= 50 {
        let dense = match &adata.x {
            Matrix::Dense(d) => d.clone(),
            Matrix::Sparse(s) => s.to_dense(),
            Matrix::Device(d) => match d.download().map_err(super::kernel_error("neighbors"))? {
                Matrix::Dense(d) => d,
                Matrix::Sparse(s) => s.to_dense(),
                Matrix::Device(_) => unreachable!("downloaded"),
            },
        };
        return Ok((dense, "X".to_string()));
    }
    Err(Error::Missing {
        step: "neighbors",
        problem: format!(
            "obsm has no 'X_pca' and X has {} genes (> 50): run pca first",
            adata.n_vars()
        ),
    })
}

/// The GPU to run on: `gpu`, when the GPU kNN takes the shape.
fn gpu_context(
    gpu: Option<&Arc<GpuContext>>,
    rep: &DenseMatrix<f32>,
    k: usize,
) -> Option<Arc<GpuContext>> {
    gpu.filter(|_| {
        rep.n_cols <= sc_kernels::neighbors::GPU_MAX_DIMS && k <= sc_kernels::neighbors::GPU_MAX_K
    })
    .cloned()
}

/// Computes the neighbourhood graph with `n_neighbors` neighbours per cell, on the GPU when X
/// lives there (the same result as the CPU's, see `sc_kernels::neighbors::gpu`), from
/// `obsm[use_rep]` when named (scanpy's `use_rep`), else as [`representation`] decides.
pub fn neighbors(adata: &mut AnnData, n_neighbors: usize, use_rep: Option<&str>) -> Result<()> {
    let gpu = super::x_gpu(adata);
    neighbors_on(adata, n_neighbors, use_rep, gpu.as_ref())
}

/// [`neighbors`] on the given GPU (`None`: the CPU), wherever X is.
pub fn neighbors_on(
    adata: &mut AnnData,
    n_neighbors: usize,
    use_rep: Option<&str>,
    gpu: Option<&Arc<GpuContext>>,
) -> Result<()> {
    const STEP: &str = "neighbors";
    if n_neighbors < 2 {
        return Err(Error::param(
            STEP,
            format!("n_neighbors = {n_neighbors}: at least 2 (the cell itself counts)"),
        ));
    }
    if n_neighbors > adata.n_obs() {
        return Err(Error::param(
            STEP,
            format!(
                "n_neighbors = {n_neighbors} exceeds the {} cells",
                adata.n_obs()
            ),
        ));
    }
    let (rep, rep_name) = representation(adata, use_rep)?;
    let params = NeighborsParams {
        n_neighbors,
        ..NeighborsParams::default()
    };
    let result = match gpu_context(gpu, &rep, n_neighbors) {
        Some(ctx) => sc_kernels::neighbors::neighbors_gpu(&ctx, &rep, &params),
        None => sc_kernels::neighbors::neighbors(&rep, &params),
    }
    .map_err(kernel_error(STEP))?;
    adata.obsp.insert("distances".into(), result.distances);
    adata
        .obsp
        .insert("connectivities".into(), result.connectivities);
    let mut p = vec![
        ("n_neighbors", Value::int(n_neighbors as i64)),
        ("method", Value::str("umap")),
        ("metric", Value::str("euclidean")),
        ("random_state", Value::int(0)),
    ];
    if rep_name != "X" {
        p.push(("use_rep", Value::str(&rep_name)));
    }
    adata.uns.insert(
        "neighbors".into(),
        Value::dict([
            ("connectivities_key", Value::str("connectivities")),
            ("distances_key", Value::str("distances")),
            ("params", Value::dict(p)),
        ]),
    );
    Ok(())
}
