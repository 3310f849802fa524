//! `highly_variable_genes` (scanpy's `pp.highly_variable_genes`) with the flavours `seurat`,
//! `cell_ranger`, `seurat_v3` and `seurat_v3_paper`, with or without a batch key.
//!
//! - [`seurat`]: dispersions of `expm1(X)`, log-transformed, normalized within 20 equal-width bins
//!   of the log mean (mean / std of each bin).
//! - [`cell_ranger`]: dispersions of `X` as given, normalized within bins at the 10th, 15th, ...,
//!   100th percentiles of the mean (median / MAD of each bin).
//! - [`seurat_v3`]: standardized variance of the counts against a loess fit ([`loess`]) of
//!   log10 variance on log10 mean, with clipping.
//! - [`binning`]: `pd.cut`, percentiles, per-bin statistics and the selection shared by the first
//!   two; [`batch`]: the merge of per-batch results (`highly_variable_nbatches`,
//!   `highly_variable_intersection`, ranking by number of batches then normalized dispersion).
//!
//! The result carries the `var` columns scanpy writes, in its order and dtypes.
//!
//! [`highly_variable_genes_gpu`] is the GPU twin: the column passes run on the device, the rest
//! is the same host code (the crate-private `ColumnPasses` trait is the seam).

pub mod batch;
pub mod binning;
pub mod cell_ranger;
pub mod loess;
pub mod seurat;
pub mod seurat_v3;

pub(crate) mod gpu;

/// The step\'s kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    highly_variable_genes_blocks, highly_variable_genes_gpu, highly_variable_genes_gpu_across,
    highly_variable_genes_streamed,
};

use crate::columns::{Column, NamedColumns};
use crate::comm::{all_reduce_counts, sum_count, Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::reduce::Transform;
use crate::real::Real;
use crate::stats::ranges;
use rayon::prelude::*;

/// The method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Seurat,
    CellRanger,
    SeuratV3,
    SeuratV3Paper,
}

impl Flavor {
    /// Every flavour, the default (`cell_ranger`) first: what `from_name` accepts and what
    /// command lines offer.
    pub const ALL: [Flavor; 4] = [
        Flavor::CellRanger,
        Flavor::Seurat,
        Flavor::SeuratV3,
        Flavor::SeuratV3Paper,
    ];

    /// scanpy's name.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Seurat => "seurat",
            Flavor::CellRanger => "cell_ranger",
            Flavor::SeuratV3 => "seurat_v3",
            Flavor::SeuratV3Paper => "seurat_v3_paper",
        }
    }

    /// Parses scanpy's name.
    pub fn from_name(s: &str) -> Result<Self> {
        Flavor::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Flavor::ALL.iter().map(|f| f.name()).collect();
                KernelError::param(
                    "flavor",
                    format!("unknown flavor `{s}` ({})", names.join(", ")),
                )
            })
    }
}

/// How genes are selected by the dispersion-based flavours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Selection {
    /// The `n` genes with the highest normalized dispersion (ties at the cut-off kept, except
    /// across batches, where exactly `n` are taken as scanpy does).
    NTop(usize),
    /// Genes with `min_mean < mean < max_mean` and `min_disp < normalized dispersion < max_disp`.
    Cutoffs {
        min_disp: f64,
        max_disp: f64,
        min_mean: f64,
        max_mean: f64,
    },
}

/// Parameters, with scanpy's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct HvgParams {
    pub flavor: Flavor,
    /// `None`: the cutoffs (seurat / cell_ranger) or 2000 (seurat_v3).
    pub n_top_genes: Option<usize>,
    pub min_disp: f64,
    pub max_disp: f64,
    pub min_mean: f64,
    pub max_mean: f64,
    /// Loess span (seurat_v3).
    pub span: f64,
    /// Number of mean bins (seurat).
    pub n_bins: usize,
    /// The base of the preceding `log1p` when it was not `e` (`uns['log1p']['base']`; seurat).
    pub log1p_base: Option<f64>,
}

impl Default for HvgParams {
    fn default() -> Self {
        HvgParams {
            flavor: Flavor::Seurat,
            n_top_genes: None,
            min_disp: 0.5,
            max_disp: f64::INFINITY,
            min_mean: 0.0125,
            max_mean: 3.0,
            span: 0.3,
            n_bins: 20,
            log1p_base: None,
        }
    }
}

