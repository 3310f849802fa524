//! Preprocessing steps with scanpy's names, parameters and outputs. Each step takes an
//! [`AnnData`](crate::AnnData), runs the matching `sc-kernels` function and writes the results
//! where scanpy writes them; each module's documentation lists what it writes.

mod filter;
mod hvg;
mod log1p;
mod neighbors;
mod normalize;
mod pca;
mod qc;
mod scale;

pub use filter::{filter_cells, filter_genes};
pub use hvg::{highly_variable_genes, highly_variable_mask, HvgOptions};
pub use log1p::log1p;
pub use neighbors::neighbors;
pub use normalize::normalize_total;
pub use pca::pca;
pub use qc::{annotate_gene_prefix, calculate_qc_metrics};
pub use sc_kernels::filter::{CellFilter, GeneFilter};
pub use sc_kernels::hvg::Flavor;
pub use sc_kernels::normalize::NormalizeParams;
pub use sc_kernels::scale::ScaleParams;
pub use scale::scale;

use crate::anndata::Matrix;
use crate::{AnnData, Error};
use sc_kernels::CsrMatrix;

/// Wraps a kernel's refusal into the step's error.
pub(crate) fn kernel_error(step: &'static str) -> impl Fn(sc_kernels::KernelError) -> Error {
    move |e| match e {
        sc_kernels::KernelError::InvalidParameter { name, reason } => Error::InvalidParameter {
            step,
            problem: format!("{name}: {reason}"),
        },
        other => Error::InvalidData {
            what: format!("{step} input"),
            problem: other.to_string(),
        },
    }
}

/// X as a mutable CSR matrix; a dense X is converted to CSR first (the steps that change X in
/// place work on the stored values).
pub(crate) fn x_csr_mut(adata: &mut AnnData) -> &mut CsrMatrix<f32> {
    if let Matrix::Dense(d) = &adata.x {
        adata.x = Matrix::Sparse(CsrMatrix::from_dense(d));
    }
    match &mut adata.x {
        Matrix::Sparse(m) => m,
        Matrix::Dense(_) => unreachable!("converted above"),
    }
}
