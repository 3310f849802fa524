//! `normalize_total` (scanpy's `pp.normalize_total`): every cell scaled to the same total.
//!
//! Counts per cell `c_i` are summed in `f64` and rounded to the element type; the target is
//! `target_sum`, or the median of the non-zero `c_i` when not given; each stored value becomes
//! `x / (c_i / target)` computed in the element type, exactly as scanpy does on float32 data, and
//! rows with `c_i = 0` stay zero. With `exclude_highly_expressed`, genes holding more than
//! `max_fraction` of some cell's total are left out of the totals (not of the scaling).
//!
//! Note: scanpy 1.11's CSR code path takes the median over all cells (zeros included) while its
//! dense path and documentation use the non-zero cells; this follows the documentation. The two
//! agree whenever no cell is empty, e.g. after `filter_cells`.

use crate::comm::{all_gather, Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use rayon::prelude::*;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    all_whole_gpu, check_counts_gpu, normalize_total_gpu, normalize_total_gpu_across,
    normalize_total_streamed,
};

/// Whether every value is a whole number (`x == floor(x)`, NaN fails): what scanpy's steps
/// that expect raw counts warn about when it does not hold.
pub fn all_whole(values: &[f32]) -> bool {
    values
        .par_chunks(1 << 16)
        .all(|c| c.iter().all(|&v| v == v.floor()))
}

/// Parameters of [`normalize_total`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormalizeParams {
    /// Total per cell after normalization; `None`: the median of the non-zero totals.
    pub target_sum: Option<f64>,
    pub exclude_highly_expressed: bool,
    pub max_fraction: f64,
    /// Whether the result holds the per-cell arrays (`counts_per_cell`, `norm_factor`: what
    /// scanpy's `key_added` stores). `false` leaves them empty, and spares a GPU run with a
    /// fixed target bringing the totals back to the host.
    pub per_cell: bool,
}

impl Default for NormalizeParams {
    fn default() -> Self {
        NormalizeParams {
            target_sum: None,
            exclude_highly_expressed: false,
            max_fraction: 0.05,
            per_cell: true,
        }
    }
}

/// What [`normalize_total`] used.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizeResult {
    /// The target total actually used.
    pub target_sum: f64,
    /// `c_i`, the totals before normalization (over the genes not excluded).
    pub counts_per_cell: Vec<f64>,
    /// `c_i / target`, scanpy's `norm_factor` (what `key_added` stores).
    pub norm_factor: Vec<f64>,
    /// With `exclude_highly_expressed`: the genes that were excluded from the totals.
    pub excluded_genes: Option<Vec<bool>>,
}

/// The median of `values` as numpy computes it on an array of the element type.
fn median_t<T: Real>(values: &mut [T]) -> T {
    let n = values.len();
    let mid = n / 2;
    let cmp = |a: &T, b: &T| a.partial_cmp(b).unwrap();
    let (_, &mut hi, _) = values.select_nth_unstable_by(mid, cmp);
    if n % 2 == 1 {
        hi
    } else {
        let lo = values[..mid]
            .iter()
            .copied()
            .fold(values[..mid][0], |a, b| if b > a { b } else { a });
        (lo + hi) / T::from_f64(2.0)
    }
}

fn check_params(params: &NormalizeParams) -> Result<()> {
    if !(0.0..=1.0).contains(&params.max_fraction) {
        return Err(KernelError::param(
            "max_fraction",
            "choose max_fraction between 0 and 1",
        ));
    }
    if let Some(t) = params.target_sum {
        if !(t.is_finite() && t > 0.0) {
            return Err(KernelError::param(
                "target_sum",
                format!("must be a positive finite number, got {t}"),
            ));
        }
    }
    Ok(())
}

/// The target and each cell's divisor (`c_i / target`, 1 for empty cells) from the totals.
fn target_and_factors<T: Real>(counts: &[T], params: &NormalizeParams) -> (T, Vec<T>) {
    target_and_factors_across(counts, params, &SingleRank).expect("a single rank exchanges nothing")
}

/// [`target_and_factors`] of one rank's cells: the median target over the totals of all ranks
/// of `comm`.
fn target_and_factors_across<T: Real>(
    counts: &[T],
    params: &NormalizeParams,
    comm: &dyn Communicator,
) -> Result<(T, Vec<T>)> {
    let target: T = match params.target_sum {
        Some(t) => T::from_f64(t),
        None => {
            let mine = counts.iter().copied().filter(|&c| c > T::ZERO);
            let mut nz: Vec<T> = if comm.size() == 1 {
                mine.collect()
            } else {
                // Totals of type T survive the round trip through f64 exactly.
                let mine: Vec<f64> = mine.map(|c| c.to_f64()).collect();
                all_gather(comm, &mine)?
                    .into_iter()
                    .map(T::from_f64)
                    .collect()
            };
            if nz.is_empty() {
                T::ONE
            } else {
                median_t(&mut nz)
            }
        }
    };
    let factor = counts.iter().map(|&c| c / target).collect();
    Ok((target, factor))
}