impl HvgParams {
    pub(crate) fn selection(&self) -> Selection {
        match self.n_top_genes {
            Some(n) => Selection::NTop(n),
            None => Selection::Cutoffs {
                min_disp: self.min_disp,
                max_disp: self.max_disp,
                min_mean: self.min_mean,
                max_mean: self.max_mean,
            },
        }
    }
}

/// Batch of each cell: `codes[i]` indexes `categories` (a categorical `obs` column).
#[derive(Debug, Clone, PartialEq)]
pub struct Batches {
    pub codes: Vec<u32>,
    pub categories: Vec<String>,
}

/// The outcome: the mask and the `var` columns scanpy writes, in its order and dtypes.
#[derive(Debug, Clone, PartialEq)]
pub struct HvgResult {
    pub highly_variable: Vec<bool>,
    pub columns: NamedColumns,
}

impl HvgResult {
    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}

/// Per-gene results of one batch for the dispersion-based flavours.
#[derive(Debug, Clone)]
pub(crate) struct Dispersions {
    pub means: Vec<f64>,
    pub dispersions: Vec<f64>,
    pub dispersions_norm: Vec<f64>,
    pub highly_variable: Vec<bool>,
}

/// One gene's running sums in a column pass: kept side by side so that each stored value
/// updates one cache line instead of three (separate arrays made the scatter L2-bound).
#[derive(Clone, Copy, Default)]
struct ColAcc {
    sum: f64,
    sq: f64,
    /// Values `> 0`, counted in `f64` (exact below 2^53).
    positive: f64,
}

/// The rayon skeleton of the column passes: `scan(range, acc)` adds the rows `range` (positions
/// in `rows`) into one accumulator per gene; the parts are summed, then split into
/// `(sums, sums of squares, positive counts)`.
fn col_reduce<F>(n: usize, nc: usize, scan: F) -> (Vec<f64>, Vec<f64>, Vec<i64>)
where
    F: Fn(std::ops::Range<usize>, &mut [ColAcc]) + Sync,
{
    let acc = ranges(n)
        .into_par_iter()
        .map(|range| {
            let mut acc = vec![ColAcc::default(); nc];
            scan(range, &mut acc);
            acc
        })
        .reduce(
            || vec![ColAcc::default(); nc],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(&b) {
                    x.sum += y.sum;
                    x.sq += y.sq;
                    x.positive += y.positive;
                }
                a
            },
        );
    (
        acc.iter().map(|a| a.sum).collect(),
        acc.iter().map(|a| a.sq).collect(),
        acc.iter().map(|a| a.positive as i64).collect(),
    )
}

/// Column sums of `f(x)` and of its square (squared in the element type for the plain case),
/// plus the number of values `> 0`, over the given rows.
pub(crate) fn col_pass<T: Real, F>(
    x: &CsrMatrix<T>,
    rows: Option<&[usize]>,
    f: F,
) -> (Vec<f64>, Vec<f64>, Vec<i64>)
where
    F: Fn(T) -> (f64, f64) + Sync,
{
    let n = rows.map_or(x.n_rows, |r| r.len());
    col_reduce(n, x.n_cols, |range, acc| {
        for k in range {
            let (ci, vi) = x.row(rows.map_or(k, |r| r[k]));
            for (&cc, &vv) in ci.iter().zip(vi) {
                let (a, b) = f(vv);
                let g = &mut acc[cc as usize];
                g.sum += a;
                g.sq += b;
                g.positive += (vv > T::ZERO) as u8 as f64;
            }
        }
    })
}

/// As [`col_pass`] for `expm1(x)`, each row transformed in one vectorized call.
pub(crate) fn col_pass_expm1<T: Real>(
    x: &CsrMatrix<T>,
    rows: Option<&[usize]>,
) -> (Vec<f64>, Vec<f64>, Vec<i64>) {
    let n = rows.map_or(x.n_rows, |r| r.len());
    col_reduce(n, x.n_cols, |range, acc| {
        let mut buf: Vec<T> = Vec::new();
        for k in range {
            let (ci, vi) = x.row(rows.map_or(k, |r| r[k]));
            buf.resize(vi.len(), T::ZERO);
            T::exp_m1_into(vi, &mut buf);
            for ((&cc, &e), &vv) in ci.iter().zip(&buf).zip(vi) {
                let g = &mut acc[cc as usize];
                g.sum += e.to_f64();
                g.sq += (e * e).to_f64();
                g.positive += (vv > T::ZERO) as u8 as f64;
            }
        }
    })
}

