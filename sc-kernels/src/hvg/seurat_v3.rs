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
use super::passes::{group_sizes, Batches, ColumnPasses, CpuPasses, Moments};
use super::{Flavor, HvgParams, HvgResult};
use crate::columns::Column;
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::reduce::Transform;
use crate::real::Real;
use crate::stats::mean_var_from_sums;
use std::cmp::Ordering;

/// The regularized standard deviation `sqrt(10^fit)` of each gene from the loess fit of log10
/// variance on log10 mean over the non-constant genes (1 for constant genes).
fn regularized_std(mean: &[f64], var: &[f64], span: f64) -> Result<Vec<f64>> {
    let not_const: Vec<usize> = (0..mean.len()).filter(|&j| var[j] > 0.0).collect();
    let xs: Vec<f64> = not_const.iter().map(|&j| mean[j].log10()).collect();
    let ys: Vec<f64> = not_const.iter().map(|&j| var[j].log10()).collect();
    let fitted = loess_fitted(&xs, &ys, span).map_err(|e| {
        KernelError::Unsupported(format!(
            "seurat_v3 loess fit over {} non-constant genes failed: {e}",
            xs.len()
        ))
    })?;
    let mut estimat = vec![0.0f64; mean.len()];
    for (k, &j) in not_const.iter().enumerate() {
        estimat[j] = fitted[k];
    }
    Ok(estimat.iter().map(|&e| 10f64.powf(e).sqrt()).collect())
}

/// Normalized variances of the genes of each group `(group, cells)` of `groups`, from the
/// groups' moments (`per_group`, as [`ColumnPasses::moments`] gives them) and one clipped pass:
/// values are clipped at `mean + sqrt(n) * sd` and the result is the variance of
/// `(x - mean) / sd` (ddof 1).
fn normalized_variances_of<P: ColumnPasses>(
    p: &P,
    per_group: &[Moments],
    groups: &[(usize, usize)],
    span: f64,
) -> Result<Vec<Vec<f64>>> {
    let ng = p.n_cols();
    let mut clip = vec![0.0f64; per_group.len() * ng];
    let mut fits = Vec::with_capacity(groups.len());
    for &(g, n) in groups {
        let (mean, var) = mean_var_from_sums(&per_group[g].sums, &per_group[g].sq, n);
        let reg_std = regularized_std(&mean, &var, span)?;
        let vmax = (n as f64).sqrt();
        for (c, (&s, &m)) in clip[g * ng..(g + 1) * ng]
            .iter_mut()
            .zip(reg_std.iter().zip(&mean))
        {
            *c = s * vmax + m;
        }
        fits.push((g, n, mean, reg_std));
    }
    let (sums, sq) = p.clipped_sums(&clip)?;
    Ok(fits
        .into_iter()
        .map(|(g, n, mean, reg_std)| {
            let (s, q) = (&sums[g * ng..(g + 1) * ng], &sq[g * ng..(g + 1) * ng]);
            let nf = n as f64;
            (0..ng)
                .map(|j| {
                    let rs2 = reg_std[j] * reg_std[j];
                    (1.0 / ((nf - 1.0) * rs2))
                        * ((nf * (mean[j] * mean[j])) + q[j] - 2.0 * s[j] * mean[j])
                })
                .collect()
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

/// The groups `(group, cells)` of each batch in the order scanpy takes them (`np.unique` of the
/// batch names: sorted), empty ones left out; all cells as group 0 without batches.
fn batch_groups(sizes: Vec<usize>, batches: Option<&Batches>) -> Result<Vec<(usize, usize)>> {
    let groups: Vec<(usize, usize)> = match batches {
        None => vec![(0, sizes[0])],
        Some(b) => {
            let mut cats: Vec<usize> = (0..b.categories.len()).collect();
            cats.sort_by(|&a, &c| b.categories[a].cmp(&b.categories[c]));
            cats.into_iter()
                .filter(|&c| sizes[c] > 0)
                .map(|c| (c, sizes[c]))
                .collect()
        }
    };
    if let Some(&(_, n)) = groups.iter().find(|g| g.1 < 2) {
        return Err(KernelError::Unsupported(format!(
            "seurat_v3 needs at least two cells per batch, a batch has {n}"
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
    let groups = batch_groups(group_sizes(x.n_rows, batches), batches)?;
    let p = CpuPasses::new(x, batches);
    let per_group = p.moments(Transform::Identity, true)?;
    normalized_variances_of(&p, &per_group, &groups, span)
}

pub(crate) fn highly_variable_genes_seurat_v3<P: ColumnPasses>(
    p: &P,
    params: &HvgParams,
    batches: Option<&Batches>,
) -> Result<HvgResult> {
    let n_top = params.n_top_genes.unwrap_or(2000);
    let ng = p.n_cols();
    let groups = batch_groups(p.group_sizes(batches)?, batches)?;
    let per_group = p.moments(Transform::Identity, true)?;
    let all = match batches {
        Some(_) => p.moments(Transform::Identity, false)?.swap_remove(0),
        None => per_group[0].clone(),
    };
    let (means, variances) = mean_var_from_sums(&all.sums, &all.sq, p.n_rows());
    let ngv = normalized_variances_of(p, &per_group, &groups, params.span)?;
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
