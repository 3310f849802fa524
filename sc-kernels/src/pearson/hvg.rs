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

use super::{clipped_residual, gene_totals, no_counts};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::group_by::group_by_key;
use crate::stats::{chunked_sum, row_sums, DENSE_CHUNK_ROWS};

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
    check_params(theta, clip, n_top_genes)?;
    x.check_counts()?;
    let groups = batch_groups(x.n_rows, batches)?;
    let clip = clip.unwrap_or_else(|| (groups[0].len() as f64).sqrt());
    let mut vars = Vec::with_capacity(groups.len());
    for rows in &groups {
        // One batch of every cell (no batch key) reads X itself, not a copy.
        let batch = if rows.len() == x.n_rows {
            std::borrow::Cow::Borrowed(x)
        } else {
            std::borrow::Cow::Owned(x.take_rows(rows))
        };
        vars.push(batch_residual_variances(&batch, rows, theta, clip)?);
    }
    let (means, variances) = crate::stats::col_mean_var(x, None);
    Ok(select(vars, n_top_genes, means, variances))
}

/// The parameters checked.
pub(super) fn check_params(theta: f64, clip: Option<f64>, n_top_genes: usize) -> Result<()> {
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
    Ok(())
}

/// The batches' cells (rows, increasing), in the sorted order of the batch names (scanpy's
/// np.unique); all `n` cells as one batch without `batches`.
pub(super) fn batch_groups(
    n: usize,
    batches: Option<(&[u32], &[String])>,
) -> Result<Vec<Vec<usize>>> {
    Ok(match batches {
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
    })
}

/// The ranks, batch counts and selection from each batch's residual variances `vars`.
pub(super) fn select(
    vars: Vec<Vec<f64>>,
    n_top_genes: usize,
    means: Vec<f64>,
    variances: Vec<f64>,
) -> PearsonHvg {
    let nb = vars.len();
    let g = means.len();
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
    PearsonHvg {
        means,
        variances,
        residual_variances: (0..g)
            .map(|j| vars.iter().map(|v| v[j]).sum::<f64>() / nb as f64)
            .collect(),
        highly_variable_rank: median,
        highly_variable_intersection: nbatches.iter().map(|&k| k == nb as i64).collect(),
        highly_variable_nbatches: nbatches,
        highly_variable,
    }
}

/// Each gene's variance of its clipped residuals over the batch `x` (its cells' rows `rows` of
/// the whole matrix, for the error); 0 for a gene without counts. Every sum is over chunks of
/// [`DENSE_CHUNK_ROWS`] rows added in order, the rows of a chunk one after another (the GPU
/// twin's bits).
fn batch_residual_variances(
    x: &CsrMatrix<f32>,
    rows: &[usize],
    theta: f64,
    clip: f64,
) -> Result<Vec<f64>> {
    let cells = row_sums(x);
    if let Some(i) = cells.iter().position(|&s| s == 0.0) {
        return Err(no_counts("cell", rows[i]));
    }
    let genes = gene_totals(x);
    let total: f64 = genes.iter().sum();
    let g = x.n_cols;
    // Over the batch's rows, each gene's sum of `term(j, residual)`, zeros included.
    let sums = |term: &(dyn Fn(usize, f64) -> f64 + Sync)| {
        chunked_sum(x.n_rows, DENSE_CHUNK_ROWS, g, |range, acc| {
            let mut dense = vec![0f32; g];
            for i in range {
                let (c, v) = x.row(i);
                for (&j, &v) in c.iter().zip(v) {
                    dense[j as usize] = v;
                }
                for (j, a) in acc.iter_mut().enumerate() {
                    if genes[j] != 0.0 {
                        let mu = genes[j] * cells[i] / total;
                        *a += term(j, clipped_residual(dense[j] as f64, mu, theta, clip));
                    }
                }
                for &j in c {
                    dense[j as usize] = 0.0;
                }
            }
        })
    };
    let n = x.n_rows as f64;
    let means: Vec<f64> = sums(&|_, r| r).iter().map(|s| s / n).collect();
    let sq = sums(&|j, r| (r - means[j]) * (r - means[j]));
    Ok(residual_variances(&genes, &sq, x.n_rows))
}

/// Each gene's variance from its sum of squared deviations over `n` cells; 0 for a gene
/// without counts.
pub(super) fn residual_variances(genes: &[f64], sq: &[f64], n: usize) -> Vec<f64> {
    genes
        .iter()
        .zip(sq)
        .map(|(&t, &q)| if t == 0.0 { 0.0 } else { q / n as f64 })
        .collect()
}
