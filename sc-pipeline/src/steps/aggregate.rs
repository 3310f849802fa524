//! `aggregate` (scanpy's `get.aggregate`): per group of cells (or of genes, `axis` var), each
//! column's sum, mean, variance, non-zero count and median of X, in f64
//! (`sc_kernels::aggregate`). The Python front end turns `by` (one or more categorical columns,
//! NaN categories and a `mask` left out) into a group per row and builds scanpy's AnnData from
//! the numbers; not a row of the command's step table. A CSR X on the GPU grouped by cells is
//! aggregated there (the host's bits) unless the median is asked; otherwise a GPU X is read
//! back.

use super::kernel_error;
use crate::anndata::Matrix;
use crate::{AnnData, Result};
use sc_kernels::aggregate::{aggregate as by_group, aggregate_gpu, AggFuncs, Aggregates};
use sc_kernels::DenseMatrix;

/// Which rows are grouped: X's (cells) or its transpose's (genes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateAxis {
    Obs,
    Var,
}

/// Aggregates X's rows (`Obs`) or columns (`Var`) by `groups` (one per row or column,
/// `< n_groups` or `sc_kernels::aggregate::LEFT_OUT`). X is only read.
pub fn aggregate(
    adata: &AnnData,
    groups: &[u32],
    n_groups: usize,
    funcs: AggFuncs,
    dof: u32,
    axis: AggregateAxis,
) -> Result<Aggregates> {
    let err = kernel_error("aggregate");
    if let (Some((ctx, x)), AggregateAxis::Obs, false) =
        (super::device_csr(adata), axis, funcs.median)
    {
        return aggregate_gpu(&ctx, x, groups, n_groups, funcs, dof).map_err(err);
    }
    let host;
    let x = match &adata.x {
        Matrix::Device(d) => {
            host = d.download().map_err(&err)?;
            &host
        }
        x => x,
    };
    match (x, axis) {
        (Matrix::Sparse(m), AggregateAxis::Obs) => by_group(m, groups, n_groups, funcs, dof),
        (Matrix::Sparse(m), AggregateAxis::Var) => {
            by_group(&m.transpose(), groups, n_groups, funcs, dof)
        }
        (Matrix::Dense(m), AggregateAxis::Obs) => by_group(m, groups, n_groups, funcs, dof),
        (Matrix::Dense(m), AggregateAxis::Var) => {
            by_group(&transpose(m), groups, n_groups, funcs, dof)
        }
        (Matrix::Device(_), _) => unreachable!("downloaded above"),
    }
    .map_err(err)
}

fn transpose(m: &DenseMatrix<f32>) -> DenseMatrix<f32> {
    let mut t = DenseMatrix::zeros(m.n_cols, m.n_rows);
    for i in 0..m.n_rows {
        for (j, &v) in m.row(i).iter().enumerate() {
            t.data[j * m.n_rows + i] = v;
        }
    }
    t
}
