//! `rank_genes_groups` (scanpy's `tl.rank_genes_groups`): marker genes of each group against the
//! rest of the cells (`reference='rest'`, `groups='all'`, `corr_method='benjamini-hochberg'`),
//! by Welch's t-test (`t-test`), the same with the rest's variance divided by the group's size
//! (`t-test_overestim_var`), or the Wilcoxon rank-sum test (`wilcoxon`). Expects log-normalized
//! data (natural `log1p`).
//!
//! `logreg` (a logistic regression's coefficients as scores) is [`logreg`]'s. Not covered:
//! another `reference` or a subset of `groups`, `bonferroni`, `pts`, `rankby_abs`,
//! `mask_var`, and a `log1p` base other than e.
//!
//! ## Definitions, as scanpy 1.11.5
//!
//! For a group of `n` cells among `N`, per gene:
//! - means and variances (ddof 1) of the group and of the rest: `f64` sums of the `f32` values
//!   and of their squares (squared in `f32`), `var = (sq / n - mean^2) * n / (n - 1)`
//!   ([`crate::stats::mean_var_from_sums`]);
//! - `t-test`: `t = (mean - mean_rest) / sqrt(var / n + var_rest / (N - n))`, Welch's
//!   degrees of freedom (1 where they are undefined), p = `2 sf_t(|t|, df)`;
//!   `t-test_overestim_var`: the same with the rest's count replaced by `n`;
//! - `wilcoxon`: ranks over all `N` cells (ties get their average rank), `R` the group's rank
//!   sum, `z = (R - n (N + 1) / 2) / sqrt(tc n (N - n) (N + 1) / 12)` with `tc = 1` or, with
//!   `tie_correct`, `tc = 1 - sum (t^3 - t) / (N^3 - N)` over the runs of `t` tied values;
//!   p = `2 sf_normal(|z|)`;
//! - a NaN score becomes 0 and a NaN p-value 1 (a gene that is constant everywhere);
//! - `pvals_adj`: Benjamini-Hochberg over all genes of the group (statsmodels' `fdr_bh`);
//! - `logfoldchanges = log2((expm1(mean) + 1e-9) / (expm1(mean_rest) + 1e-9))`;
//! - genes sorted by score, descending, the first `n_genes` kept (all by default, as scanpy 1.11;
//!   older versions kept 100). scanpy's order among exactly equal scores is arbitrary (an
//!   unstable sort); here equal scores keep gene order.
//!
//! Scores and fold changes are returned as `f32`, p-values as `f64`, scanpy's stored dtypes.
//! The rest's sums are the other groups' sums added up (scanpy sums the rest's cells directly;
//! equal up to rounding). p-values follow scipy's to ~1e-12 relative (t-test: ~1e-10 where the
//! degrees of freedom reach millions; see [`dist`]), except that below ~1e-307 this keeps
//! subnormal values where scipy may return 0.
//!
//! ## Structure
//!
//! The data is read once per gene ([`GeneColumns`], a transpose by blocks of cells), and the only
//! passes over it are [`group_moments`] and [`rank_sums`] (gene-parallel; a GPU twin replaces
//! them; [`rank_genes_groups_gpu`] runs them on the device). [`markers_from_stats`] turns their `n_groups x n_genes` results into scores, p-values
//! and the sorted tables. Every sum runs in a fixed order, so the result does not depend on the
//! thread count.

pub mod dist;
pub mod fixed_moments;
mod gene_columns;
mod gene_stats;
mod gpu;
pub mod logreg;

pub use gene_columns::GeneColumns;
pub use gene_stats::{group_moments, rank_sums, GroupMoments, RankSums};
pub use gpu::{group_statistics_gpu, rank_genes_groups_gpu, CHUNK_KEYS};

/// The GPU's kernel modules (compiled at warm-up by runs that rank genes; the last, logreg's).
pub const KERNELS: [crate::gpu::module_cache::KernelSource; 3] =
    [gpu::SRC, crate::gpu::radix_sort::SRC, logreg::KERNELS[0]];

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::stats::{add_into, mean_var_from_sums};
use rayon::prelude::*;

/// The test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    TTest,
    TTestOverestimVar,
    Wilcoxon,
}

impl Method {
    /// Every method, scanpy's default (`t-test`) first.
    pub const ALL: [Method; 3] = [Method::TTest, Method::TTestOverestimVar, Method::Wilcoxon];

