//! The `seurat_v3` and `seurat_v3_paper` flavours (on raw counts): per batch (sorted batch
//! names), a loess fit (span 0.3, degree 2) of log10 variance on log10 mean over the
//! non-constant genes gives a regularized standard deviation `sd = sqrt(10^fit)` (1 for constant
//! genes); values are clipped at `mean + sqrt(n) * sd` and the normalized variance is the
//! variance of `(x - mean) / sd` (ddof 1). Genes are ranked by normalized variance within each
//! batch; `highly_variable_nbatches` counts batches where a gene ranks in the top `n_top_genes`,
//! `highly_variable_rank` is its median rank over those batches. seurat_v3 sorts by rank then by
//! number of batches (descending), seurat_v3_paper by number of batches then rank; the first
//! `n_top_genes` are selected. Ties in normalized variance are ranked by gene order (numpy's
//! unstable argsort may order them differently: "up to ties").

use super::loess::loess_fitted;
use super::{Batches, Flavor, HvgParams, HvgResult};
use crate::columns::Column;
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use crate::stats::{add_into, col_mean_var, ranges};
use rayon::prelude::*;
use std::cmp::Ordering;

/// Normalized variances of the genes over `rows`.
fn normalized_variance<T: Real>(x: &CsrMatrix<T>, rows: &[usize], span: f64) -> Result<Vec<f64>> {
    let (mean, var) = col_mean_var(x, Some(rows));
    let not_const: Vec<usize> = (0..x.n_cols).filter(|&j| var[j] > 0.0).collect();
    let xs: Vec<f64> = not_const.iter().map(|&j| mean[j].log10()).collect();
    let ys: Vec<f64> = not_const.iter().map(|&j| var[j].log10()).collect();
    let fitted = loess_fitted(&xs, &ys, span).map_err(|e| {
        KernelError::Unsupported(format!(
            "seurat_v3 loess fit over {} non-constant genes failed: {e}",
            xs.len()
        ))
    })?;
    let mut estimat = vec![0.0f64; x.n_cols];
    for (k, &j) in not_const.iter().enumerate() {
        estimat[j] = fitted[k];
    }
    let reg_std: Vec<f64> = estimat.iter().map(|&e| 10f64.powf(e).sqrt()).collect();
    let n = rows.len();
    let vmax = (n as f64).sqrt();
    let clip: Vec<f64> = reg_std
        .iter()
        .zip(&mean)
        .map(|(&s, &m)| s * vmax + m)
        .collect();
    let nc = x.n_cols;
    let (sq, s) = ranges(n)
        .into_par_iter()
        .map(|range| {
            let mut sq = vec![0.0f64; nc];
            let mut s = vec![0.0f64; nc];
            for &i in &rows[range] {
                let (c, v) = x.row(i);
                for (&cc, &vv) in c.iter().zip(v) {
                    let j = cc as usize;
                    let e = vv.to_f64().min(clip[j]);
                    sq[j] += e * e;
                    s[j] += e;
                }
            }
            (sq, s)
        })
        .reduce(
            || (vec![0.0; nc], vec![0.0; nc]),
            |mut a, b| {
                add_into(&mut a.0, &b.0);
                add_into(&mut a.1, &b.1);
                a
            },
        );
    let nf = n as f64;
    Ok((0..nc)
        .map(|j| {
            let rs2 = reg_std[j] * reg_std[j];
            (1.0 / ((nf - 1.0) * rs2)) * ((nf * (mean[j] * mean[j])) + sq[j] - 2.0 * s[j] * mean[j])
        })
        .collect())
}

/// Rank of each gene by decreasing value (0 = highest), NaN last, ties by gene order.
fn ranks_desc(v: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| match (v[a].is_nan(), v[b].is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => v[b].partial_cmp(&v[a]).unwrap(),
    });
    let mut rank = vec![0; v.len()];
    for (r, &j) in order.iter().enumerate() {
        rank[j] = r;
    }
    rank
}

