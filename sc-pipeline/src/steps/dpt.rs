//! `dpt` (scanpy's `tl.dpt` without branchings): the diffusion pseudotime from a root cell
//! (`sc_kernels::dpt`) into `obs['dpt_pseudotime']` (f32), from `obsm['X_diffmap']`'s first
//! `n_dcs` components, their eigenvalues and the graph's connected components. Not a row of
//! the command's step table. Computed on the host.

use super::{connectivities, first_columns, kernel_error, obsm_matrix};
use crate::anndata::ArrayData;
use crate::{AnnData, Error, Result};
use sc_kernels::graph::connected_components;

/// Writes `obs['dpt_pseudotime']` from `obsm[basis]` (its first `evals.len()` columns) and the
/// eigenvalues `evals`, root `root`.
pub fn dpt(adata: &mut AnnData, basis: &str, evals: &[f32], root: usize) -> Result<()> {
    const STEP: &str = "dpt";
    let x = obsm_matrix(adata, basis)?.ok_or_else(|| Error::Missing {
        step: STEP,
        problem: format!("obsm has no '{basis}': run diffmap first"),
    })?;
    let k = evals.len();
    if k == 0 || k > x.n_cols {
        return Err(Error::InvalidParameter {
            step: STEP,
            problem: format!("n_dcs: {k}, but '{basis}' has {} components", x.n_cols),
        });
    }
    let first = first_columns(x, k).map_err(kernel_error(STEP))?;
    let (component, _) = connected_components(connectivities(adata, STEP)?);
    let t =
        sc_kernels::dpt::pseudotime(&first, evals, root, &component).map_err(kernel_error(STEP))?;
    adata.obs.set_values("dpt_pseudotime", ArrayData::F32(t))?;
    Ok(())
}