/// Column sums of `transform(x)`, sums of its squares and counts of values above zero (of `x`)
/// over one group of cells.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Moments {
    pub sums: Vec<f64>,
    pub sq: Vec<f64>,
    pub positive: Vec<i64>,
}

impl Moments {
    pub(crate) fn zeros(n_cols: usize) -> Self {
        Moments {
            sums: vec![0.0; n_cols],
            sq: vec![0.0; n_cols],
            positive: vec![0; n_cols],
        }
    }
}

/// The passes over the matrix that `highly_variable_genes` needs; everything else (binning,
/// loess, selection, batch merge) is shared host code. Implemented over a host matrix
/// ([`CpuPasses`]) and over a device matrix (`gpu::GpuPasses`).
///
/// Groups: with batches, one per batch category, indexed by code (an empty category gives
/// zeros); without, one group of all cells.
pub(crate) trait ColumnPasses {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// The moments of `t(x)` over all cells (one entry) or, with `per_group`, of each group.
    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>>;
    /// Per group, the sums and sums of squares over the stored values of
    /// `min(x, clip[group * n_cols + gene])` (seurat_v3's clipped pass); `clip` and both outputs
    /// are groups x genes, row-major.
    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)>;
    /// The number of cells of each group.
    fn group_sizes(&self, batches: Option<&Batches>) -> Result<Vec<usize>> {
        Ok(group_sizes(self.n_rows(), batches))
    }
}

/// The passes of one rank's cells combined with the other ranks' through `comm`: every sum,
/// count and group size is the one over all ranks' cells, so the host code that follows sees
/// the whole dataset.
pub(crate) struct Across<'a, P> {
    pub passes: P,
    pub comm: &'a dyn Communicator,
    /// The cells of all ranks.
    n_rows: usize,
}

impl<'a, P: ColumnPasses> Across<'a, P> {
    pub(crate) fn new(passes: P, comm: &'a dyn Communicator) -> Result<Self> {
        let n_rows = sum_count(comm, passes.n_rows())?;
        Ok(Across {
            passes,
            comm,
            n_rows,
        })
    }
}

impl<P: ColumnPasses> ColumnPasses for Across<'_, P> {
    fn n_rows(&self) -> usize {
        self.n_rows
    }

    fn n_cols(&self) -> usize {
        self.passes.n_cols()
    }

    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
        let mut m = self.passes.moments(t, per_group)?;
        for g in &mut m {
            self.comm.all_reduce_sum(&mut g.sums)?;
            self.comm.all_reduce_sum(&mut g.sq)?;
            all_reduce_counts(self.comm, &mut g.positive)?;
        }
        Ok(m)
    }

    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut s, mut q) = self.passes.clipped_sums(clip)?;
        self.comm.all_reduce_sum(&mut s)?;
        self.comm.all_reduce_sum(&mut q)?;
        Ok((s, q))
    }

    fn group_sizes(&self, batches: Option<&Batches>) -> Result<Vec<usize>> {
        let mut sizes: Vec<i64> = self
            .passes
            .group_sizes(batches)?
            .iter()
            .map(|&n| n as i64)
            .collect();
        all_reduce_counts(self.comm, &mut sizes)?;
        Ok(sizes.into_iter().map(|n| n as usize).collect())
    }
}

/// The rows of each batch category, by code (empty categories included).
pub(crate) fn rows_by_code(b: &Batches) -> Vec<Vec<usize>> {
    let mut rows = vec![Vec::new(); b.categories.len()];
    for (i, &c) in b.codes.iter().enumerate() {
        rows[c as usize].push(i);
    }
    rows
}

/// The number of cells of each group of [`ColumnPasses`].
pub(crate) fn group_sizes(n_rows: usize, batches: Option<&Batches>) -> Vec<usize> {
    match batches {
        None => vec![n_rows],
        Some(b) => {
            let mut n = vec![0; b.categories.len()];
            for &c in &b.codes {
                n[c as usize] += 1;
            }
            n
        }
    }
}

/// [`ColumnPasses`] over a host matrix: one rayon pass per group, over its row list.
pub(crate) struct CpuPasses<'a, T: Real> {
    x: &'a CsrMatrix<T>,
    /// Rows by batch code; `None` without batches.
    groups: Option<Vec<Vec<usize>>>,
}

