//! `normalize_pearson_residuals` (scanpy's `experimental.pp.normalize_pearson_residuals`,
//! rapids-singlecell's `pp.normalize_pearson_residuals`): the analytic Pearson residuals of a
//! negative binomial model with one overdispersion `theta` for every gene (Lause et al.
//! 2021). With `mu = cell total * gene total / total`, each value becomes
//! `(x - mu) / sqrt(mu + mu² / theta)`, clipped to `[-clip, clip]` (`clip` defaults to
//! `sqrt(n_cells)`, as scanpy's). X becomes dense.
//!
//! The totals are f64 sums over fixed chunks of rows added in order (the same bits for any
//! number of threads, and on the GPU: `gpu.rs`); each residual is computed in f64 and rounded
//! to f32 once (scanpy computes in X's dtype, float32: within a few f32 ulp of ours). A cell or
//! a gene without any count is refused: scanpy would give it NaN residuals (0 / 0).

mod gpu;
mod hvg;
pub use gpu::{highly_variable_pearson_residuals_gpu, pearson_residuals_gpu, KERNELS};
pub use hvg::{highly_variable_pearson_residuals, PearsonHvg};

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::stats::{chunked_sum, DENSE_CHUNK_ROWS};
use rayon::prelude::*;

/// scanpy's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PearsonParams {
    /// The negative binomial's overdispersion (scanpy's default 100).
    pub theta: f64,
    /// Residuals are clipped to `[-clip, clip]`; `None`: `sqrt(n_cells)`.
    pub clip: Option<f64>,
}

impl Default for PearsonParams {
    fn default() -> Self {
        PearsonParams {
            theta: 100.0,
            clip: None,
        }
    }
}

/// The dense residuals of the counts `x`.
pub fn pearson_residuals(x: &CsrMatrix<f32>, p: &PearsonParams) -> Result<DenseMatrix<f32>> {
    let clip = check_params(x.n_rows, p)?;
    x.check_counts()?;
    let (n, g) = (x.n_rows, x.n_cols);
    let cells = crate::stats::row_sums(x);
    let genes = gene_totals(x);
    if let Some(i) = cells.iter().position(|&s| s == 0.0) {
        return Err(no_counts("cell", i));
    }
    if let Some(j) = genes.iter().position(|&s| s == 0.0) {
        return Err(no_counts("gene", j));
    }
    let total: f64 = genes.iter().sum();
    let mut out = DenseMatrix::zeros(n, g);
    if g == 0 {
        return Ok(out);
    }
    let (theta, clip) = (p.theta as f32, clip as f32);
    out.data.par_chunks_mut(g).enumerate().for_each(|(i, row)| {
        let scale = cells[i] / total;
        for (j, r) in row.iter_mut().enumerate() {
            *r = residual_f32(0.0, scale * genes[j], theta, clip);
        }
        let (c, v) = x.row(i);
        for (&j, &v) in c.iter().zip(v) {
            let j = j as usize;
            row[j] = residual_f32(v, scale * genes[j], theta, clip);
        }
    });
    Ok(out)
}

/// Each gene's total count: f64 sums over chunks of [`DENSE_CHUNK_ROWS`] rows added in order
/// (what the GPU twins sum on the densified rows).
pub(crate) fn gene_totals(x: &CsrMatrix<f32>) -> Vec<f64> {
    chunked_sum(x.n_rows, DENSE_CHUNK_ROWS, x.n_cols, |rows, acc| {
        for i in rows {
            let (c, v) = x.row(i);
            for (&j, &v) in c.iter().zip(v) {
                acc[j as usize] += v as f64;
            }
        }
    })
}

/// The residual `normalize_pearson_residuals` writes for the count `v` where the model expects
/// `mu`: `mu` (from f64 totals) rounded to f32 once, then scanpy's arithmetic in f32 as NumPy
/// does it on a float32 X (`theta` and `clip` taken as f32, as it takes Python floats), clipped
/// to `[-clip, clip]`. In f32 the GPU writes 2 G values at 1 M cells x 2,000 genes at about
/// the speed of its memory, where f64's divisions and roots took 3.5x as long.
pub(crate) fn residual_f32(v: f32, mu: f64, theta: f32, clip: f32) -> f32 {
    let m = mu as f32;
    ((v - m) / (m + m * m / theta).sqrt()).clamp(-clip, clip)
}

/// The Pearson residual of the count `v` where the model expects `mu`, clipped to
/// `[-clip, clip]`, in f64 (the HVG flavour's residual variances).
pub(crate) fn clipped_residual(v: f64, mu: f64, theta: f64, clip: f64) -> f64 {
    ((v - mu) / (mu + mu * mu / theta).sqrt()).clamp(-clip, clip)
}

/// The refusal of a cell (or gene) `i` without counts, whose residuals would be NaN.
pub(crate) fn no_counts(what: &str, i: usize) -> KernelError {
    KernelError::InvalidParameter {
        name: "X",
        reason: format!(
            "{what} {i} has no counts (its residuals would be NaN): filter {what}s first"
        ),
    }
}

/// The parameters checked (for `n_rows` cells); the clipping bound.
fn check_params(n_rows: usize, p: &PearsonParams) -> Result<f64> {
    if !(p.theta > 0.0) || !p.theta.is_finite() {
        return Err(KernelError::InvalidParameter {
            name: "theta",
            reason: format!("must be a positive number, not {}", p.theta),
        });
    }
    let clip = p.clip.unwrap_or((n_rows as f64).sqrt());
    if !(clip >= 0.0) {
        return Err(KernelError::InvalidParameter {
            name: "clip",
            reason: format!("must be at least 0 (or None for sqrt(n_obs)), not {clip}"),
        });
    }
    Ok(clip)
}

#[cfg(test)]
mod tests;
