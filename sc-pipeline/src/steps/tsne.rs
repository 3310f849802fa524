//! `tsne` (scanpy's `tl.tsne`): the 2-D t-SNE embedding of the cells' representation
//! (`sc_kernels::tsne`) into `obsm[key]` (f32). The Python front end writes scanpy's
//! `uns['tsne']`. Not a row of the command's step table yet. Computed on the host.

use super::{kernel_error, representation};
use crate::anndata::{ArrayData, DenseArray};
use crate::{AnnData, Result};
use sc_kernels::tsne::{tsne as embed, TsneParams};

/// Embeds the representation `use_rep` (see [`representation`]) into `obsm[key]`.
pub fn tsne(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    params: &TsneParams,
    key: &str,
) -> Result<()> {
    const STEP: &str = "tsne";
    let (rep, _) = representation(adata, use_rep, STEP)?;
    let y = embed(&rep, params).map_err(kernel_error(STEP))?;
    adata.obsm.insert(
        key.into(),
        DenseArray::new(vec![y.n_rows, 2], ArrayData::F32(y.data))?,
    );
    Ok(())
}
