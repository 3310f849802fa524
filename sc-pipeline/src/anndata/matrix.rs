//! The main matrix `X` (and layers, `raw.X`): sparse CSR or dense, float32.
//!
//! Values are held as float32, the type every step computes in (scanpy's default as well);
//! reading converts other types, refusing integers that float32 cannot hold exactly.

use super::device::{DeviceData, DeviceMatrix};
use sc_kernels::dense::DenseMatrix;
use sc_kernels::gpu::compact;
use sc_kernels::CsrMatrix;

/// `X`, a layer or `raw.X`.
#[derive(Debug, PartialEq)]
pub enum Matrix {
    Sparse(CsrMatrix<f32>),
    Dense(DenseMatrix<f32>),
    /// On the GPU; steps run their GPU twins on it, writing moves it to the host.
    Device(DeviceMatrix),
}

impl Matrix {
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Matrix::Sparse(m) => (m.n_rows, m.n_cols),
            Matrix::Dense(m) => (m.n_rows, m.n_cols),
            Matrix::Device(m) => m.shape(),
        }
    }

    /// A copy (a deep copy on the device for a device matrix).
    pub fn try_clone(&self) -> crate::Result<Matrix> {
        Ok(match self {
            Matrix::Sparse(m) => Matrix::Sparse(m.clone()),
            Matrix::Dense(m) => Matrix::Dense(m.clone()),
            Matrix::Device(m) => Matrix::Device(m.try_clone().map_err(device_err)?),
        })
    }

    /// A host copy (a device matrix is downloaded).
    pub fn host_copy(&self) -> crate::Result<Matrix> {
        match self {
            Matrix::Device(m) => m.download().map_err(device_err),
            host => host.try_clone(),
        }
    }

    /// The matrix on the host (a device matrix is downloaded, a host or streamed one moved).
    pub fn into_host(self) -> crate::Result<Matrix> {
        match self {
            Matrix::Device(m) => m.into_host().map_err(device_err),
            host => Ok(host),
        }
    }

    /// Number of stored values (all values for a dense matrix).
    pub fn stored_values(&self) -> usize {
        match self {
            Matrix::Sparse(m) => m.nnz(),
            Matrix::Dense(m) => m.data.len(),
            Matrix::Device(m) => m.stored_values(),
        }
    }

    /// All stored values of a host matrix (`None` for a device matrix: download it first).
    pub fn values(&self) -> Option<&[f32]> {
        match self {
            Matrix::Sparse(m) => Some(&m.data),
            Matrix::Dense(m) => Some(&m.data),
            Matrix::Device(_) => None,
        }
    }

    /// The matrix as CSR, converting a dense one and downloading a device one.
    pub fn to_csr(&self) -> crate::Result<std::borrow::Cow<'_, CsrMatrix<f32>>> {
        Ok(match self {
            Matrix::Sparse(m) => std::borrow::Cow::Borrowed(m),
            Matrix::Dense(m) => std::borrow::Cow::Owned(CsrMatrix::from_dense(m)),
            Matrix::Device(m) => match m.download().map_err(device_err)? {
                Matrix::Sparse(c) => std::borrow::Cow::Owned(c),
                Matrix::Dense(d) => std::borrow::Cow::Owned(CsrMatrix::from_dense(&d)),
                Matrix::Device(_) => unreachable!("downloaded"),
            },
        })
    }

    /// The rows picked by `keep`.
    pub fn select_rows(&self, keep: &[bool]) -> crate::Result<Matrix> {
        Ok(match self {
            Matrix::Sparse(m) => Matrix::Sparse(m.select_rows(keep).map_err(kernel_err)?),
            Matrix::Dense(m) => Matrix::Dense(m.select_rows(keep).map_err(kernel_err)?),
            Matrix::Device(m) => match &m.data {
                DeviceData::Csr(c) => Matrix::Device(DeviceMatrix::csr(
                    &m.ctx,
                    compact::select_rows(&m.ctx, c, keep).map_err(device_err)?,
                )),
                DeviceData::StreamedCsr(s) => Matrix::Device(DeviceMatrix::streamed_csr(
                    &m.ctx,
                    s.host.select_rows(keep).map_err(kernel_err)?,
                    s.block_bytes,
                )),
                DeviceData::StreamedDense(s) => Matrix::Device(DeviceMatrix::streamed_dense(
                    &m.ctx,
                    s.host.select_rows(keep).map_err(kernel_err)?,
                    s.block_bytes,
                )),
                DeviceData::Dense(_) => return Err(dense_device("row selection")),
                DeviceData::Rows(_) => return m.download().map_err(device_err)?.select_rows(keep),
            },
        })
    }

    /// The columns picked by `keep`.
    pub fn select_cols(&self, keep: &[bool]) -> crate::Result<Matrix> {
        Ok(match self {
            Matrix::Sparse(m) => Matrix::Sparse(m.select_cols(keep).map_err(kernel_err)?),
            Matrix::Dense(m) => Matrix::Dense(m.select_cols(keep).map_err(kernel_err)?),
            Matrix::Device(m) => match &m.data {
                DeviceData::Csr(c) => Matrix::Device(DeviceMatrix::csr(
                    &m.ctx,
                    compact::select_cols(&m.ctx, c, keep).map_err(device_err)?,
                )),
                DeviceData::StreamedCsr(s) => Matrix::Device(DeviceMatrix::streamed_csr(
                    &m.ctx,
                    s.host.select_cols(keep).map_err(kernel_err)?,
                    s.block_bytes,
                )),
                DeviceData::StreamedDense(s) => Matrix::Device(DeviceMatrix::streamed_dense(
                    &m.ctx,
                    s.host.select_cols(keep).map_err(kernel_err)?,
                    s.block_bytes,
                )),
                DeviceData::Dense(_) => return Err(dense_device("column selection")),
                DeviceData::Rows(_) => return m.download().map_err(device_err)?.select_cols(keep),
            },
        })
    }
}

fn kernel_err(e: sc_kernels::error::KernelError) -> crate::Error {
    crate::Error::invalid("matrix", e.to_string())
}

/// A failure of a device operation outside a step (the steps name themselves).
fn device_err(e: sc_kernels::error::KernelError) -> crate::Error {
    match e.out_of_memory() {
        Some(oom) => crate::Error::OutOfMemory {
            step: "GPU matrix".into(),
            oom: Box::new(oom.clone()),
        },
        None => crate::Error::Device(format!("GPU matrix: {e}")),
    }
}

fn dense_device(what: &str) -> crate::Error {
    crate::Error::Device(format!(
        "{what} of a dense matrix on the GPU is not implemented (it only arises after scale)"
    ))
}
