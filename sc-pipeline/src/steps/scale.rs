//! `scale` (scanpy's `pp.scale`): each gene to zero mean and unit variance (ddof 1), clipped at
//! `max_value`. X becomes dense float32 (zero-centred data is dense); writes `var['mean']` and
//! `var['std']`. Without zero-centring a sparse X stays sparse.

use super::kernel_error;
use crate::anndata::{ArrayData, DeviceMatrix, Matrix};
use crate::{AnnData, Result};
use sc_kernels::scale::ScaleParams;

pub fn scale(adata: &mut AnnData, params: &ScaleParams) -> Result<()> {
    const STEP: &str = "scale";
    let comm = super::comm_of(adata);
    if let Some((ctx, m)) = super::device_csr(adata).filter(|_| params.zero_center) {
        let (dense, stats) =
            sc_kernels::scale::scale_csr_to_dense_gpu_across(&ctx, m, params, &*comm)
                .map_err(kernel_error(STEP))?;
        adata.x = Matrix::Device(DeviceMatrix::dense(&ctx, dense));
        adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
        adata.var.set_values("std", ArrayData::F64(stats.std))?;
        return Ok(());
    }
    if let Some((ctx, m, block)) = super::streamed_csr(adata).filter(|_| params.zero_center) {
        let (dense, stats) = sc_kernels::scale::scale_csr_to_dense_streamed(&ctx, m, params, block)
            .map_err(kernel_error(STEP))?;
        adata.x = Matrix::Device(DeviceMatrix::streamed_dense(&ctx, dense, block));
        adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
        adata.var.set_values("std", ArrayData::F64(stats.std))?;
        return Ok(());
    }
    if let Matrix::Device(_) = &adata.x {
        // Without centring (or on a dense device X) the CPU implementation runs on the host.
        adata.x = std::mem::replace(
            &mut adata.x,
            Matrix::Sparse(sc_kernels::CsrMatrix::zeros(0, 0)),
        )
        .into_host()?;
    }
    let split = comm.size() > 1;
    let stats = match &mut adata.x {
        Matrix::Device(_) => unreachable!("moved to the host above"),
        Matrix::Sparse(m) if params.zero_center => {
            let (dense, stats) =
                sc_kernels::scale::scale_csr_to_dense_across::<f32, f32>(m, params, &*comm)
                    .map_err(kernel_error(STEP))?;
            adata.x = Matrix::Dense(dense);
            stats
        }
        _ if split => {
            return Err(crate::Error::param(
                STEP,
                "when the cells are split across ranks, scale zero-centres a sparse X \
                 (zero_center=False and a dense X run on one GPU)",
            ))
        }
        Matrix::Sparse(m) => {
            let (scaled, stats) =
                sc_kernels::scale::scale_csr_no_center::<f32, f32>(m, params.max_value)
                    .map_err(kernel_error(STEP))?;
            adata.x = Matrix::Sparse(scaled);
            stats
        }
        Matrix::Dense(d) => {
            sc_kernels::scale::scale_dense(d, params).map_err(kernel_error(STEP))?
        }
    };
    adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
    adata.var.set_values("std", ArrayData::F64(stats.std))?;
    Ok(())
}
