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

pub mod batch;
pub mod binning;
pub mod cell_ranger;
pub mod loess;
pub mod seurat;
pub mod seurat_v3;

use crate::columns::{Column, NamedColumns};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use crate::stats::{add_into, ranges};
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
    let nc = x.n_cols;
    ranges(n)
        .into_par_iter()
        .map(|range| {
            let mut s = vec![0.0f64; nc];
            let mut q = vec![0.0f64; nc];
            let mut c = vec![0i64; nc];
            for k in range {
                let i = rows.map_or(k, |r| r[k]);
                let (ci, vi) = x.row(i);
                for (&cc, &vv) in ci.iter().zip(vi) {
                    let (a, b) = f(vv);
                    let j = cc as usize;
                    s[j] += a;
                    q[j] += b;
                    c[j] += (vv > T::ZERO) as i64;
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

/// As [`col_pass`] for `expm1(x)`, each row transformed in one vectorized call.
pub(crate) fn col_pass_expm1<T: Real>(
    x: &CsrMatrix<T>,
    rows: Option<&[usize]>,
) -> (Vec<f64>, Vec<f64>, Vec<i64>) {
    let n = rows.map_or(x.n_rows, |r| r.len());
    let nc = x.n_cols;
    ranges(n)
        .into_par_iter()
        .map(|range| {
            let mut s = vec![0.0f64; nc];
            let mut q = vec![0.0f64; nc];
            let mut c = vec![0i64; nc];
            let mut buf: Vec<T> = Vec::new();
            for k in range {
                let i = rows.map_or(k, |r| r[k]);
                let (ci, vi) = x.row(i);
                buf.resize(vi.len(), T::ZERO);
                T::exp_m1_into(vi, &mut buf);
                for ((&cc, &e), &vv) in ci.iter().zip(&buf).zip(vi) {
                    let j = cc as usize;
                    s[j] += e.to_f64();
                    q[j] += (e * e).to_f64();
                    c[j] += (vv > T::ZERO) as i64;
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

/// One batch (or all cells) of the dispersion-based flavours. With `filter_unexpressed`, genes
/// without a positive value in these cells get zeros and are not selected (scanpy's per-batch
/// behaviour).
pub(crate) fn dispersion_batch<T: Real>(
    x: &CsrMatrix<T>,
    rows: Option<&[usize]>,
    params: &HvgParams,
    filter_unexpressed: bool,
) -> Result<Dispersions> {
    let n = rows.map_or(x.n_rows, |r| r.len());
    let (sums, sq, pos) = match (params.flavor, params.log1p_base) {
        (Flavor::Seurat, None) => col_pass_expm1(x, rows),
        (Flavor::Seurat, Some(b)) => {
            let lb = b.ln();
            col_pass(x, rows, move |v: T| {
                let e = (v.to_f64() * lb).exp_m1();
                (e, e * e)
            })
        }
        _ => col_pass(x, rows, |v: T| (v.to_f64(), (v * v).to_f64())),
    };
    let genes: Vec<usize> = (0..x.n_cols)
        .filter(|&j| !filter_unexpressed || pos[j] > 0)
        .collect();
    let s: Vec<f64> = genes.iter().map(|&j| sums[j]).collect();
    let q: Vec<f64> = genes.iter().map(|&j| sq[j]).collect();
    let (mean, var) = crate::stats::mean_var_from_sums(&s, &q, n);
    let (m, d, dn) = match params.flavor {
        Flavor::Seurat => seurat::normalized_dispersion(&mean, &var, params.n_bins)?,
        Flavor::CellRanger => cell_ranger::normalized_dispersion(&mean, &var)?,
        _ => unreachable!("seurat_v3 is handled by its own module"),
    };
    let hv = binning::select(&m, &dn, &params.selection());
    let mut out = Dispersions {
        means: vec![0.0; x.n_cols],
        dispersions: vec![0.0; x.n_cols],
        dispersions_norm: vec![0.0; x.n_cols],
        highly_variable: vec![false; x.n_cols],
    };
    for (k, &j) in genes.iter().enumerate() {
        out.means[j] = m[k];
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
    x.check_finite()?;
    if let Some(b) = batches {
        if b.codes.len() != x.n_rows {
            return Err(KernelError::Shape(format!(
                "batch key has {} entries for {} cells",
                b.codes.len(),
                x.n_rows
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
        if g.len() != x.n_cols {
            return Err(KernelError::Shape(format!(
                "{} gene names for {} genes",
                g.len(),
                x.n_cols
            )));
        }
    }
    if params.n_top_genes == Some(0) {
        return Err(KernelError::param("n_top_genes", "must be at least 1"));
    }
    if params.n_bins == 0 {
        return Err(KernelError::param("n_bins", "must be at least 1"));
    }
    if x.n_rows < 2 {
        return Err(KernelError::Unsupported(
            "highly_variable_genes needs at least two cells".into(),
        ));
    }
    match params.flavor {
        Flavor::SeuratV3 | Flavor::SeuratV3Paper => {
            seurat_v3::highly_variable_genes_seurat_v3(x, params, batches)
        }
        Flavor::Seurat | Flavor::CellRanger => match batches {
            None => {
                let d = dispersion_batch(x, None, params, false)?;
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
            Some(b) => batch::dispersion_batched(x, params, b, gene_names),
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
}
