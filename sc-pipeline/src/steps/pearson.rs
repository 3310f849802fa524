//! `normalize_pearson_residuals` (scanpy's `experimental.pp.normalize_pearson_residuals`,
//! rapids-singlecell's `pp.normalize_pearson_residuals`): X's counts become their analytic
//! Pearson residuals, dense float32 (`sc_kernels::pearson`). Called from Python
//! (`scpipe.pp.normalize_pearson_residuals`, which writes the `uns` record); not a row of the
//! command's step table. A CSR X on the GPU gets its residuals there (the same bits as the
//! host's); another GPU X is brought back and its residuals go to the same GPU as a dense
//! matrix. X is left as it was when refused.

use super::kernel_error;
use crate::anndata::{DeviceMatrix, Matrix};
use crate::{AnnData, Result};
use sc_kernels::pearson::{pearson_residuals, pearson_residuals_gpu, PearsonParams};

/// Replaces X's counts by their Pearson residuals.
pub fn normalize_pearson_residuals(adata: &mut AnnData, params: &PearsonParams) -> Result<()> {
    const STEP: &str = "normalize_pearson_residuals";
    if let Some((ctx, x)) = super::device_csr(adata) {
        let residuals = pearson_residuals_gpu(&ctx, x, params).map_err(kernel_error(STEP))?;
        adata.x = Matrix::Device(DeviceMatrix::dense(&ctx, residuals));
        return Ok(());
    }
    let residuals = match &adata.x {
        Matrix::Device(_) => pearson_residuals(&*adata.x.host_copy()?.to_csr()?, params),
        host => pearson_residuals(&*host.to_csr()?, params),
    }
    .map_err(kernel_error(STEP))?;
    adata.x = super::dense_x_on(super::x_gpu(adata).as_ref(), residuals, STEP)?;
    Ok(())
}
