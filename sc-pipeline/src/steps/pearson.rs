//! `normalize_pearson_residuals` (scanpy's `experimental.pp.normalize_pearson_residuals`,
//! rapids-singlecell's `pp.normalize_pearson_residuals`): X's counts become their analytic
//! Pearson residuals, dense float32 (`sc_kernels::pearson`). Called from Python
//! (`scpipe.pp.normalize_pearson_residuals`, which writes the `uns` record); not a row of the
//! command's step table. A CSR X on the GPU gets its residuals there (the same bits as the
//! host's); another GPU X is brought back and its residuals go to the same GPU as a dense
//! matrix. X is left as it was when refused.

use super::kernel_error;
use crate::anndata::{DeviceData, DeviceMatrix, Matrix};
use crate::{AnnData, Result};
use sc_kernels::normalize::{all_whole, all_whole_gpu};
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

/// Whether X holds only whole numbers, read where it lies (a GPU X on the GPU): scanpy's Pearson
/// functions warn when it does not (`check_values`).
pub fn x_holds_whole_numbers(adata: &AnnData) -> Result<bool> {
    let on_gpu = |ctx, data| all_whole_gpu(ctx, data).map_err(kernel_error("check_values"));
    match &adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Csr(m),
        }) => on_gpu(ctx, &m.data),
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Dense(m),
        }) => on_gpu(ctx, &m.data),
        Matrix::Device(_) => {
            let host = adata.x.host_copy()?;
            Ok(all_whole(
                host.values().expect("a host copy is on the host"),
            ))
        }
        host => Ok(all_whole(host.values().expect("a host matrix"))),
    }
}
