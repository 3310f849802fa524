//! `combat` (scanpy's `pp.combat`): X corrected for batch effects (`sc_kernels::combat`),
//! dense. The Python front end turns the batch column into codes and passes the numeric
//! covariates. Not a row of the command's step table. Computed in f64 on the run's GPU when
//! it has one (`combat_gpu`: the host's values), else on the host; X is stored back in f32
//! (scanpy's is float64).

use super::kernel_error;
use crate::anndata::Matrix;
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;

/// Replaces X by its ComBat correction for `batches` (one per cell, `< n_batches`) with the
/// numeric `covariates` (a column of values per cell each), on `gpu` when given.
pub fn combat(
    adata: &mut AnnData,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
    gpu: Option<&GpuContext>,
) -> Result<()> {
    const STEP: &str = "combat";
    // A dense X is read in place (X is replaced only once the correction is made).
    let made;
    let x = match &adata.x {
        Matrix::Dense(d) => d,
        other => {
            made = match other.host_copy()? {
                Matrix::Dense(d) => d,
                Matrix::Sparse(s) => s.to_dense(),
                Matrix::Device(_) => unreachable!("a host copy"),
            };
            &made
        }
    };
    let corrected = match gpu {
        Some(ctx) => sc_kernels::combat::combat_gpu(ctx, x, batches, n_batches, covariates),
        None => sc_kernels::combat::combat_as::<_, f32>(x, batches, n_batches, covariates),
    }
    .map_err(kernel_error(STEP))?;
    adata.x = Matrix::Dense(corrected);
    Ok(())
}
