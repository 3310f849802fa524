//! `combat` (scanpy's `pp.combat`, Johnson et al. 2007, as combat.py): batch effects removed
//! by location and scale per gene, with empirical-Bayes shrinkage across genes, as scanpy 1.12
//! computes it (in f64):
//! - a linear model per gene on the batches (one-hot) and numeric covariates, by least
//!   squares; the pooled variance of its residuals (over all cells, divided by `n`); each
//!   cell's standardized value `(y - m) / sqrt(v)` (0 for genes of zero variance), `m` the
//!   batches' weighted mean plus the covariates' part;
//! - per batch: the genes' mean (gamma) and variance with `n - 1` (delta) of the standardized
//!   values, the priors from their spread across genes (gamma: mean and variance with `n`;
//!   delta: scanpy's `_aprior` / `_bprior` with pandas' variance, `n - 1`), and the posterior
//!   means by scanpy's fixed point (`_it_sol`, to a relative change of 1e-4; after one
//!   iteration when a gene's gamma is 0, a gene of zero variance: scanpy's criterion is NaN
//!   then, which ends its loop);
//! - the adjusted values `(s - gamma*) / sqrt(delta*) * sqrt(v) + m`.

#[cfg(test)]
mod tests;

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use rayon::prelude::*;

/// scanpy's convergence criterion of the posterior means.
pub const CONVERGENCE: f64 = 1e-4;

/// Iterations of the fixed point before giving up.
const MAX_ITER: usize = 10_000;

/// The batch-corrected matrix (cells x genes) of `x`; `batches`: each cell's batch
/// (`< n_batches`, each with at least 2 cells); `covariates`: numeric covariates, one column
/// of `n` values each.
pub fn combat<T: Real>(
    x: &DenseMatrix<T>,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
) -> Result<DenseMatrix<f64>> {
    let (n, g) = (x.n_rows, x.n_cols);
    if batches.len() != n || covariates.iter().any(|c| c.len() != n) {
        return Err(KernelError::Shape(format!(
            "combat: {} batch labels and covariates of {:?} values for {n} cells",
            batches.len(),
            covariates.iter().map(Vec::len).collect::<Vec<_>>()
        )));
    }
    let mut sizes = vec![0usize; n_batches];
    for &b in batches {
        let b = b as usize;
        if b >= n_batches {
            return Err(KernelError::param(
                "key",
                format!("batch {b} of {n_batches}"),
            ));
        }
        sizes[b] += 1;
    }
    if let Some(b) = sizes.iter().position(|&s| s < 2) {
        return Err(KernelError::Unsupported(format!(
            "combat: batch {b} has fewer than 2 cells; ComBat needs 2 or more per batch"
        )));
    }
    x.check_finite()?;
    if let Some(c) = covariates
        .iter()
        .position(|c| c.iter().any(|v| !v.is_finite()))
    {
        return Err(KernelError::param(
            "covariates",
            format!("covariate {c} holds a NaN or infinite value"),
        ));
    }
    // The design: batch one-hot, then the covariates; its normal equations' inverse.
    let p = n_batches + covariates.len();
    let design = |j: usize, c: usize| -> f64 {
        if c < n_batches {
            (batches[j] as usize == c) as u8 as f64
        } else {
            covariates[c - n_batches][j]
        }
    };
    let mut dtd = faer::Mat::<f64>::zeros(p, p);
    for j in 0..n {
        for a in 0..p {
            for b in 0..p {
                dtd[(a, b)] += design(j, a) * design(j, b);
            }
        }
    }
    let inverse = inverse(dtd)?;
    // Gene-major copy of the data.
    let genes: Vec<Vec<f64>> = (0..g)
        .into_par_iter()
        .map(|c| (0..n).map(|j| x.data[j * g + c].to_f64()).collect())
        .collect();
    let weights: Vec<f64> = sizes.iter().map(|&s| s as f64 / n as f64).collect();
    let standard: Vec<Standardized> = genes
        .par_iter()
        .map(|y| {
            let dty: Vec<f64> = (0..p)
                .map(|c| (0..n).map(|j| design(j, c) * y[j]).sum())
                .collect();
            let beta: Vec<f64> = (0..p)
                .map(|a| (0..p).map(|b| inverse[(a, b)] * dty[b]).sum())
                .collect();
            let grand: f64 = (0..n_batches).map(|i| weights[i] * beta[i]).sum();
            let mut var = 0.0;
            let mut mean = vec![0.0; n];
            for j in 0..n {
                let covariate_part: f64 = (n_batches..p).map(|c| design(j, c) * beta[c]).sum();
                let fitted = beta[batches[j] as usize] + covariate_part;
                var += (y[j] - fitted).powi(2);
                mean[j] = grand + covariate_part;
            }
            var /= n as f64;
            let sd = var.sqrt();
            let s = (0..n)
                .map(|j| {
                    if var == 0.0 {
                        0.0
                    } else {
                        (y[j] - mean[j]) / sd
                    }
                })
                .collect();
            Standardized { s, mean, sd }
        })
        .collect();
    drop(genes);
    // Per batch: gamma and delta per gene, their priors, the posterior means.
    let members: Vec<Vec<usize>> = (0..n_batches)
        .map(|i| (0..n).filter(|&j| batches[j] as usize == i).collect())
        .collect();
    let mut gamma_star = vec![vec![0.0; g]; n_batches];
    let mut delta_star = vec![vec![0.0; g]; n_batches];
    for i in 0..n_batches {
        let cells = &members[i];
        let k = cells.len() as f64;
        let (gamma_hat, delta_hat): (Vec<f64>, Vec<f64>) = standard
            .par_iter()
            .map(|st| {
                let m = cells.iter().map(|&j| st.s[j]).sum::<f64>() / k;
                let v = cells.iter().map(|&j| (st.s[j] - m).powi(2)).sum::<f64>() / (k - 1.0);
                (m, v)
            })
            .unzip();
        let gamma_bar = mean(&gamma_hat);
        let t2 = variance(&gamma_hat, 0.0);
        let (m, s2) = (mean(&delta_hat), variance(&delta_hat, 1.0));
        let a = (2.0 * s2 + m * m) / s2;
        let b = (m * s2 + m * m * m) / s2;
        let (gs, ds) = posterior(
            &standard, cells, &gamma_hat, &delta_hat, gamma_bar, t2, a, b,
        )?;
        gamma_star[i] = gs;
        delta_star[i] = ds;
    }
    let mut out = DenseMatrix::<f64>::zeros(n, g);
    let columns: Vec<Vec<f64>> = standard
        .par_iter()
        .enumerate()
        .map(|(c, st)| {
            (0..n)
                .map(|j| {
                    let i = batches[j] as usize;
                    (st.s[j] - gamma_star[i][c]) / delta_star[i][c].sqrt() * st.sd + st.mean[j]
                })
                .collect()
        })
        .collect();
    out.data.par_chunks_mut(g).enumerate().for_each(|(j, row)| {
        row.iter_mut()
            .enumerate()
            .for_each(|(c, v)| *v = columns[c][j])
    });
    Ok(out)
}

