//! `regress_out` (scanpy's `pp.regress_out`): each gene's values less their least-squares fit
//! on per-cell covariates, as scanpy 1.12 computes it:
//! - continuous covariates (with an intercept) whose Gram matrix is invertible: the
//!   coefficients `inv(AᵀA) Aᵀx` of every gene at once (scanpy's `numpy_regress_out`);
//! - a singular Gram matrix, or one categorical covariate: each gene on its own, as statsmodels'
//!   Gaussian GLM fits it (minimum-norm least squares), a gene whose values are all equal left as
//!   it is; for a category the regressor is the gene's mean within each cell's category
//!   (rounded to f32, as scanpy stores it) and a cell without a category gets 0.
//!
//! Sums run in f64 over fixed row chunks added in order, so the result does not depend on the
//! number of threads. X is dense (scanpy densifies a sparse X); the residuals are rounded to f32.

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::stats::{chunked_sum, DENSE_CHUNK_ROWS};
use faer::linalg::solvers::DenseSolveCore;
use faer::{Mat, Side};
use rayon::prelude::*;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    regress_out_csr_gpu, regress_out_csr_gpu_in_waves, regress_out_gpu, regress_out_gpu_in_waves,
};

/// What the genes are regressed on.
#[derive(Debug, Clone, PartialEq)]
pub enum Covariates {
    /// Continuous covariates, one column of `n_obs` values each (the intercept is added here).
    Continuous(Vec<Vec<f64>>),
    /// One categorical covariate: each cell's category in `0..n_categories`, -1 for none.
    Categorical {
        codes: Vec<i32>,
        n_categories: usize,
    },
}

/// Replaces each gene (column) of `x` by its residuals on `covariates`.
pub fn regress_out(x: &mut DenseMatrix<f32>, covariates: &Covariates) -> Result<()> {
    check_covariates(x.n_rows, covariates)?;
    x.check_finite()?;
    match covariates {
        Covariates::Continuous(columns) => continuous(x, columns),
        Covariates::Categorical {
            codes,
            n_categories,
        } => {
            categorical(x, codes, *n_categories);
            Ok(())
        }
    }
}

/// The covariates' checks against `n` cells (X's values are checked apart, where they live).
pub(crate) fn check_covariates(n: usize, covariates: &Covariates) -> Result<()> {
    match covariates {
        Covariates::Continuous(columns) => {
            for (k, c) in columns.iter().enumerate() {
                if c.len() != n {
                    return Err(KernelError::Shape(format!(
                        "covariate {k} has {} values for {n} cells",
                        c.len()
                    )));
                }
                if let Some(i) = c.iter().position(|v| !v.is_finite()) {
                    return Err(KernelError::InvalidParameter {
                        name: "keys",
                        reason: format!("covariate {k} is {} at cell {i}", c[i]),
                    });
                }
            }
        }
        Covariates::Categorical {
            codes,
            n_categories,
        } => {
            if codes.len() != n {
                return Err(KernelError::Shape(format!(
                    "the category has {} codes for {n} cells",
                    codes.len()
                )));
            }
            if let Some(&c) = codes.iter().find(|&&c| c < -1 || c >= *n_categories as i32) {
                return Err(KernelError::InvalidParameter {
                    name: "keys",
                    reason: format!("category code {c} outside 0..{n_categories}"),
                });
            }
        }
    }
    Ok(())
}

/// Sums `per_row(i, acc)` over the rows into `len` values, in fixed chunks of rows added in
/// order (the same bits for any number of threads).
fn ordered_sum(n_rows: usize, len: usize, per_row: impl Fn(usize, &mut [f64]) + Sync) -> Vec<f64> {
    chunked_sum(n_rows, DENSE_CHUNK_ROWS, len, |rows, acc| {
        rows.for_each(|i| per_row(i, acc))
    })
}