/// The genes highly expressed in some cell of any rank (`high` holds this rank's marks).
fn high_across(high: &mut [bool], comm: &dyn Communicator) -> Result<()> {
    if comm.size() > 1 {
        let mut v: Vec<f64> = high.iter().map(|&h| h as u8 as f64).collect();
        comm.all_reduce_sum(&mut v)?;
        high.iter_mut().zip(v).for_each(|(h, n)| *h = n > 0.0);
    }
    Ok(())
}

/// The divisor actually applied to a row (an empty row is left as it is).
#[inline]
fn divisor<T: Real>(f: T) -> T {
    if f == T::ZERO {
        T::ONE
    } else {
        f
    }
}

fn result<T: Real>(
    params: &NormalizeParams,
    target: T,
    counts: &[T],
    factor: &[T],
    excluded: Option<Vec<bool>>,
) -> NormalizeResult {
    let per_cell = |v: &[T]| match params.per_cell {
        true => v.iter().map(|c| c.to_f64()).collect(),
        false => Vec::new(),
    };
    NormalizeResult {
        target_sum: target.to_f64(),
        counts_per_cell: per_cell(counts),
        norm_factor: per_cell(factor),
        excluded_genes: excluded,
    }
}

/// Normalizes `x` in place. Rejects NaN and infinite values.
pub fn normalize_total<T: Real>(
    x: &mut CsrMatrix<T>,
    params: &NormalizeParams,
) -> Result<NormalizeResult> {
    normalize_total_across(x, params, &SingleRank)
}