/// A gene's standardized values, its model's mean per cell and its pooled standard deviation.
struct Standardized {
    s: Vec<f64>,
    mean: Vec<f64>,
    sd: f64,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The variance with `len - ddof` in the denominator.
fn variance(v: &[f64], ddof: f64) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - ddof)
}

/// scanpy's `_it_sol` over all genes of one batch: gamma and delta's posterior means.
#[allow(clippy::too_many_arguments)]
fn posterior(
    standard: &[Standardized],
    cells: &[usize],
    gamma_hat: &[f64],
    delta_hat: &[f64],
    gamma_bar: f64,
    t2: f64,
    a: f64,
    b: f64,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let k = cells.len() as f64;
    let mut g_old = gamma_hat.to_vec();
    let mut d_old = delta_hat.to_vec();
    for _ in 0..MAX_ITER {
        let (g_new, d_new): (Vec<f64>, Vec<f64>) = standard
            .par_iter()
            .enumerate()
            .map(|(c, st)| {
                let gn = (t2 * k * gamma_hat[c] + d_old[c] * gamma_bar) / (t2 * k + d_old[c]);
                let sum2: f64 = cells.iter().map(|&j| (st.s[j] - gn).powi(2)).sum();
                (gn, (0.5 * sum2 + b) / (k / 2.0 + a - 1.0))
            })
            .unzip();
        let c = python_max(
            relative_change(&g_new, &g_old),
            relative_change(&d_new, &d_old),
        );
        g_old = g_new;
        d_old = d_new;
        if !(c > CONVERGENCE) {
            return Ok((g_old, d_old));
        }
    }
    Err(KernelError::Unsupported(format!(
        "combat: the posterior means did not converge in {MAX_ITER} iterations"
    )))
}

/// scanpy's `(abs(new - old) / old).max()` with numpy's semantics: the signs as written (a
/// negative old value counts as no change), and NaN when any ratio is NaN (an old value of 0
/// that stayed 0: a gene of zero variance), which ends scanpy's loop.
fn relative_change(new: &[f64], old: &[f64]) -> f64 {
    new.iter()
        .zip(old)
        .map(|(n, o)| (n - o).abs() / o)
        .try_fold(f64::NEG_INFINITY, |m, r| {
            if r.is_nan() {
                None
            } else {
                Some(m.max(r))
            }
        })
        .unwrap_or(f64::NAN)
}

/// Python's `max(a, b)`: `b` only when `b > a` (so a NaN `a` stays).
fn python_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Inverts the (symmetric positive definite) normal equations.
fn inverse(m: faer::Mat<f64>) -> Result<faer::Mat<f64>> {
    let p = m.nrows();
    use faer::linalg::solvers::DenseSolveCore;
    let lu = m.partial_piv_lu();
    let inv = lu.inverse();
    if (0..p).any(|i| (0..p).any(|j| !inv[(i, j)].is_finite())) {
        return Err(KernelError::Unsupported(
            "combat: the design (batches and covariates) is singular".into(),
        ));
    }
    Ok(inv)
}
