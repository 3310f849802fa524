//! `filter_cells` and `filter_genes` (scanpy's `pp.filter_cells` / `pp.filter_genes`): a keep-mask
//! plus the per-cell or per-gene number scanpy stores (`obs['n_genes']` or `obs['n_counts']`,
//! `var['n_cells']` or `var['n_counts']`). Exactly one of the four bounds must be given, as in
//! scanpy. Genes / cells are counted where the stored value is `> 0`; counts are summed.

use crate::columns::Column;
use crate::comm::{all_reduce_counts, Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use crate::stats;
use rayon::prelude::*;

mod gpu;
pub use gpu::{
    filter_cells_blocks, filter_cells_gpu, filter_cells_streamed, filter_genes_blocks,
    filter_genes_gpu, filter_genes_gpu_across, filter_genes_streamed, FilterStats,
};

/// Which bound to filter on; the numbers are inclusive bounds as in scanpy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CellFilter {
    MinCounts(f64),
    MinGenes(u64),
    MaxCounts(f64),
    MaxGenes(u64),
}

/// Which bound to filter genes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GeneFilter {
    MinCounts(f64),
    MinCells(u64),
    MaxCounts(f64),
    MaxCells(u64),
}

/// The outcome of a filter: which rows (or columns) to keep, and the number scanpy stores for
/// each of them under `name` (computed over all rows / columns, before subsetting).
#[derive(Debug, Clone, PartialEq)]
pub struct FilterResult {
    pub keep: Vec<bool>,
    /// `n_genes` / `n_counts` (cells) or `n_cells` / `n_counts` (genes).
    pub name: &'static str,
    /// Integer counts as `I64`, sums of counts in the element type (`F32` for f32 data).
    pub values: Column,
}

impl FilterResult {
    /// How many are kept.
    pub fn n_kept(&self) -> usize {
        self.keep.iter().filter(|&&k| k).count()
    }
}

/// Builds the single filter from scanpy-style optional arguments, refusing anything but exactly one.
pub fn cell_filter_from_options(
    min_counts: Option<f64>,
    min_genes: Option<u64>,
    max_counts: Option<f64>,
    max_genes: Option<u64>,
) -> Result<CellFilter> {
    let given = [
        min_counts.is_some(),
        min_genes.is_some(),
        max_counts.is_some(),
        max_genes.is_some(),
    ];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(KernelError::param(
            "filter_cells",
            "provide exactly one of min_counts, min_genes, max_counts, max_genes per call",
        ));
    }
    Ok(if let Some(v) = min_counts {
        CellFilter::MinCounts(v)
    } else if let Some(v) = min_genes {
        CellFilter::MinGenes(v)
    } else if let Some(v) = max_counts {
        CellFilter::MaxCounts(v)
    } else {
        CellFilter::MaxGenes(max_genes.unwrap())
    })
}

/// As [`cell_filter_from_options`], for genes.
pub fn gene_filter_from_options(
    min_counts: Option<f64>,
    min_cells: Option<u64>,
    max_counts: Option<f64>,
    max_cells: Option<u64>,
) -> Result<GeneFilter> {
    let given = [
        min_counts.is_some(),
        min_cells.is_some(),
        max_counts.is_some(),
        max_cells.is_some(),
    ];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(KernelError::param(
            "filter_genes",
            "provide exactly one of min_counts, min_cells, max_counts, max_cells per call",
        ));
    }
    Ok(if let Some(v) = min_counts {
        GeneFilter::MinCounts(v)
    } else if let Some(v) = min_cells {
        GeneFilter::MinCells(v)
    } else if let Some(v) = max_counts {
        GeneFilter::MaxCounts(v)
    } else {
        GeneFilter::MaxCells(max_cells.unwrap())
    })
}

fn check_bound(name: &'static str, v: f64) -> Result<()> {
    if v.is_nan() {
        return Err(KernelError::param(name, "bound is NaN"));
    }
    Ok(())
}