/// [`normalize_total`] of one rank's cells: the median target and the highly expressed genes
/// are those of the cells of all ranks of `comm`.
pub fn normalize_total_across<T: Real>(
    x: &mut CsrMatrix<T>,
    params: &NormalizeParams,
    comm: &dyn Communicator,
) -> Result<NormalizeResult> {
    // The totals double as the check that every value is a count, sparing a pass of its own (as
    // the GPU twin's): a NaN or infinite value makes its row's f64 total non-finite, and the
    // same loop notes a negative one. Only then (or when f64 values overflow) is the slower
    // check run, for its error. (-0.0 starts the sum, as `Sum for f64` does.)
    let (mut counts, negative): (Vec<T>, Vec<bool>) = (0..x.n_rows)
        .into_par_iter()
        .map(|i| {
            let v = x.row(i).1;
            let (s, neg) = v.iter().fold((-0f64, false), |(s, n), a| {
                (s + a.to_f64(), n | (*a < T::ZERO))
            });
            (T::from_f64(s), neg)
        })
        .unzip();
    if counts.iter().any(|c| !c.is_finite()) || negative.contains(&true) {
        x.check_counts()?;
    }
    check_params(params)?;
    let mut excluded = None;
    if params.exclude_highly_expressed {
        let mut high = vec![false; x.n_cols];
        for i in 0..x.n_rows {
            let lim = params.max_fraction * counts[i].to_f64();
            let (c, v) = x.row(i);
            for (&cc, &vv) in c.iter().zip(v) {
                if vv.to_f64() > lim {
                    high[cc as usize] = true;
                }
            }
        }
        high_across(&mut high, comm)?;
        let keep: Vec<bool> = high.iter().map(|h| !h).collect();
        counts = (0..x.n_rows)
            .into_par_iter()
            .map(|i| {
                let (c, v) = x.row(i);
                let s: f64 = c
                    .iter()
                    .zip(v)
                    .filter(|(&cc, _)| keep[cc as usize])
                    .map(|(_, a)| a.to_f64())
                    .sum();
                T::from_f64(s)
            })
            .collect();
        excluded = Some(high);
    }
    let (target, factor) = target_and_factors_across(&counts, params, comm)?;
    let indptr = &x.indptr;
    let n_rows = x.n_rows;
    let blocks =
        crate::csr::split_row_blocks(indptr, &mut x.indices, &mut x.data, crate::csr::ROW_BLOCK);
    blocks.into_par_iter().for_each(|(first, _, dat)| {
        let base = indptr[first] as usize;
        for i in first..(first + crate::csr::ROW_BLOCK).min(n_rows) {
            let f = divisor(factor[i]);
            for v in &mut dat[indptr[i] as usize - base..indptr[i + 1] as usize - base] {
                *v = *v / f;
            }
        }
    });
    Ok(result(params, target, &counts, &factor, excluded))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::dense::DenseMatrix;
    use proptest::prelude::*;

    #[test]
    fn whole_numbers_are_told_from_fractions_nan_included() {
        let mut v: Vec<f32> = (0..300_000).map(|i| (i % 17) as f32).collect();
        assert!(all_whole(&v));
        assert!(all_whole(&[]));
        assert!(all_whole(&[f32::INFINITY, -3.0, 0.0]));
        v[123_457] = 2.5;
        assert!(!all_whole(&v));
        assert!(!all_whole(&[1.0, f32::NAN]));
    }

    fn csr(rows: usize, cols: usize, d: Vec<f32>) -> CsrMatrix<f32> {
        CsrMatrix::from_dense(&DenseMatrix::new(rows, cols, d).unwrap())
    }

    #[test]
    fn scanpy_docstring_example() {
        // The example in scanpy's normalize_total docstring.
        let d = vec![3., 3., 3., 6., 6., 1., 1., 1., 2., 2., 1., 22., 1., 2., 2.];
        let mut x = csr(3, 5, d.clone());
        normalize_total(
            &mut x,
            &NormalizeParams {
                target_sum: Some(1.0),
                ..Default::default()
            },
        )
        .unwrap();
        let r = x.to_dense();
        assert!((r.get(0, 0) - 1.0 / 7.0).abs() < 1e-7 && (r.get(2, 1) - 22.0 / 28.0).abs() < 1e-7);
        let mut x = csr(3, 5, d);
        let res = normalize_total(
            &mut x,
            &NormalizeParams {
                target_sum: Some(1.0),
                exclude_highly_expressed: true,
                max_fraction: 0.2,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            res.excluded_genes.unwrap(),
            [false, true, false, true, true]
        );
        let r = x.to_dense();
        assert_eq!(r.row(0), [0.5, 0.5, 0.5, 1.0, 1.0]);
        assert_eq!(r.row(2), [0.5, 11.0, 0.5, 1.0, 1.0]);
    }

    #[test]
    fn median_target_and_empty_rows() {
        let mut x = csr(4, 2, vec![1., 1., 0., 0., 3., 3., 2., 2.]);
        let r = normalize_total(&mut x, &NormalizeParams::default()).unwrap();
        assert_eq!(r.target_sum, 4.0); // median of 2, 6, 4 (the empty row is left out)
        let d = x.to_dense();
        assert_eq!(d.row(0), [2.0, 2.0]);
        assert_eq!(d.row(1), [0.0, 0.0]);
        assert_eq!(d.row(2), [2.0, 2.0]);
        assert_eq!(r.norm_factor, [0.5, 0.0, 1.5, 1.0]);
        // Even count of non-zero totals: mean of the two middle ones.
        let mut x = csr(2, 1, vec![2., 5.]);
        assert_eq!(
            normalize_total(&mut x, &NormalizeParams::default())
                .unwrap()
                .target_sum,
            3.5
        );
        let mut e = CsrMatrix::<f32>::zeros(0, 3);
        assert!(normalize_total(&mut e, &NormalizeParams::default()).is_ok());
    }

    #[test]
    fn rejects_bad_input() {
        let mut x = CsrMatrix::new(1, 2, vec![0, 1], vec![0], vec![f32::NAN]).unwrap();
        assert!(matches!(
            normalize_total(&mut x, &NormalizeParams::default()),
            Err(KernelError::NonFinite { .. })
        ));
        // Negative values are not counts: refused before anything is written.
        let mut x = csr(2, 2, vec![1.0, 2.0, -1.0, 3.0]);
        assert!(matches!(
            normalize_total(&mut x, &NormalizeParams::default()),
            Err(KernelError::Negative { row: 1, col: 0, .. })
        ));
        assert_eq!(x, csr(2, 2, vec![1.0, 2.0, -1.0, 3.0]));
        let mut x = csr(1, 1, vec![1.0]);
        let p = NormalizeParams {
            max_fraction: 2.0,
            ..Default::default()
        };
        assert!(normalize_total(&mut x, &p).is_err());
        let p = NormalizeParams {
            target_sum: Some(-1.0),
            ..Default::default()
        };
        assert!(normalize_total(&mut x, &p).is_err());
    }

    #[test]
    fn without_per_cell_arrays_x_is_the_same() {
        let d = vec![1., 1., 0., 0., 3., 3., 2., 2.];
        let (mut a, mut b) = (csr(4, 2, d.clone()), csr(4, 2, d));
        let p = NormalizeParams::default();
        let full = normalize_total(&mut a, &p).unwrap();
        let lean = normalize_total(
            &mut b,
            &NormalizeParams {
                per_cell: false,
                ..p
            },
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(lean.target_sum, full.target_sum);
        assert!(lean.counts_per_cell.is_empty() && lean.norm_factor.is_empty());
        assert_eq!(full.counts_per_cell.len(), 4);
    }

    proptest! {
        #[test]
        fn rows_sum_to_target(rows in 1usize..10, cols in 1usize..20, seed in any::<u64>()) {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let d: Vec<f32> = (0..rows * cols).map(|_| if rng.random_bool(0.5) { rng.random_range(1..50) as f32 } else { 0.0 }).collect();
            let mut x = csr(rows, cols, d.clone());
            normalize_total(&mut x, &NormalizeParams { target_sum: Some(1e4), ..Default::default() }).unwrap();
            for i in 0..rows {
                let orig: f32 = d[i * cols..(i + 1) * cols].iter().sum();
                let s: f64 = x.row(i).1.iter().map(|&v| v as f64).sum();
                if orig > 0.0 { prop_assert!((s - 1e4).abs() < 1e-2); } else { prop_assert_eq!(s, 0.0); }
                // The exact float32 formula scanpy uses.
                for (&c, &v) in x.row(i).0.iter().zip(x.row(i).1) {
                    prop_assert_eq!(v, d[i * cols + c as usize] / (orig / 1e4f32));
                }
            }
        }
    }
}