    /// scanpy's name.
    pub fn name(self) -> &'static str {
        match self {
            Method::TTest => "t-test",
            Method::TTestOverestimVar => "t-test_overestim_var",
            Method::Wilcoxon => "wilcoxon",
        }
    }

    /// Parses scanpy's name.
    pub fn from_name(s: &str) -> Result<Self> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Method::ALL.iter().map(|m| m.name()).collect();
                KernelError::param(
                    "method",
                    format!("unknown method `{s}` ({})", names.join(", ")),
                )
            })
    }
}

impl std::str::FromStr for Method {
    type Err = KernelError;
    fn from_str(s: &str) -> Result<Self> {
        Method::from_name(s)
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parameters, with scanpy's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RankGenesParams {
    pub method: Method,
    /// Genes kept per group; `None`: all (scanpy 1.11's default).
    pub n_genes: Option<usize>,
    /// Wilcoxon only: correct the variance of the rank sum for ties.
    pub tie_correct: bool,
}

impl Default for RankGenesParams {
    fn default() -> Self {
        RankGenesParams {
            method: Method::TTest,
            n_genes: None,
            tie_correct: false,
        }
    }
}

/// One group's table, genes by decreasing score (scanpy's `uns['rank_genes_groups']` columns).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMarkers {
    /// Gene (column) indices.
    pub genes: Vec<u32>,
    pub scores: Vec<f32>,
    pub logfoldchanges: Vec<f32>,
    pub pvals: Vec<f64>,
    pub pvals_adj: Vec<f64>,
}

/// Ranks the genes of `x` (log-normalized, cells x genes) for each of `n_groups` groups against
/// the rest of the cells; cell `i` is in group `groups[i]`. One table per group, in group order.
///
/// Fails when there are fewer than 2 groups, a group has fewer than 2 cells (as scanpy), a code
/// is `>= n_groups`, `groups` is not one code per cell, `n_genes` is 0, or `x` is malformed
/// (including a cell storing a gene twice) or holds a non-finite value.
pub fn rank_genes_groups(
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
    params: &RankGenesParams,
) -> Result<Vec<GroupMarkers>> {
    check_params(params, n_groups)?;
    let cols = GeneColumns::new(x, groups, n_groups)?;
    x.check_finite()?;
    check_group_sizes(cols.group_sizes())?;
    markers_from_columns(&cols, params)
}

/// The tables from the gene columns: the two passes, then [`markers_from_stats`].
fn markers_from_columns(cols: &GeneColumns, params: &RankGenesParams) -> Result<Vec<GroupMarkers>> {
    let moments = group_moments(cols);
    let ranks = (params.method == Method::Wilcoxon).then(|| rank_sums(cols));
    markers_from_stats(&moments, ranks.as_ref(), cols.group_sizes(), params)
}

/// The tables from the per-gene statistics of the groups of `group_sizes` cells: the host half
/// of the step, which a GPU twin shares. `ranks` is needed by `wilcoxon` only.
pub fn markers_from_stats(
    moments: &GroupMoments,
    ranks: Option<&RankSums>,
    group_sizes: &[u64],
    params: &RankGenesParams,
) -> Result<Vec<GroupMarkers>> {
    check_params(params, group_sizes.len())?;
    check_group_sizes(group_sizes)?;
    check_shapes(moments, ranks, group_sizes.len(), params.method)?;
    let n_top = params.n_genes.unwrap_or(usize::MAX);
    let n_cells = group_sizes.iter().sum::<u64>();
    Ok((0..group_sizes.len())
        .into_par_iter()
        .map(|g| {
            let summary = GroupSummary::new(moments, group_sizes, g);
            let (scores, pvals) = match ranks {
                Some(r) if params.method == Method::Wilcoxon => {
                    wilcoxon(r, g, group_sizes[g], n_cells, params.tie_correct)
                }
                _ => t_test(&summary, params.method == Method::TTestOverestimVar),
            };
            group_markers(&scores, &pvals, &summary.log_fold_changes(), n_top)
        })
        .collect())
}

/// The checks that need no data: `n_genes` and the number of groups.
fn check_params(params: &RankGenesParams, n_groups: usize) -> Result<()> {
    if params.n_genes == Some(0) {
        return Err(KernelError::param("n_genes", "must be at least 1"));
    }
    if n_groups < 2 {
        return Err(KernelError::Unsupported(format!(
            "rank_genes_groups needs at least 2 groups, got {n_groups}"
        )));
    }
    Ok(())
}