fn sums_column<T: Real>(sums: Vec<f64>) -> (Vec<f64>, Column) {
    if std::mem::size_of::<T>() == 4 {
        let r: Vec<f32> = sums.iter().map(|&s| s as f32).collect();
        (r.iter().map(|&s| s as f64).collect(), Column::F32(r))
    } else {
        (sums.clone(), Column::F64(sums))
    }
}

/// Per-cell or per-gene statistics a filter thresholds, computed on demand (on the CPU or the
/// GPU): sums of the values, and counts of the values above zero.
pub(crate) struct Stats<S, P> {
    pub sums: S,
    pub positive: P,
}

impl<'a, S, P> Stats<S, P>
where
    S: FnOnce() -> Result<Vec<f64>> + 'a,
    P: FnOnce() -> Result<Vec<i64>> + 'a,
{
    /// Per-gene statistics of this rank's cells added to the other ranks' of `comm`.
    pub(crate) fn across(
        self,
        comm: &'a dyn Communicator,
    ) -> Stats<impl FnOnce() -> Result<Vec<f64>> + 'a, impl FnOnce() -> Result<Vec<i64>> + 'a> {
        let Stats { sums, positive } = self;
        Stats {
            sums: move || {
                let mut s = sums()?;
                comm.all_reduce_sum(&mut s)?;
                Ok(s)
            },
            positive: move || {
                let mut p = positive()?;
                all_reduce_counts(comm, &mut p)?;
                Ok(p)
            },
        }
    }
}

fn threshold<V: Copy>(vals: &[V], min: bool, pass: impl Fn(V) -> (bool, bool)) -> Vec<bool> {
    vals.iter()
        .map(|&v| {
            let (ge, le) = pass(v);
            if min {
                ge
            } else {
                le
            }
        })
        .collect()
}

/// What a filter thresholds: the sums (`n_counts`) or the numbers of values above zero
/// (`n_genes` for cells, `n_cells` for genes), from below (`min`) or above.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rule {
    Sums {
        min: bool,
        bound: f64,
    },
    Positive {
        min: bool,
        bound: u64,
        name: &'static str,
    },
}

impl CellFilter {
    pub(crate) fn rule(self) -> Rule {
        match self {
            CellFilter::MinCounts(bound) => Rule::Sums { min: true, bound },
            CellFilter::MaxCounts(bound) => Rule::Sums { min: false, bound },
            CellFilter::MinGenes(bound) => Rule::Positive {
                min: true,
                bound,
                name: "n_genes",
            },
            CellFilter::MaxGenes(bound) => Rule::Positive {
                min: false,
                bound,
                name: "n_genes",
            },
        }
    }
}

impl GeneFilter {
    pub(crate) fn rule(self) -> Rule {
        match self {
            GeneFilter::MinCounts(bound) => Rule::Sums { min: true, bound },
            GeneFilter::MaxCounts(bound) => Rule::Sums { min: false, bound },
            GeneFilter::MinCells(bound) => Rule::Positive {
                min: true,
                bound,
                name: "n_cells",
            },
            GeneFilter::MaxCells(bound) => Rule::Positive {
                min: false,
                bound,
                name: "n_cells",
            },
        }
    }
}

/// The keep mask of a filter from its statistics (`T`: element type of the matrix); only the
/// statistic the rule needs is computed.
pub(crate) fn from_stats<T: Real, S, P>(rule: Rule, st: Stats<S, P>) -> Result<FilterResult>
where
    S: FnOnce() -> Result<Vec<f64>>,
    P: FnOnce() -> Result<Vec<i64>>,
{
    Ok(match rule {
        Rule::Sums { min, bound } => {
            check_bound("counts bound", bound)?;
            let (vals, col) = sums_column::<T>((st.sums)()?);
            FilterResult {
                keep: threshold(&vals, min, |v| (v >= bound, v <= bound)),
                name: "n_counts",
                values: col,
            }
        }
        Rule::Positive { min, bound, name } => {
            let n = (st.positive)()?;
            FilterResult {
                keep: threshold(&n, min, |v| (v as u64 >= bound, v as u64 <= bound)),
                name,
                values: Column::I64(n),
            }
        }
    })
}