impl<'a, T: Real> CpuPasses<'a, T> {
    /// `batches` must have been checked against `x` ([`check_inputs`]).
    pub(crate) fn new(x: &'a CsrMatrix<T>, batches: Option<&Batches>) -> Self {
        CpuPasses {
            x,
            groups: batches.map(rows_by_code),
        }
    }

    /// The row list of each group (`None`: all rows).
    fn group_rows(&self) -> Vec<Option<&[usize]>> {
        match &self.groups {
            None => vec![None],
            Some(g) => g.iter().map(|r| Some(&r[..])).collect(),
        }
    }
}

impl<T: Real> ColumnPasses for CpuPasses<'_, T> {
    fn n_rows(&self) -> usize {
        self.x.n_rows
    }

    fn n_cols(&self) -> usize {
        self.x.n_cols
    }

    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
        let x = self.x;
        let groups = if per_group {
            self.group_rows()
        } else {
            vec![None]
        };
        Ok(groups
            .into_iter()
            .map(|rows| {
                if rows.is_some_and(|r| r.is_empty()) {
                    return Moments::zeros(x.n_cols);
                }
                let (sums, sq, positive) = match t {
                    Transform::Identity => col_pass(x, rows, |v: T| (v.to_f64(), (v * v).to_f64())),
                    Transform::Expm1 => col_pass_expm1(x, rows),
                    Transform::Expm1Base(b) => {
                        let lb = b.ln();
                        col_pass(x, rows, move |v: T| {
                            let e = (v.to_f64() * lb).exp_m1();
                            (e, e * e)
                        })
                    }
                };
                Moments { sums, sq, positive }
            })
            .collect())
    }

    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let g = self.x.n_cols;
        let groups = self.group_rows();
        let mut sums = vec![0.0; groups.len() * g];
        let mut sq = vec![0.0; groups.len() * g];
        for (k, rows) in groups.into_iter().enumerate() {
            if rows.is_some_and(|r| r.is_empty()) {
                continue;
            }
            let part = k * g..(k + 1) * g;
            let (s, q) = seurat_v3::clipped_pass(self.x, rows, &clip[part.clone()]);
            sums[part.clone()].copy_from_slice(&s);
            sq[part].copy_from_slice(&q);
        }
        Ok((sums, sq))
    }
}

/// What the dispersion-based flavours take the moments of: `expm1(X)` for seurat (in the base
/// of the preceding `log1p`), `X` for cell_ranger.
pub(crate) fn dispersion_transform(params: &HvgParams) -> Transform {
    match (params.flavor, params.log1p_base) {
        (Flavor::Seurat, None) => Transform::Expm1,
        (Flavor::Seurat, Some(b)) => Transform::Expm1Base(b),
        _ => Transform::Identity,
    }
}

/// One batch (or all cells, `n` of them) of the dispersion-based flavours, from its moments.
/// With `filter_unexpressed`, genes without a positive value in these cells get zeros and are
/// not selected (scanpy's per-batch behaviour).
pub(crate) fn dispersions(
    m: &Moments,
    n: usize,
    params: &HvgParams,
    filter_unexpressed: bool,
) -> Result<Dispersions> {
    let ng = m.sums.len();
    let genes: Vec<usize> = (0..ng)
        .filter(|&j| !filter_unexpressed || m.positive[j] > 0)
        .collect();
    let s: Vec<f64> = genes.iter().map(|&j| m.sums[j]).collect();
    let q: Vec<f64> = genes.iter().map(|&j| m.sq[j]).collect();
    let (mean, var) = crate::stats::mean_var_from_sums(&s, &q, n);
    let (mm, d, dn) = match params.flavor {
        Flavor::Seurat => seurat::normalized_dispersion(&mean, &var, params.n_bins)?,
        Flavor::CellRanger => cell_ranger::normalized_dispersion(&mean, &var)?,
        _ => unreachable!("seurat_v3 is handled by its own module"),
    };
    let hv = binning::select(&mm, &dn, &params.selection());
    let mut out = Dispersions {
        means: vec![0.0; ng],
        dispersions: vec![0.0; ng],
        dispersions_norm: vec![0.0; ng],
        highly_variable: vec![false; ng],
    };
    for (k, &j) in genes.iter().enumerate() {
        out.means[j] = mm[k];
        out.dispersions[j] = d[k];
        out.dispersions_norm[j] = dn[k];
        out.highly_variable[j] = hv[k];
    }
    Ok(out)
}

