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
mod passes;
pub mod seurat;
pub mod seurat_v3;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    highly_variable_genes_blocks, highly_variable_genes_gpu, highly_variable_genes_gpu_across,
    highly_variable_genes_streamed, single_pass, KnownMoments,
};

use crate::columns::{Column, NamedColumns};
use crate::comm::{Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::reduce::Transform;
use crate::real::Real;
pub use passes::Batches;
pub(crate) use passes::{Across, ColumnPasses, CpuPasses, Moments};

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
mod tests;