/// [`filter_cells`] from the number of genes with a positive count in each cell, already
/// counted over the same matrix (`calculate_qc_metrics`' `n_genes_by_counts` of counts that
/// are never negative): the same result without a pass over the cells. `None` for a bound on
/// the counts, which needs their sums.
pub fn filter_cells_by_genes(filter: CellFilter, genes: &[i32]) -> Option<Result<FilterResult>> {
    let rule = filter.rule();
    if matches!(rule, Rule::Sums { .. }) {
        return None;
    }
    Some(from_stats::<f32, _, _>(
        rule,
        Stats {
            sums: || unreachable!("a bound on genes reads no sums"),
            positive: || Ok(genes.iter().map(|&n| n as i64).collect()),
        },
    ))
}

/// Which cells pass `filter`. Rejects NaN and infinite values.
pub fn filter_cells<T: Real>(x: &CsrMatrix<T>, filter: CellFilter) -> Result<FilterResult> {
    x.check_finite()?;
    from_stats::<T, _, _>(
        filter.rule(),
        Stats {
            sums: || Ok(stats::row_sums(x)),
            positive: || {
                Ok((0..x.n_rows)
                    .into_par_iter()
                    .map(|i| x.row(i).1.iter().filter(|&&v| v > T::ZERO).count() as i64)
                    .collect())
            },
        },
    )
}

/// Which genes pass `filter`. Rejects NaN and infinite values.
pub fn filter_genes<T: Real>(x: &CsrMatrix<T>, filter: GeneFilter) -> Result<FilterResult> {
    filter_genes_across(x, filter, &SingleRank)
}

