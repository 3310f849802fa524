//! `combat` (scanpy's `pp.combat`): X corrected for batch effects (`sc_kernels::combat`),
//! dense. The Python front end turns the batch column into codes and passes the numeric
//! covariates. Not a row of the command's step table. Computed on the host, in f64; X is
//! stored back in f32 (scanpy's is float64).

use super::kernel_error;
use crate::anndata::Matrix;
use crate::{AnnData, Result};
use sc_kernels::DenseMatrix;

/// Replaces X by its ComBat correction for `batches` (one per cell, `< n_batches`) with the
/// numeric `covariates` (a column of values per cell each).
pub fn combat(
    adata: &mut AnnData,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
) -> Result<()> {
    const STEP: &str = "combat";
    let err = kernel_error(STEP);
    let corrected = match adata.x.host_copy()? {
        Matrix::Dense(d) => sc_kernels::combat::combat(&d, batches, n_batches, covariates),
        Matrix::Sparse(s) => {
            sc_kernels::combat::combat(&s.to_dense(), batches, n_batches, covariates)
        }
        Matrix::Device(_) => unreachable!("a host copy"),
    }
    .map_err(err)?;
    let data = corrected.data.iter().map(|&v| v as f32).collect();
    adata.x = Matrix::Dense(
        DenseMatrix::new(corrected.n_rows, corrected.n_cols, data).map_err(kernel_error(STEP))?,
    );
    Ok(())
}