/// Annotates highly variable genes of a cells x genes matrix: log-normalized data for seurat and
/// cell_ranger, raw counts for seurat_v3. `gene_names` break ties the way scanpy's batch merge
/// does (it groups by gene name); without them the gene order is used.
pub fn highly_variable_genes<T: Real>(
    x: &CsrMatrix<T>,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
) -> Result<HvgResult> {
    highly_variable_genes_across(x, params, batches, gene_names, &SingleRank)
}

/// [`highly_variable_genes`] of one rank's cells, the statistics taken over the cells of all
/// ranks of `comm` (every rank gets the same result). `batches` holds this rank's codes over
/// the categories every rank shares.
pub fn highly_variable_genes_across<T: Real>(
    x: &CsrMatrix<T>,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
    comm: &dyn Communicator,
) -> Result<HvgResult> {
    x.check_finite()?;
    check_inputs(x.n_rows, x.n_cols, params, batches, gene_names)?;
    run_across(
        CpuPasses::new(x, batches),
        params,
        batches,
        gene_names,
        comm,
    )
}

/// [`run`] over the passes of all ranks (directly when there is one).
pub(crate) fn run_across<P: ColumnPasses>(
    p: P,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
    comm: &dyn Communicator,
) -> Result<HvgResult> {
    if comm.size() == 1 {
        return run(&p, params, batches, gene_names);
    }
    run(&Across::new(p, comm)?, params, batches, gene_names)
}

/// The checks of the parameters and of the shapes of the batch key and gene names.
pub(crate) fn check_inputs(
    n_rows: usize,
    n_cols: usize,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
) -> Result<()> {
    if let Some(b) = batches {
        if b.codes.len() != n_rows {
            return Err(KernelError::Shape(format!(
                "batch key has {} entries for {} cells",
                b.codes.len(),
                n_rows
            )));
        }
        if let Some(&c) = b.codes.iter().find(|&&c| c as usize >= b.categories.len()) {
            return Err(KernelError::Shape(format!(
                "batch code {c} out of range ({} categories)",
                b.categories.len()
            )));
        }
    }
    if let Some(g) = gene_names {
        if g.len() != n_cols {
            return Err(KernelError::Shape(format!(
                "{} gene names for {} genes",
                g.len(),
                n_cols
            )));
        }
    }
    if params.n_top_genes == Some(0) {
        return Err(KernelError::param("n_top_genes", "must be at least 1"));
    }
    if params.n_bins == 0 {
        return Err(KernelError::param("n_bins", "must be at least 1"));
    }
    if n_rows < 2 {
        return Err(KernelError::Unsupported(
            "highly_variable_genes needs at least two cells".into(),
        ));
    }
    Ok(())
}

