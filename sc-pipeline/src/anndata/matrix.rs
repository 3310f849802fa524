//! The main matrix `X` (and layers, `raw.X`): sparse CSR or dense, float32.
//!
//! Values are held as float32, the type every step computes in (scanpy's default as well);
//! reading converts other types, refusing integers that float32 cannot hold exactly.

use sc_kernels::dense::DenseMatrix;
use sc_kernels::CsrMatrix;

/// `X`, a layer or `raw.X`.
#[derive(Debug, Clone, PartialEq)]
pub enum Matrix {
    Sparse(CsrMatrix<f32>),
    Dense(DenseMatrix<f32>),
}

impl Matrix {
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Matrix::Sparse(m) => (m.n_rows, m.n_cols),
            Matrix::Dense(m) => (m.n_rows, m.n_cols),
        }
    }

    /// Number of stored values (all values for a dense matrix).
    pub fn stored_values(&self) -> usize {
        match self {
            Matrix::Sparse(m) => m.nnz(),
            Matrix::Dense(m) => m.data.len(),
        }
    }

    /// All stored values, for checks over the whole matrix.
    pub fn values(&self) -> &[f32] {
        match self {
            Matrix::Sparse(m) => &m.data,
            Matrix::Dense(m) => &m.data,
        }
    }

    /// The matrix as CSR, converting a dense one.
    pub fn to_csr(&self) -> std::borrow::Cow<'_, CsrMatrix<f32>> {
        match self {
            Matrix::Sparse(m) => std::borrow::Cow::Borrowed(m),
            Matrix::Dense(m) => std::borrow::Cow::Owned(CsrMatrix::from_dense(m)),
        }
    }

    /// The rows picked by `keep`.
    pub fn select_rows(&self, keep: &[bool]) -> crate::Result<Matrix> {
        Ok(match self {
            Matrix::Sparse(m) => Matrix::Sparse(m.select_rows(keep).map_err(kernel_err)?),
            Matrix::Dense(m) => Matrix::Dense(m.select_rows(keep).map_err(kernel_err)?),
        })
    }

    /// The columns picked by `keep`.
    pub fn select_cols(&self, keep: &[bool]) -> crate::Result<Matrix> {
        Ok(match self {
            Matrix::Sparse(m) => Matrix::Sparse(m.select_cols(keep).map_err(kernel_err)?),
            Matrix::Dense(m) => Matrix::Dense(m.select_cols(keep).map_err(kernel_err)?),
        })
    }
}

fn kernel_err(e: sc_kernels::error::KernelError) -> crate::Error {
    crate::Error::invalid("matrix", e.to_string())
}