/// scanpy refuses groups of fewer than 2 cells (their variance is undefined).
fn check_group_sizes(sizes: &[u64]) -> Result<()> {
    match sizes.iter().enumerate().find(|(_, &n)| n < 2) {
        Some((g, n)) => Err(KernelError::Unsupported(format!(
            "group {g} has {n} cell(s); rank_genes_groups needs at least 2 per group"
        ))),
        None => Ok(()),
    }
}

/// The statistics agree with each other and with the number of groups.
fn check_shapes(
    moments: &GroupMoments,
    ranks: Option<&RankSums>,
    n_groups: usize,
    method: Method,
) -> Result<()> {
    let entries = n_groups.checked_mul(moments.n_genes);
    let fits = |len: usize| Some(len) == entries;
    let mut ok = moments.n_groups == n_groups
        && fits(moments.sum.len())
        && fits(moments.sum_sq.len())
        && fits(moments.nnz.len());
    match ranks {
        Some(r) => {
            ok &= r.n_groups == n_groups
                && r.n_genes == moments.n_genes
                && fits(r.rank_sum.len())
                && r.tie_sum.len() == r.n_genes;
        }
        None => ok &= method != Method::Wilcoxon,
    }
    if ok {
        Ok(())
    } else {
        Err(KernelError::Shape(format!(
            "statistics of {n_groups} groups: moments of {} groups x {} genes, rank sums {}",
            moments.n_groups,
            moments.n_genes,
            ranks.map_or("missing".to_string(), |r| format!(
                "of {} groups x {} genes",
                r.n_groups, r.n_genes
            ))
        )))
    }
}

/// Means and variances (ddof 1) of one group and of the rest of the cells, per gene.
struct GroupSummary {
    n: u64,
    n_rest: u64,
    mean: Vec<f64>,
    var: Vec<f64>,
    mean_rest: Vec<f64>,
    var_rest: Vec<f64>,
}

impl GroupSummary {
    /// The rest's sums are the other groups' sums added in group order.
    fn new(m: &GroupMoments, sizes: &[u64], g: usize) -> Self {
        let (n, n_rest) = (sizes[g], sizes.iter().sum::<u64>() - sizes[g]);
        let (mean, var) = mean_var_from_sums(m.sum(g), m.sum_sq(g), n as usize);
        let mut sum_rest = vec![0.0f64; m.n_genes];
        let mut sq_rest = vec![0.0f64; m.n_genes];
        for h in (0..m.n_groups).filter(|&h| h != g) {
            add_into(&mut sum_rest, m.sum(h));
            add_into(&mut sq_rest, m.sum_sq(h));
        }
        let (mean_rest, var_rest) = mean_var_from_sums(&sum_rest, &sq_rest, n_rest as usize);
        GroupSummary {
            n,
            n_rest,
            mean,
            var,
            mean_rest,
            var_rest,
        }
    }

    /// `log2((expm1(mean) + 1e-9) / (expm1(mean_rest) + 1e-9))` per gene.
    fn log_fold_changes(&self) -> Vec<f64> {
        self.mean
            .iter()
            .zip(&self.mean_rest)
            .map(|(&a, &b)| ((a.exp_m1() + 1e-9) / (b.exp_m1() + 1e-9)).log2())
            .collect()
    }
}

/// Scores and p-values of the t-tests; `overestimate_var` divides the rest's variance by the
/// group's size instead of the rest's (`t-test_overestim_var`).
fn t_test(s: &GroupSummary, overestimate_var: bool) -> (Vec<f64>, Vec<f64>) {
    let n_rest = if overestimate_var { s.n } else { s.n_rest };
    (0..s.mean.len())
        .into_par_iter()
        .map(|j| {
            let (t, p) = welch(
                (s.mean[j], s.var[j], s.n as f64),
                (s.mean_rest[j], s.var_rest[j], n_rest as f64),
            );
            (nan_as(t, 0.0), nan_as(p, 1.0))
        })
        .unzip()
}

/// Welch's t statistic and two-sided p-value from `(mean, variance, count)` of two samples, as
/// scipy's `ttest_ind_from_stats(equal_var=False)` (which scanpy passes standard deviations, so
/// each variance goes through a square root and back).
fn welch((mean1, var1, n1): (f64, f64, f64), (mean2, var2, n2): (f64, f64, f64)) -> (f64, f64) {
    let (sd1, sd2) = (var1.sqrt(), var2.sqrt());
    let vn1 = sd1 * sd1 / n1;
    let vn2 = sd2 * sd2 / n2;
    let df = (vn1 + vn2) * (vn1 + vn2) / (vn1 * vn1 / (n1 - 1.0) + vn2 * vn2 / (n2 - 1.0));
    // Undefined when both variances are 0; then any df serves, and scipy takes 1.
    let df = if df.is_nan() { 1.0 } else { df };
    let t = (mean1 - mean2) / (vn1 + vn2).sqrt();
    (t, dist::student_t_two_sided(t, df))
}