/// The design `[1, covariates...]`: its value at cell `i`, column `k`.
fn design(columns: &[Vec<f64>], i: usize, k: usize) -> f64 {
    if k == 0 {
        1.0
    } else {
        columns[k - 1][i]
    }
}

/// The coefficients (`q x g`, row-major) of every gene from `Aᵀx` (`q x g`) over `n` cells,
/// and whether the Gram matrix was singular (then the genes whose values are all equal are
/// kept as they are).
pub(crate) fn continuous_coef(
    columns: &[Vec<f64>],
    n: usize,
    ax: &[f64],
    g: usize,
) -> Result<(Vec<f64>, bool)> {
    let q = columns.len() + 1;
    let gram = ordered_sum(n, q * q, |i, acc| {
        for a in 0..q {
            for b in 0..q {
                acc[a * q + b] += design(columns, i, a) * design(columns, i, b);
            }
        }
    });
    let gram = Mat::from_fn(q, q, |a, b| gram[a * q + b]);
    // scanpy inverts the Gram matrix unless its determinant is 0; then statsmodels' GLM takes
    // the minimum-norm solution and leaves genes whose values are all equal alone. Collinear
    // covariates leave a rounding-sized determinant here rather than an exact 0, so the rank
    // decides: an eigenvalue within q·ε of the largest counts as 0 (numpy's matrix_rank).
    let evd = gram
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| KernelError::Unsupported(format!("regress_out: {e:?}")))?;
    let eig: Vec<f64> = (0..q).map(|k| evd.S()[k].abs()).collect();
    let largest = eig.iter().cloned().fold(0.0, f64::max);
    let singular = eig.iter().any(|&e| e <= largest * q as f64 * f64::EPSILON);
    let solve = if singular {
        evd.pseudoinverse()
    } else {
        gram.partial_piv_lu().inverse()
    };
    // coef = solve · Aᵀx (q x g).
    let mut coef = vec![0f64; q * g];
    for a in 0..q {
        for b in 0..q {
            let s = solve[(a, b)];
            for (c, &m) in coef[a * g..(a + 1) * g]
                .iter_mut()
                .zip(&ax[b * g..(b + 1) * g])
            {
                *c += s * m;
            }
        }
    }
    Ok((coef, singular))
}

/// Continuous covariates: the design `[1, covariates...]`, solved for every gene at once.
fn continuous(x: &mut DenseMatrix<f32>, columns: &[Vec<f64>]) -> Result<()> {
    let (n, g, q) = (x.n_rows, x.n_cols, columns.len() + 1);
    let xt = &*x;
    // Aᵀx (q x g, row-major).
    let ax = ordered_sum(n, q * g, |i, acc| {
        let row = xt.row(i);
        for k in 0..q {
            let a = design(columns, i, k);
            for (s, &v) in acc[k * g..(k + 1) * g].iter_mut().zip(row) {
                *s += a * v as f64;
            }
        }
    });
    let (coef, singular) = continuous_coef(columns, n, &ax, g)?;
    let keep = if singular {
        constant_genes(x)
    } else {
        vec![false; g]
    };
    x.data
        .par_chunks_mut(g.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            for (j, v) in row.iter_mut().enumerate() {
                if keep[j] {
                    continue;
                }
                let mut fit = 0f64;
                for k in 0..q {
                    fit += design(columns, i, k) * coef[k * g + j];
                }
                *v = (*v as f64 - fit) as f32;
            }
        });
    Ok(())
}

/// The genes whose values are all equal (statsmodels cannot fit them; scanpy keeps them).
fn constant_genes(x: &DenseMatrix<f32>) -> Vec<bool> {
    if x.n_rows == 0 {
        return vec![true; x.n_cols];
    }
    let first = x.row(0).to_vec();
    let differs = ordered_sum(x.n_rows, x.n_cols, |i, acc| {
        for ((d, &v), &f) in acc.iter_mut().zip(x.row(i)).zip(&first) {
            if v != f {
                *d = 1.0;
            }
        }
    });
    differs.iter().map(|&d| d == 0.0).collect()
}

