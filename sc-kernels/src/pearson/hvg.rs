//! The `pearson_residuals` flavour of `highly_variable_genes` (scanpy's
//! `experimental.pp.highly_variable_genes`, rapids-singlecell's
//! `pp.highly_variable_genes(flavor="pearson_residuals")`), as scanpy 1.12 computes it:
//! - per batch (in the sorted order of the batch names), over the genes with counts in it: each
//!   gene's variance (ddof 0, two passes in f64) of its clipped Pearson residuals over the
//!   batch's cells, zeros included; genes without counts in the batch get 0. `clip` defaults to
//!   `sqrt(n)` of the first batch's `n` cells, and that value serves every batch (scanpy sets it
//!   once);
//! - each batch's ranks by decreasing residual variance (ties in gene order); a gene's
//!   `highly_variable_nbatches` counts the batches ranking it among the top `n_top_genes`, its
//!   `highly_variable_rank` is the median of those ranks (NaN if none);
//! - the genes sorted by `nbatches` (descending) then rank (ascending, NaN last), stably; the
//!   first `n_top_genes` are highly variable.

use super::{clipped_residual, no_counts};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::group_by::group_by_key;
use crate::stats::row_sums;
use rayon::prelude::*;

/// Per-gene results, in scanpy's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct PearsonHvg {
    pub means: Vec<f64>,
    pub variances: Vec<f64>,
    pub residual_variances: Vec<f64>,
    pub highly_variable_rank: Vec<f64>,
    pub highly_variable_nbatches: Vec<i64>,
    pub highly_variable_intersection: Vec<bool>,
    pub highly_variable: Vec<bool>,
}

/// The flavour on the counts `x` (cells x genes); `batches`: each cell's batch (`codes`, into
/// `names`), optional.
pub fn highly_variable_pearson_residuals(
    x: &CsrMatrix<f32>,
    theta: f64,
    clip: Option<f64>,
    n_top_genes: usize,
    batches: Option<(&[u32], &[String])>,
) -> Result<PearsonHvg> {
    if theta.is_nan() || theta <= 0.0 {
        return Err(KernelError::param(
            "theta",
            format!("must be > 0, got {theta}"),
        ));
    }
    if let Some(c) = clip {
        if c.is_nan() || c < 0.0 {
            return Err(KernelError::param("clip", format!("must be >= 0, got {c}")));
        }
    }
    if n_top_genes == 0 {
        return Err(KernelError::param("n_top_genes", "must be at least 1"));
    }
    x.check_counts()?;
    let (n, g) = (x.n_rows, x.n_cols);
    // The batches in the sorted order of their names (scanpy's np.unique), each its cells.
    let groups: Vec<Vec<usize>> = match batches {
        None => vec![(0..n).collect()],
        Some((codes, names)) => {
            if codes.len() != n || codes.iter().any(|&c| c as usize >= names.len()) {
                return Err(KernelError::Shape(format!(
                    "batch codes: {} for {n} cells, into {} batches",
                    codes.len(),
                    names.len()
                )));
            }
            let mut order: Vec<usize> = (0..names.len()).collect();
            order.sort_by(|&p, &q| names[p].cmp(&names[q]));
            let (cells, starts) = group_by_key(codes, names.len());
            order
                .into_iter()
                .map(|k| {
                    cells[starts[k]..starts[k + 1]]
                        .iter()
                        .map(|&i| i as usize)
                        .collect()
                })
                .filter(|r: &Vec<usize>| !r.is_empty())
                .collect()
        }
    };
    let clip = clip.unwrap_or_else(|| (groups[0].len() as f64).sqrt());
    let mut vars = Vec::with_capacity(groups.len());
    for rows in &groups {
        vars.push(batch_residual_variances(
            &x.take_rows(rows),
            rows,
            theta,
            clip,
        )?);
    }
    let nb = vars.len();
    let mut ranks = vec![vec![0usize; g]; nb];
    for (b, v) in vars.iter().enumerate() {
        let mut order: Vec<usize> = (0..g).collect();
        order.sort_by(|&p, &q| v[q].total_cmp(&v[p]));
        for (k, &j) in order.iter().enumerate() {
            ranks[b][j] = k;
        }
    }
    let mut nbatches = vec![0i64; g];
    let mut median = vec![f64::NAN; g];
    for j in 0..g {
        let mut top: Vec<f64> = (0..nb)
            .map(|b| ranks[b][j])
            .filter(|&r| r < n_top_genes)
            .map(|r| r as f32 as f64)
            .collect();
        nbatches[j] = top.len() as i64;
        if !top.is_empty() {
            top.sort_by(f64::total_cmp);
            let m = top.len();
            median[j] = if m % 2 == 1 {
                top[m / 2]
            } else {
                (top[m / 2 - 1] + top[m / 2]) / 2.0
            };
        }
    }
    let mut order: Vec<usize> = (0..g).collect();
    order.sort_by(|&p, &q| {
        nbatches[q]
            .cmp(&nbatches[p])
            .then_with(|| match (median[p].is_nan(), median[q].is_nan()) {
                (false, false) => median[p].total_cmp(&median[q]),
                (a, b) => a.cmp(&b),
            })
    });
    let mut highly_variable = vec![false; g];
    for &j in order.iter().take(n_top_genes) {
        highly_variable[j] = true;
    }
    let (means, variances) = crate::stats::col_mean_var(x, None);
    Ok(PearsonHvg {
        means,
        variances,
        residual_variances: (0..g)
            .map(|j| vars.iter().map(|v| v[j]).sum::<f64>() / nb as f64)
            .collect(),
        highly_variable_rank: median,
        highly_variable_intersection: nbatches.iter().map(|&k| k == nb as i64).collect(),
        highly_variable_nbatches: nbatches,
        highly_variable,
    })
}

/// Each gene's variance of its clipped residuals over the batch `x` (its cells' rows `rows` of
/// the whole matrix, for the error); 0 for a gene without counts.
fn batch_residual_variances(
    x: &CsrMatrix<f32>,
    rows: &[usize],
    theta: f64,
    clip: f64,
) -> Result<Vec<f64>> {
    let n = x.n_rows;
    let cells = row_sums(x);
    if let Some(i) = cells.iter().position(|&s| s == 0.0) {
        return Err(no_counts("cell", rows[i]));
    }
    let t = x.transpose();
    let genes = row_sums(&t);
    let total: f64 = genes.iter().sum();
    Ok((0..t.n_rows)
        .into_par_iter()
        .map(|j| {
            if genes[j] == 0.0 {
                return 0.0;
            }
            let (idx, val) = t.row(j);
            // Each cell's clipped residual, its stored count or 0.
            let residual =
                |i: usize, v: f64| clipped_residual(v, genes[j] * cells[i] / total, theta, clip);
            let each = |f: &mut dyn FnMut(f64)| {
                let mut k = 0;
                for i in 0..n {
                    let v = if k < idx.len() && idx[k] as usize == i {
                        k += 1;
                        val[k - 1] as f64
                    } else {
                        0.0
                    };
                    f(residual(i, v));
                }
            };
            let mut sum = 0.0;
            each(&mut |r| sum += r);
            let mean = sum / n as f64;
            let mut sq = 0.0;
            each(&mut |r| sq += (r - mean) * (r - mean));
            sq / n as f64
        })
        .collect())
}