/// Scores and p-values of the Wilcoxon rank-sum test for group `g`, of `n` of the `n_cells`
/// cells.
fn wilcoxon(
    r: &RankSums,
    g: usize,
    n: u64,
    n_cells: u64,
    tie_correct: bool,
) -> (Vec<f64>, Vec<f64>) {
    r.group(g)
        .par_iter()
        .zip(r.tie_sum.par_iter())
        .map(|(&rank_sum, &ties)| {
            let tc = tie_correct.then(|| tie_factor(ties, n_cells));
            let z = nan_as(rank_sum_z(rank_sum, n, n_cells, tc), 0.0);
            (z, dist::normal_two_sided(z))
        })
        .unzip()
}

/// The normal approximation of a rank sum: `(R - n (N + 1) / 2) / sqrt(tc n (N - n) (N + 1) / 12)`,
/// with the operations in scanpy's order (its integer products exact, its float ones left to
/// right). `tc = None`: no tie correction.
fn rank_sum_z(rank_sum: f64, n: u64, n_cells: u64, tc: Option<f64>) -> f64 {
    let (n, n_cells) = (u128::from(n), u128::from(n_cells));
    let variance = match tc {
        Some(tc) => tc * n as f64 * (n_cells - n) as f64 * (n_cells + 1) as f64 / 12.0,
        None => (n * (n_cells - n) * (n_cells + 1)) as f64 / 12.0,
    };
    let expected = (n * (n_cells + 1)) as f64 / 2.0;
    (rank_sum - expected) / variance.sqrt()
}

/// The tie correction `1 - sum (t^3 - t) / (N^3 - N)` (0 when all `N` values are equal).
fn tie_factor(tie_sum: f64, n_cells: u64) -> f64 {
    let n = n_cells as f64;
    1.0 - tie_sum / (n.powi(3) - n)
}

/// `v`, or `replacement` when `v` is NaN (scanpy's clean-up: a NaN score becomes 0, a NaN
/// p-value 1).
fn nan_as(v: f64, replacement: f64) -> f64 {
    if v.is_nan() {
        replacement
    } else {
        v
    }
}

/// One group's table: the `n_top` best genes with their statistics, the p-values adjusted over
/// all genes first.
fn group_markers(scores: &[f64], pvals: &[f64], lfc: &[f64], n_top: usize) -> GroupMarkers {
    let adjusted = benjamini_hochberg(pvals);
    let genes = top_genes(scores, n_top);
    GroupMarkers {
        scores: genes.iter().map(|&j| scores[j] as f32).collect(),
        logfoldchanges: genes.iter().map(|&j| lfc[j] as f32).collect(),
        pvals: genes.iter().map(|&j| pvals[j]).collect(),
        pvals_adj: genes.iter().map(|&j| adjusted[j]).collect(),
        genes: genes.iter().map(|&j| j as u32).collect(),
    }
}

/// Benjamini-Hochberg adjusted p-values, as statsmodels' `multipletests(method='fdr_bh')`: with
/// the p-values sorted, `p_(i) / (i / m)`, then the running minimum from the largest down,
/// capped at 1. (The order among equal p-values does not change the result.)
pub fn benjamini_hochberg(pvals: &[f64]) -> Vec<f64> {
    let m = pvals.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_unstable_by(|&a, &b| pvals[a].total_cmp(&pvals[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = f64::INFINITY;
    for (i, &j) in order.iter().enumerate().rev() {
        running = running.min(pvals[j] / ((i + 1) as f64 / m as f64));
        adjusted[j] = running.min(1.0);
    }
    adjusted
}

/// Indices of the `n` highest scores, highest first, equal scores by index (`-0.0` counts as
/// `0.0`, as in numpy's sort).
pub fn top_genes(scores: &[f64], n: usize) -> Vec<usize> {
    let by_score = |&a: &usize, &b: &usize| {
        (scores[b] + 0.0)
            .total_cmp(&(scores[a] + 0.0))
            .then(a.cmp(&b))
    };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    let n = n.min(order.len());
    if n < order.len() {
        order.select_nth_unstable_by(n, by_score);
        order.truncate(n);
    }
    order.sort_unstable_by(by_score);
    order
}

#[cfg(test)]
mod scanpy_fixture;
#[cfg(test)]
mod tests;
