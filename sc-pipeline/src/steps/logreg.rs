//! `rank_genes_groups(method='logreg')` (scanpy's): each group's genes ranked by the
//! coefficients of a logistic regression of the groups on X (`sc_kernels::rank_genes::logreg`),
//! into `uns['rank_genes_groups']` with `names` and `scores` only, as scanpy writes them. For
//! two groups scanpy fits the binary model and reports its one row (the second group's
//! coefficients) under the first group alone; so does this. The Python front end fits X; the
//! command's markers row (`--markers-method logreg`) fits `.raw` when the data has one, as its
//! tests do. With a GPU, the fit's passes over the cells run there (`logreg_gpu`) where the
//! fit is in the genes' coordinates (more cells than genes or than the cells' form takes). The
//! fit stops by scikit-learn's rule (`tol`, `max_iter`: 1e-4 and 100 by default, as scanpy's);
//! the outcome says whether `max_iter` stopped it first, where scikit-learn warns.

use super::{in_category_order, kernel_error, markers_matrix, obs_labels};
use crate::anndata::{ArrayData, Matrix, Raw, Value};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::rank_genes::logreg::{logreg, logreg_gpu, runs_on_gpu, LogregParams};

const STEP: &str = "rank_genes_groups";

/// How a logreg fit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogregOutcome {
    /// L-BFGS iterations taken.
    pub iterations: usize,
    /// Stopped by `tol` (not by `max_iter` or a line search that found no lower point, where
    /// scikit-learn warns "lbfgs failed to converge").
    pub converged: bool,
    /// Whether its passes over the cells ran on the GPU.
    pub on_gpu: bool,
}

impl LogregOutcome {
    /// What ended the fit short of `tol`, in scikit-learn's terms and with its cure (the text
    /// of its "lbfgs failed to converge" warning, which Python gives); `None` when `tol` did.
    pub fn shortfall(&self, params: &LogregParams) -> Option<String> {
        if self.converged {
            return None;
        }
        Some(if self.iterations >= params.max_iter {
            format!(
                "lbfgs stopped at max_iter={} iterations before the gradient reached tol={:e}. \
                 Increase max_iter to fit further.",
                params.max_iter, params.tol
            )
        } else {
            format!(
                "lbfgs stopped after {} iterations before the gradient reached tol={:e}, \
                 finding no lower point (f64's floor). A larger tol ends the fit by its gradient.",
                self.iterations, params.tol
            )
        })
    }

    /// The words a run's log gives it: the device, and what ended it short of `tol`.
    pub fn describe(&self, params: &LogregParams) -> String {
        let device = if self.on_gpu { "GPU" } else { "CPU" };
        match self.shortfall(params) {
            None => format!("on the {device}, {} iterations", self.iterations),
            Some(why) => format!("on the {device}; {why}"),
        }
    }
}

/// Fits the model of `obs[groupby]`'s groups on X (the categories with cells, in their order)
/// and writes the top `n_genes` genes of each group (all by default) by decreasing coefficient;
/// on `gpu` when given.
pub fn rank_genes_groups_logreg(
    adata: &mut AnnData,
    groupby: &str,
    params: &LogregParams,
    n_genes: Option<usize>,
    gpu: Option<&GpuContext>,
) -> Result<LogregOutcome> {
    let (value, outcome) = logreg_record(
        adata,
        groupby,
        &adata.x,
        &adata.var.index,
        false,
        params,
        n_genes,
        gpu,
    )?;
    adata.uns.insert(STEP.into(), value);
    Ok(outcome)
}

/// The markers row's logreg: on `.raw` (`raw_apart`'s, else the data's) when there is one,
/// else on X. Says which it fitted, and how the fit ended.
pub(crate) fn rank_genes_groups_logreg_in(
    adata: &mut AnnData,
    groupby: &str,
    params: &LogregParams,
    n_genes: Option<usize>,
    raw_apart: Option<&Raw>,
    gpu: Option<&GpuContext>,
) -> Result<(&'static str, LogregOutcome)> {
    let (x, genes, on, use_raw) = markers_matrix(adata, raw_apart);
    let (value, outcome) = logreg_record(adata, groupby, x, genes, use_raw, params, n_genes, gpu)?;
    adata.uns.insert(STEP.into(), value);
    Ok((on, outcome))
}

/// `uns['rank_genes_groups']` of the fit of `obs[groupby]`'s groups on `x` (genes `genes`),
/// and how the fit ended.
#[allow(clippy::too_many_arguments)]
fn logreg_record(
    adata: &AnnData,
    groupby: &str,
    x: &Matrix,
    genes: &[String],
    use_raw: bool,
    params: &LogregParams,
    n_genes: Option<usize>,
    gpu: Option<&GpuContext>,
) -> Result<(Value, LogregOutcome)> {
    let (codes, groups) = obs_labels(adata, STEP, "groupby", groupby)?;
    let (codes, groups) = in_category_order(adata, groupby, codes, groups);
    let x = x.to_csr()?;
    let on_gpu = gpu.is_some() && runs_on_gpu(x.n_rows, x.n_cols, groups.len());
    let fit = match gpu {
        Some(ctx) => logreg_gpu(ctx, x.as_ref(), &codes, groups.len(), params),
        None => logreg(x.as_ref(), &codes, groups.len(), params),
    };
    let fit = fit.map_err(|e| match e {
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
    let outcome = LogregOutcome {
        iterations: fit.iterations,
        converged: fit.converged,
        on_gpu,
    };
    let value = Value::dict([
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
    ]);
    Ok((value, outcome))
}

/// Why the generated demo refuses logreg markers (`run::generated` refuses them before any
/// step runs).
pub(crate) const GENERATED: &str = "--markers-method logreg fits every cell's values at once, \
    which the generated demo never holds: run it on a file, or use another method";