/// [`filter_genes`] of one rank's cells: the genes' statistics over the cells of all ranks of
/// `comm` (every rank keeps the same genes).
pub fn filter_genes_across<T: Real>(
    x: &CsrMatrix<T>,
    filter: GeneFilter,
    comm: &dyn Communicator,
) -> Result<FilterResult> {
    x.check_finite()?;
    from_stats::<T, _, _>(
        filter.rule(),
        Stats {
            sums: || Ok(stats::col_sums_sq(x, None).0),
            positive: || Ok(stats::col_counts(x, true)),
        }
        .across(comm),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dense::DenseMatrix;
    use proptest::prelude::*;

    fn x() -> CsrMatrix<f32> {
        let d = DenseMatrix::new(
            3,
            4,
            vec![1.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 5.0, 1.0, 0.0],
        )
        .unwrap();
        CsrMatrix::from_dense(&d)
    }

    #[test]
    fn cells_by_genes_and_counts() {
        let r = filter_cells(&x(), CellFilter::MinGenes(2)).unwrap();
        assert_eq!(r.keep, [true, false, true]);
        assert_eq!(r.name, "n_genes");
        assert_eq!(r.values, Column::I64(vec![2, 0, 3]));
        let r = filter_cells(&x(), CellFilter::MaxCounts(4.0)).unwrap();
        assert_eq!(r.keep, [true, true, false]);
        assert_eq!(r.values, Column::F32(vec![4.0, 0.0, 8.0]));
        let r = filter_cells(&x(), CellFilter::MinCounts(4.0)).unwrap();
        assert_eq!(r.keep, [true, false, true]);
        assert_eq!(
            filter_cells(&x(), CellFilter::MaxGenes(2)).unwrap().keep,
            [true, true, false]
        );
    }

    #[test]
    fn cells_by_genes_already_counted_equal_a_pass() {
        let genes = [2, 0, 3];
        for f in [CellFilter::MinGenes(2), CellFilter::MaxGenes(2)] {
            let got = filter_cells_by_genes(f, &genes).unwrap().unwrap();
            assert_eq!(got, filter_cells(&x(), f).unwrap(), "{f:?}");
        }
        for f in [CellFilter::MinCounts(4.0), CellFilter::MaxCounts(4.0)] {
            assert!(filter_cells_by_genes(f, &genes).is_none(), "{f:?}");
        }
    }

    #[test]
    fn genes_by_cells_and_counts() {
        let r = filter_genes(&x(), GeneFilter::MinCells(1)).unwrap();
        assert_eq!(r.keep, [true, true, true, false]);
        assert_eq!(r.name, "n_cells");
        assert_eq!(r.values, Column::I64(vec![2, 1, 2, 0]));
        let r = filter_genes(&x(), GeneFilter::MinCounts(4.0)).unwrap();
        assert_eq!(r.keep, [false, true, true, false]);
        assert_eq!(r.values, Column::F32(vec![3.0, 5.0, 4.0, 0.0]));
        assert_eq!(
            filter_genes(&x(), GeneFilter::MaxCells(1)).unwrap().keep,
            [false, true, false, true]
        );
        assert_eq!(
            filter_genes(&x(), GeneFilter::MaxCounts(3.0)).unwrap().keep,
            [true, false, false, true]
        );
    }

    #[test]
    fn options_must_name_exactly_one_bound() {
        assert!(cell_filter_from_options(None, None, None, None).is_err());
        assert!(cell_filter_from_options(Some(1.0), Some(2), None, None).is_err());
        assert_eq!(
            cell_filter_from_options(None, Some(200), None, None).unwrap(),
            CellFilter::MinGenes(200)
        );
        assert!(gene_filter_from_options(None, Some(3), Some(1.0), None).is_err());
        assert_eq!(
            gene_filter_from_options(None, None, None, Some(9)).unwrap(),
            GeneFilter::MaxCells(9)
        );
        assert!(filter_cells(&x(), CellFilter::MinCounts(f64::NAN)).is_err());
    }

    #[test]
    fn empty_matrix_and_non_finite() {
        let e = CsrMatrix::<f32>::zeros(0, 5);
        assert_eq!(
            filter_genes(&e, GeneFilter::MinCells(1)).unwrap().keep,
            vec![false; 5]
        );
        assert!(filter_cells(&e, CellFilter::MinGenes(1))
            .unwrap()
            .keep
            .is_empty());
        let bad = CsrMatrix::new(1, 2, vec![0, 1], vec![0], vec![f32::INFINITY]).unwrap();
        assert!(matches!(
            filter_cells(&bad, CellFilter::MinGenes(1)),
            Err(KernelError::NonFinite { .. })
        ));
        assert!(matches!(
            filter_genes(&bad, GeneFilter::MinCells(1)),
            Err(KernelError::NonFinite { .. })
        ));
    }

    proptest! {
        #[test]
        fn matches_naive(rows in 0usize..10, cols in 1usize..10, seed in any::<u64>(), b in 0u64..5) {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d: Vec<f32> = (0..rows * cols).map(|_| if rng.random_bool(0.5) { rng.random_range(1..4) as f32 } else { 0.0 }).collect();
            let m = CsrMatrix::from_dense(&DenseMatrix::new(rows, cols, d.clone()).unwrap());
            let cells = filter_cells(&m, CellFilter::MinGenes(b)).unwrap();
            let genes = filter_genes(&m, GeneFilter::MinCounts(b as f64)).unwrap();
            for i in 0..rows {
                let n = (0..cols).filter(|&j| d[i * cols + j] > 0.0).count() as u64;
                prop_assert_eq!(cells.keep[i], n >= b);
            }
            for j in 0..cols {
                let s: f32 = (0..rows).map(|i| d[i * cols + j]).sum();
                prop_assert_eq!(genes.keep[j], s as f64 >= b as f64);
            }
        }
    }
}