/// Every flavour, from the passes of `p` (inputs already checked).
pub(crate) fn run<P: ColumnPasses>(
    p: &P,
    params: &HvgParams,
    batches: Option<&Batches>,
    gene_names: Option<&[String]>,
) -> Result<HvgResult> {
    match params.flavor {
        Flavor::SeuratV3 | Flavor::SeuratV3Paper => {
            seurat_v3::highly_variable_genes_seurat_v3(p, params, batches)
        }
        Flavor::Seurat | Flavor::CellRanger => match batches {
            None => {
                let m = p.moments(dispersion_transform(params), false)?;
                let d = dispersions(&m[0], p.n_rows(), params, false)?;
                Ok(HvgResult {
                    highly_variable: d.highly_variable.clone(),
                    columns: vec![
                        ("highly_variable".into(), Column::Bool(d.highly_variable)),
                        ("means".into(), Column::F64(d.means)),
                        ("dispersions".into(), Column::F64(d.dispersions)),
                        (
                            "dispersions_norm".into(),
                            Column::F32(d.dispersions_norm.iter().map(|&v| v as f32).collect()),
                        ),
                    ],
                })
            }
            Some(b) => batch::dispersion_batched(p, params, b, gene_names),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dense::DenseMatrix;

    /// Log-normalized-like data with an all-zero gene (0), a constant gene (1) and a gene seen in
    /// one cell only (2).
    fn data(cells: usize, genes: usize, seed: u64) -> CsrMatrix<f32> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut d = vec![0f32; cells * genes];
        for i in 0..cells {
            for j in 3..genes {
                if rng.random_bool(0.3 + 0.5 * (j as f64 / genes as f64)) {
                    d[i * genes + j] = rng.random_range(1..(2 + j / 3)) as f32;
                }
            }
            d[i * genes + 1] = 2.0;
        }
        d[genes + 2] = 5.0;
        CsrMatrix::from_dense(&DenseMatrix::new(cells, genes, d).unwrap())
    }

    #[test]
    fn every_flavour_handles_zero_constant_and_rare_genes() {
        let counts = data(60, 80, 1);
        let mut lognorm = counts.clone();
        crate::normalize::normalize_total(
            &mut lognorm,
            &crate::normalize::NormalizeParams {
                target_sum: Some(1e4),
                ..Default::default()
            },
        )
        .unwrap();
        crate::log1p::log1p(&mut lognorm, None).unwrap();
        let batches = Batches {
            codes: (0..60).map(|i| (i % 3) as u32).collect(),
            categories: vec!["c".into(), "a".into(), "b".into()],
        };
        for flavor in [
            Flavor::Seurat,
            Flavor::CellRanger,
            Flavor::SeuratV3,
            Flavor::SeuratV3Paper,
        ] {
            let x = if matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper) {
                &counts
            } else {
                &lognorm
            };
            for b in [None, Some(&batches)] {
                for n_top in [Some(10), None] {
                    let p = HvgParams {
                        flavor,
                        n_top_genes: n_top,
                        ..Default::default()
                    };
                    let r = highly_variable_genes(x, &p, b, None)
                        .unwrap_or_else(|e| panic!("{flavor:?} {b:?} {n_top:?}: {e}"));
                    assert_eq!(r.highly_variable.len(), 80);
                    // The all-zero gene is never selected by the dispersion flavours.
                    if matches!(flavor, Flavor::Seurat | Flavor::CellRanger) {
                        assert!(!r.highly_variable[0], "{flavor:?}");
                    }
                    if let Some(n) = n_top {
                        let k = r.highly_variable.iter().filter(|&&h| h).count();
                        if b.is_some() || matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper)
                        {
                            assert_eq!(k, n, "{flavor:?} {b:?}");
                        } else {
                            assert!(k >= n, "{flavor:?}: ties are kept");
                        }
                    }
                    for (name, c) in &r.columns {
                        assert_eq!(c.len(), 80, "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn refuses_bad_input() {
        let x = data(10, 20, 2);
        let p = HvgParams {
            n_top_genes: Some(0),
            ..Default::default()
        };
        assert!(highly_variable_genes(&x, &p, None, None).is_err());
        let one = x
            .select_rows(&[
                true, false, false, false, false, false, false, false, false, false,
            ])
            .unwrap();
        assert!(highly_variable_genes(&one, &HvgParams::default(), None, None).is_err());
        let b = Batches {
            codes: vec![0; 9],
            categories: vec!["a".into()],
        };
        assert!(matches!(
            highly_variable_genes(&x, &HvgParams::default(), Some(&b), None),
            Err(KernelError::Shape(_))
        ));
        let b = Batches {
            codes: vec![3; 10],
            categories: vec!["a".into()],
        };
        assert!(highly_variable_genes(&x, &HvgParams::default(), Some(&b), None).is_err());
        let mut bad = x.clone();
        bad.data[0] = f32::NAN;
        assert!(matches!(
            highly_variable_genes(&bad, &HvgParams::default(), None, None),
            Err(KernelError::NonFinite { .. })
        ));
        assert!(Flavor::from_name("pearson").is_err());
        assert_eq!(Flavor::from_name("seurat_v3").unwrap().name(), "seurat_v3");
        for f in Flavor::ALL {
            assert_eq!(Flavor::from_name(f.name()).unwrap(), f);
        }
        // seurat_v3 with too few non-constant genes for the loess.
        let tiny = data(10, 5, 3);
        let p = HvgParams {
            flavor: Flavor::SeuratV3,
            ..Default::default()
        };
        assert!(highly_variable_genes(&tiny, &p, None, None).is_err());
    }

    /// The GPU's way on the host: one sequential pass over all rows, each row adding into its
    /// batch's slot (codes per row instead of row lists per batch).
    struct CodePasses<'a> {
        x: &'a CsrMatrix<f32>,
        codes: Option<(&'a [u32], usize)>,
    }

    impl CodePasses<'_> {
        fn pass(&self, per_group: bool, f: impl Fn(f32, usize) -> (f64, f64)) -> Vec<Moments> {
            let g = self.x.n_cols;
            let codes = self.codes.filter(|_| per_group);
            let nb = codes.map_or(1, |c| c.1);
            let mut m = Moments::zeros(nb * g);
            for i in 0..self.x.n_rows {
                let off = codes.map_or(0, |c| c.0[i] as usize * g);
                let (c, v) = self.x.row(i);
                for (&cc, &vv) in c.iter().zip(v) {
                    let j = off + cc as usize;
                    let (a, b) = f(vv, j);
                    m.sums[j] += a;
                    m.sq[j] += b;
                    m.positive[j] += (vv > 0.0) as i64;
                }
            }
            (0..nb)
                .map(|k| Moments {
                    sums: m.sums[k * g..(k + 1) * g].to_vec(),
                    sq: m.sq[k * g..(k + 1) * g].to_vec(),
                    positive: m.positive[k * g..(k + 1) * g].to_vec(),
                })
                .collect()
        }
    }

    impl ColumnPasses for CodePasses<'_> {
        fn n_rows(&self) -> usize {
            self.x.n_rows
        }
        fn n_cols(&self) -> usize {
            self.x.n_cols
        }
        fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
            Ok(self.pass(per_group, |v, _| match t {
                Transform::Identity => (v as f64, (v * v) as f64),
                Transform::Expm1 => {
                    let e = v.exp_m1();
                    (e as f64, (e * e) as f64)
                }
                Transform::Expm1Base(b) => {
                    let e = (v as f64 * b.ln()).exp_m1();
                    (e, e * e)
                }
            }))
        }
        fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
            let m = self.pass(true, |v, j| {
                let e = (v as f64).min(clip[j]);
                (e, e * e)
            });
            Ok((
                m.iter().flat_map(|m| m.sums.clone()).collect(),
                m.iter().flat_map(|m| m.sq.clone()).collect(),
            ))
        }
    }

    fn close(a: &Column, b: &Column, what: &str) {
        let f = |c: &Column| -> Vec<f64> {
            match c {
                Column::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
                Column::I32(v) => v.iter().map(|&x| x as f64).collect(),
                Column::I64(v) => v.iter().map(|&x| x as f64).collect(),
                Column::F32(v) => v.iter().map(|&x| x as f64).collect(),
                Column::F64(v) => v.clone(),
            }
        };
        for (k, (x, y)) in f(a).iter().zip(f(b)).enumerate() {
            assert!(
                (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
                "{what}[{k}]: {x} vs {y}"
            );
        }
    }

    #[test]
    fn per_row_codes_give_the_result_of_per_batch_row_lists() {
        let counts = data(90, 70, 4);
        let mut lognorm = counts.clone();
        crate::normalize::normalize_total(&mut lognorm, &Default::default()).unwrap();
        crate::log1p::log1p(&mut lognorm, None).unwrap();
        // An empty category (1) and names out of code order.
        let codes: Vec<u32> = (0..90).map(|i| [0, 2, 3][i % 3]).collect();
        let b = Batches {
            codes: codes.clone(),
            categories: vec!["z".into(), "empty".into(), "a".into(), "m".into()],
        };
        for (flavor, base) in [
            (Flavor::Seurat, None),
            (Flavor::Seurat, Some(2.0)),
            (Flavor::CellRanger, None),
            (Flavor::SeuratV3, None),
            (Flavor::SeuratV3Paper, None),
        ] {
            let x = if matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper) {
                &counts
            } else {
                &lognorm
            };
            for batched in [false, true] {
                for n_top in [Some(12), None] {
                    let p = HvgParams {
                        flavor,
                        n_top_genes: n_top,
                        log1p_base: base,
                        ..Default::default()
                    };
                    let batches = batched.then_some(&b);
                    let cpu = highly_variable_genes(x, &p, batches, None).unwrap();
                    let passes = CodePasses {
                        x,
                        codes: batched.then_some((&codes[..], 4)),
                    };
                    let other = run(&passes, &p, batches, None).unwrap();
                    let what = format!("{flavor:?} {base:?} {batched} {n_top:?}");
                    assert_eq!(cpu.highly_variable, other.highly_variable, "{what}");
                    assert_eq!(cpu.columns.len(), other.columns.len());
                    for ((na, ca), (nb, cb)) in cpu.columns.iter().zip(&other.columns) {
                        assert_eq!(na, nb);
                        close(ca, cb, &format!("{what} {na}"));
                    }
                }
            }
        }
    }

    /// The column passes before their accumulators were interleaved: three arrays per part.
    fn col_pass_three_arrays(
        x: &CsrMatrix<f32>,
        rows: Option<&[usize]>,
        f: impl Fn(f32) -> (f64, f64) + Sync,
    ) -> (Vec<f64>, Vec<f64>, Vec<i64>) {
        use crate::stats::add_into;
        let n = rows.map_or(x.n_rows, |r| r.len());
        let nc = x.n_cols;
        ranges(n)
            .into_par_iter()
            .map(|range| {
                let (mut s, mut q, mut c) = (vec![0.0; nc], vec![0.0; nc], vec![0i64; nc]);
                for k in range {
                    let (ci, vi) = x.row(rows.map_or(k, |r| r[k]));
                    for (&cc, &vv) in ci.iter().zip(vi) {
                        let (a, b) = f(vv);
                        s[cc as usize] += a;
                        q[cc as usize] += b;
                        c[cc as usize] += (vv > 0.0) as i64;
                    }
                }
                (s, q, c)
            })
            .reduce(
                || (vec![0.0; nc], vec![0.0; nc], vec![0; nc]),
                |mut a, b| {
                    add_into(&mut a.0, &b.0);
                    add_into(&mut a.1, &b.1);
                    add_into(&mut a.2, &b.2);
                    a
                },
            )
    }

    #[test]
    fn interleaved_col_pass_equals_three_arrays() {
        // One thread: the same parts reduced in the same order, so the sums are bit-identical.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            for seed in 0..4 {
                let mut x = data(300, 57, seed);
                x.data.iter_mut().for_each(|v| *v = (*v * 0.37).ln_1p());
                let rows: Vec<usize> = (0..300).filter(|i| i % 3 != 1).collect();
                for r in [None, Some(&rows[..])] {
                    let plain = |v: f32| (v as f64, (v * v) as f64);
                    assert_eq!(col_pass(&x, r, plain), col_pass_three_arrays(&x, r, plain));
                    let expm1 = |v: f32| {
                        let e = crate::fastmath::exp_m1_f32(v);
                        (e as f64, (e * e) as f64)
                    };
                    assert_eq!(col_pass_expm1(&x, r), col_pass_three_arrays(&x, r, expm1));
                }
            }
        });
    }

    #[test]
    fn cpu_groups_follow_codes_and_sizes() {
        let x = data(12, 9, 5);
        let b = Batches {
            codes: vec![2, 0, 2, 2, 0, 2, 0, 0, 2, 2, 0, 2],
            categories: vec!["x".into(), "none".into(), "y".into()],
        };
        assert_eq!(group_sizes(12, Some(&b)), [5, 0, 7]);
        assert_eq!(group_sizes(12, None), [12]);
        let rows = rows_by_code(&b);
        assert_eq!(rows[0], [1, 4, 6, 7, 10]);
        assert!(rows[1].is_empty());
        let p = CpuPasses::new(&x, Some(&b));
        let m = p.moments(Transform::Identity, true).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1], Moments::zeros(9));
        let (s, q, c) = col_pass(&x, Some(&rows[2]), |v: f32| (v as f64, (v * v) as f64));
        assert_eq!((&m[2].sums, &m[2].sq, &m[2].positive), (&s, &q, &c));
        let all = p.moments(Transform::Identity, false).unwrap();
        assert_eq!(all.len(), 1);
        for j in 0..9 {
            assert!((all[0].sums[j] - m[0].sums[j] - m[2].sums[j]).abs() < 1e-9);
        }
        // Clipped sums: group 1 is empty; a clip of +inf is the plain sum.
        let mut clip = vec![f64::INFINITY; 27];
        clip[18..].iter_mut().for_each(|c| *c = 1.0);
        let (cs, cq) = p.clipped_sums(&clip).unwrap();
        assert_eq!(&cs[..9], &m[0].sums[..]);
        assert!(cs[9..18].iter().chain(&cq[9..18]).all(|&v| v == 0.0));
        let d = x.to_dense();
        for j in 0..9 {
            let ones = rows[2].iter().filter(|&&i| d.get(i, j) > 0.0).count() as f64;
            assert_eq!((cs[18 + j], cq[18 + j]), (ones, ones));
        }
    }
}
