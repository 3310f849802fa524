//! `embedding_density` (scanpy's `tl.embedding_density`): each cell's scaled Gaussian kernel
//! density among the cells of its group in two components of an embedding
//! (`sc_kernels::embedding_density`) into `obs[key]` (f64). The Python front end picks the
//! components and writes `uns[f'{key}_params']`. Not a row of the command's step table.
//! On the GPU when there is one (the `n^2` sums a group: seconds at a million cells), else on
//! the host.

use super::kernel_error;
use crate::anndata::{ArrayData, DenseArray};
use crate::{AnnData, Error, Result};
use sc_kernels::embedding_density::{embedding_density as density, embedding_density_gpu};
use sc_kernels::gpu::GpuContext;

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
    const STEP: &str = "embedding_density";
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