/// Each cell's bucket: its category, or `n_categories` for the cells without one (regressor 0).
pub(crate) fn buckets(codes: &[i32], n_categories: usize) -> Vec<u32> {
    codes
        .iter()
        .map(|&c| if c < 0 { n_categories } else { c as usize } as u32)
        .collect()
}

/// Each gene's line through (its mean in the cell's category, its value).
pub(crate) struct CategoryFit {
    /// The regressor of bucket `b` for gene `j` at `b * g + j`, as scanpy stores it (f32; 0
    /// without a category).
    pub means: Vec<f32>,
    /// Intercept and slope per gene.
    pub coef: Vec<(f64, f64)>,
}

/// The fit from the genes' sums per bucket (`(n_categories + 1) x g`) and the buckets' sizes.
pub(crate) fn category_fit(sums: &[f64], counts: &[usize], g: usize) -> CategoryFit {
    let buckets = counts.len();
    let n_categories = buckets - 1;
    let n: usize = counts.iter().sum();
    let means: Vec<f32> = (0..buckets * g)
        .map(|p| {
            let b = p / g.max(1);
            if b == n_categories || counts[b] == 0 {
                0.0
            } else {
                (sums[p] / counts[b] as f64) as f32
            }
        })
        .collect();
    // Per gene the least-squares line through (regressor, value): both sums by bucket, the
    // regressor being constant within one.
    let coef = (0..g)
        .map(|j| {
            let y_mean = (0..buckets).map(|b| sums[b * g + j]).sum::<f64>() / n as f64;
            let c_mean = (0..buckets)
                .map(|b| counts[b] as f64 * means[b * g + j] as f64)
                .sum::<f64>()
                / n as f64;
            let (mut scc, mut scy) = (0f64, 0f64);
            for b in 0..buckets {
                let dc = means[b * g + j] as f64 - c_mean;
                scc += counts[b] as f64 * dc * dc;
                scy += dc * (sums[b * g + j] - counts[b] as f64 * y_mean);
            }
            if scc > 0.0 {
                let slope = scy / scc;
                (y_mean - slope * c_mean, slope)
            } else {
                // A regressor equal for every cell: the fit is the gene's mean.
                (y_mean, 0.0)
            }
        })
        .collect();
    CategoryFit { means, coef }
}

/// The cells in each bucket.
pub(crate) fn bucket_counts(bucket: &[u32], n_buckets: usize) -> Vec<usize> {
    let mut counts = vec![0usize; n_buckets];
    for &b in bucket {
        counts[b as usize] += 1;
    }
    counts
}

/// One categorical covariate: each gene on `[1, its mean in the cell's category]`.
fn categorical(x: &mut DenseMatrix<f32>, codes: &[i32], n_categories: usize) {
    let (n, g) = (x.n_rows, x.n_cols);
    let n_buckets = n_categories + 1;
    let bucket = buckets(codes, n_categories);
    let xt = &*x;
    let sums = ordered_sum(n, n_buckets * g, |i, acc| {
        let b = bucket[i] as usize;
        for (s, &v) in acc[b * g..(b + 1) * g].iter_mut().zip(xt.row(i)) {
            *s += v as f64;
        }
    });
    let keep = constant_genes(x);
    let fit = category_fit(&sums, &bucket_counts(&bucket, n_buckets), g);
    x.data
        .par_chunks_mut(g.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            let b = bucket[i] as usize;
            for (j, v) in row.iter_mut().enumerate() {
                if keep[j] {
                    continue;
                }
                let (b0, b1) = fit.coef[j];
                *v = (*v as f64 - (b0 + b1 * fit.means[b * g + j] as f64)) as f32;
            }
        });
}

#[cfg(test)]
mod tests;
