//! `regress_out` (scanpy's `pp.regress_out`): each gene's residuals on obs covariates, either
//! continuous columns (with an intercept) or one categorical column (each gene's mean within
//! the cell's category). X becomes dense float32. Called from Python (`scpipe.pp.regress_out`);
//! not yet a row of the command's step table, and computed on the host: a GPU X is brought
//! back, regressed, and put on the same GPU again as a dense matrix.

use super::kernel_error;
use crate::anndata::{Column, DeviceMatrix, Matrix};
use crate::{AnnData, Error, Result};
use sc_kernels::dense::DenseMatrix;
use sc_kernels::gpu::DeviceDense;
use sc_kernels::regress::Covariates;

/// Regresses X's genes on the obs columns `keys` (one categorical column, or numeric ones).
/// X is left as it was when the regression is refused.
pub fn regress_out(adata: &mut AnnData, keys: &[String]) -> Result<()> {
    let covariates = covariates(adata, keys)?;
    let dense = |m: Matrix| -> Result<DenseMatrix<f32>> {
        match m {
            Matrix::Sparse(c) => Ok(c.to_dense()),
            Matrix::Dense(d) => Ok(d),
            Matrix::Device(_) => Err(Error::Device(
                "regress_out: X did not come back from the GPU".into(),
            )),
        }
    };
    let (mut x, ctx) = match &adata.x {
        Matrix::Sparse(c) => (c.to_dense(), None),
        Matrix::Dense(d) => (d.clone(), None),
        Matrix::Device(d) => (dense(adata.x.host_copy()?)?, Some(d.ctx.clone())),
    };
    sc_kernels::regress::regress_out(&mut x, &covariates).map_err(kernel_error("regress_out"))?;
    adata.x = match &ctx {
        Some(ctx) => Matrix::Device(DeviceMatrix::dense(
            ctx,
            DeviceDense::upload(ctx, &x).map_err(kernel_error("regress_out"))?,
        )),
        None => Matrix::Dense(x),
    };
    Ok(())
}

/// The covariates of `keys`: one categorical column alone, else numeric (or boolean) columns.
fn covariates(adata: &AnnData, keys: &[String]) -> Result<Covariates> {
    let column = |k: &str| {
        adata.obs.column(k).ok_or_else(|| Error::Missing {
            step: "regress_out",
            problem: format!("obs has no column '{k}'"),
        })
    };
    if keys.is_empty() {
        return Err(Error::InvalidParameter {
            step: "regress_out",
            problem: "give at least one obs column in keys".into(),
        });
    }
    if let Column::Categorical {
        codes, categories, ..
    } = column(&keys[0])?
    {
        if keys.len() > 1 {
            return Err(Error::InvalidParameter {
                step: "regress_out",
                problem: format!(
                    "'{}' is categorical: a categorical column must be the only key (scanpy \
                     regresses on each gene's mean within its categories)",
                    keys[0]
                ),
            });
        }
        return Ok(Covariates::Categorical {
            codes: codes.clone(),
            n_categories: categories.len(),
        });
    }
    let mut columns = Vec::with_capacity(keys.len());
    for k in keys {
        let values = match column(k)? {
            Column::Values(v) => v.to_f64(),
            _ => None,
        };
        columns.push(values.ok_or_else(|| Error::InvalidParameter {
            step: "regress_out",
            problem: format!(
                "obs column '{k}' is not numeric (only the first and only key may be categorical)"
            ),
        })?);
    }
    Ok(Covariates::Continuous(columns))
}
