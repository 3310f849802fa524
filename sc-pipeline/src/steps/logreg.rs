//! `rank_genes_groups(method='logreg')` (scanpy's): each group's genes ranked by the
//! coefficients of a logistic regression of the groups on X (`sc_kernels::rank_genes::logreg`),
//! into `uns['rank_genes_groups']` with `names` and `scores` only, as scanpy writes them. For
//! two groups scanpy fits the binary model and reports its one row (the second group's
//! coefficients) under the first group alone; so does this. The Python front end fits X; the
//! command's markers row (`--markers-method logreg`) fits `.raw` when the data has one, as its
//! tests do. Computed on the host.

use super::{in_category_order, kernel_error, markers_matrix, obs_labels};
use crate::anndata::{ArrayData, Matrix, Raw, Value};
use crate::{AnnData, Error, Result};
use sc_kernels::rank_genes::logreg::{logreg, LogregParams};

const STEP: &str = "rank_genes_groups";

/// Fits the model of `obs[groupby]`'s groups on X (the categories with cells, in their order)
/// and writes the top `n_genes` genes of each group (all by default) by decreasing coefficient.
pub fn rank_genes_groups_logreg(
    adata: &mut AnnData,
    groupby: &str,
    params: &LogregParams,
    n_genes: Option<usize>,
) -> Result<()> {
    let value = logreg_record(
        adata,
        groupby,
        &adata.x,
        &adata.var.index,
        false,
        params,
        n_genes,
    )?;
    adata.uns.insert(STEP.into(), value);
    Ok(())
}

/// The markers row's logreg: on `.raw` (`raw_apart`'s, else the data's) when there is one,
/// else on X. Says which it fitted.
pub(crate) fn rank_genes_groups_logreg_in(
    adata: &mut AnnData,
    groupby: &str,
    params: &LogregParams,
    n_genes: Option<usize>,
    raw_apart: Option<&Raw>,
) -> Result<&'static str> {
    let (x, genes, on, use_raw) = markers_matrix(adata, raw_apart);
    let value = logreg_record(adata, groupby, x, genes, use_raw, params, n_genes)?;
    adata.uns.insert(STEP.into(), value);
    Ok(on)
}

/// `uns['rank_genes_groups']` of the fit of `obs[groupby]`'s groups on `x` (genes `genes`).
fn logreg_record(
    adata: &AnnData,
    groupby: &str,
    x: &Matrix,
    genes: &[String],
    use_raw: bool,
    params: &LogregParams,
    n_genes: Option<usize>,
) -> Result<Value> {
    let (codes, groups) = obs_labels(adata, STEP, "groupby", groupby)?;
    let (codes, groups) = in_category_order(adata, groupby, codes, groups);
    let x = x.to_csr()?;
    let fit = logreg(x.as_ref(), &codes, groups.len(), params).map_err(|e| match e {
        sc_kernels::KernelError::Unsupported(m) => Error::invalid(format!("obs['{groupby}']"), m),
        e => kernel_error(STEP)(e),
    })?;
    let keep = n_genes.unwrap_or(genes.len()).min(genes.len());
    let (mut names, mut scores) = (Vec::new(), Vec::new());
    for (r, group) in groups.iter().take(fit.rows).enumerate() {
        let coef = fit.row(r);
        let mut order: Vec<usize> = (0..coef.len()).collect();
        // Stable: equal scores keep gene order.
        order.sort_by(|&a, &b| coef[b].total_cmp(&coef[a]));
        order.truncate(keep);
        names.push((
            group.clone(),
            ArrayData::Str(order.iter().map(|&g| genes[g].clone()).collect()),
        ));
        scores.push((
            group.clone(),
            ArrayData::F32(order.iter().map(|&g| coef[g] as f32).collect()),
        ));
    }
    Ok(Value::dict([
        (
            "params",
            Value::dict([
                ("groupby", Value::str(groupby)),
                ("reference", Value::str("rest")),
                ("method", Value::str("logreg")),
                ("use_raw", Value::bool(use_raw)),
                ("layer", Value::Null),
                ("corr_method", Value::str("benjamini-hochberg")),
            ]),
        ),
        ("names", Value::Records(names)),
        ("scores", Value::Records(scores)),
    ]))
}

/// Why the generated demo refuses logreg markers (`run::generated` refuses them before any
/// step runs).
pub(crate) const GENERATED: &str = "--markers-method logreg fits every cell's values at once, \
    which the generated demo never holds: run it on a file, or use another method";
