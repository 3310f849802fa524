//! `diffmap` (scanpy's `tl.diffmap`): the diffusion map of the neighbors graph
//! (`sc_kernels::diffmap`) into `obsm['X_diffmap']` and `uns['diffmap_evals']`, both f32 as
//! scanpy writes them. Not a row of the command's step table. Computed on the host.

use super::{connectivities, kernel_error};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::{AnnData, Result};
use sc_kernels::diffmap::{diffmap as diffusion_map, Diffmap};

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