/// The median of the non-NaN values (float32, as numpy's masked median), NaN if none.
fn nan_median_f32(v: &mut Vec<f32>) -> f32 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f32::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The cells of each batch in the order scanpy takes them (`np.unique` of the batch names: sorted).
fn batch_groups(n_rows: usize, batches: Option<&Batches>) -> Result<Vec<Vec<usize>>> {
    let x_rows = n_rows;
    // np.unique over the batch labels: sorted by name.
    let groups: Vec<Vec<usize>> = match batches {
        None => vec![(0..x_rows).collect()],
        Some(b) => {
            let mut cats: Vec<usize> = (0..b.categories.len()).collect();
            cats.sort_by(|&a, &c| b.categories[a].cmp(&b.categories[c]));
            let by_code = {
                let mut rows = vec![Vec::new(); b.categories.len()];
                for (i, &c) in b.codes.iter().enumerate() {
                    rows[c as usize].push(i);
                }
                rows
            };
            cats.into_iter()
                .map(|c| by_code[c].clone())
                .filter(|r| !r.is_empty())
                .collect()
        }
    };
    if let Some(r) = groups.iter().find(|r| r.len() < 2) {
        return Err(KernelError::Unsupported(format!(
            "seurat_v3 needs at least two cells per batch, a batch has {}",
            r.len()
        )));
    }
    Ok(groups)
}

/// The normalized variance of every gene in each batch (batches in scanpy's order), before ranking.
pub fn normalized_variances<T: Real>(
    x: &CsrMatrix<T>,
    span: f64,
    batches: Option<&Batches>,
) -> Result<Vec<Vec<f64>>> {
    batch_groups(x.n_rows, batches)?
        .iter()
        .map(|rows| normalized_variance(x, rows, span))
        .collect()
}

pub(crate) fn highly_variable_genes_seurat_v3<T: Real>(
    x: &CsrMatrix<T>,
    params: &HvgParams,
    batches: Option<&Batches>,
) -> Result<HvgResult> {
    let n_top = params.n_top_genes.unwrap_or(2000);
    let ng = x.n_cols;
    let (means, variances) = col_mean_var(x, None);
    let groups = batch_groups(x.n_rows, batches)?;
    let ngv = groups
        .iter()
        .map(|rows| normalized_variance(x, rows, params.span))
        .collect::<Result<Vec<_>>>()?;
    let ranks: Vec<Vec<usize>> = ngv.iter().map(|v| ranks_desc(v)).collect();
    let mut nbatches = vec![0i64; ng];
    let mut median_rank = vec![0f32; ng];
    let mut variances_norm = vec![0f64; ng];
    let mut buf = Vec::with_capacity(ranks.len());
    for j in 0..ng {
        buf.clear();
        for r in &ranks {
            let rk = r[j] as f32;
            if (rk as usize) < n_top {
                nbatches[j] += 1;
                buf.push(rk);
            } else {
                buf.push(f32::NAN);
            }
        }
        median_rank[j] = nan_median_f32(&mut buf);
        variances_norm[j] = ngv.iter().map(|v| v[j]).sum::<f64>() / ngv.len() as f64;
    }
    let cmp_rank = |a: usize, b: usize| match (median_rank[a].is_nan(), median_rank[b].is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => median_rank[a].partial_cmp(&median_rank[b]).unwrap(),
    };
    let mut order: Vec<usize> = (0..ng).collect();
    match params.flavor {
        Flavor::SeuratV3Paper => {
            order.sort_by(|&a, &b| nbatches[b].cmp(&nbatches[a]).then_with(|| cmp_rank(a, b)))
        }
        _ => order.sort_by(|&a, &b| cmp_rank(a, b).then_with(|| nbatches[b].cmp(&nbatches[a]))),
    }
    let mut hv = vec![false; ng];
    for &j in order.iter().take(n_top) {
        hv[j] = true;
    }
    let mut columns = vec![
        ("highly_variable".to_string(), Column::Bool(hv.clone())),
        ("highly_variable_rank".to_string(), Column::F32(median_rank)),
        ("means".to_string(), Column::F64(means)),
        ("variances".to_string(), Column::F64(variances)),
        ("variances_norm".to_string(), Column::F64(variances_norm)),
    ];
    if batches.is_some() {
        columns.push((
            "highly_variable_nbatches".to_string(),
            Column::I64(nbatches),
        ));
    }
    Ok(HvgResult {
        highly_variable: hv,
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_put_nan_last_and_keep_gene_order_on_ties() {
        assert_eq!(ranks_desc(&[1.0, f64::NAN, 3.0, 1.0]), [1, 3, 0, 2]);
        let mut v = vec![f32::NAN, 4.0, 2.0];
        assert_eq!(nan_median_f32(&mut v), 3.0);
        assert!(nan_median_f32(&mut vec![f32::NAN]).is_nan());
    }
}
