//! `scale` (scanpy's `pp.scale`): each gene to zero mean and unit variance, `(x - mean) / std`
//! with the variance at ddof = 1 (std 0 -> 1), then clipped to `max_value` (to `-max_value` too
//! when zero-centering).
//!
//! Means and variances are computed in `f64` as scanpy does. A zero-centred sparse matrix becomes
//! dense: scanpy makes it float64 (`(x - mean) / std` in float64); here the output type is chosen
//! by the caller (`f32` halves the memory and keeps the 1e-5 agreement). A dense matrix is scaled
//! in place in its own type, rounding after centring and after dividing, exactly as numpy's
//! in-place operations do.

use crate::comm::{sum_count, Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use crate::stats;
use rayon::prelude::*;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    scale_csr_to_dense_gpu, scale_csr_to_dense_gpu_across, scale_csr_to_dense_streamed,
    scale_dense_gpu_across, scale_stats_blocks, DenseScaler,
};

/// Parameters of the scaling functions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleParams {
    pub zero_center: bool,
    /// Clip to this value (and to its negative when zero-centring); `None`: no clipping.
    pub max_value: Option<f64>,
}

impl Default for ScaleParams {
    fn default() -> Self {
        ScaleParams {
            zero_center: true,
            max_value: None,
        }
    }
}

/// The per-gene statistics scanpy stores in `var['mean']` and `var['std']`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleStats {
    pub mean: Vec<f64>,
    /// Standard deviation (ddof = 1), with zeros (and rounding-negative variances) replaced by 1.
    pub std: Vec<f64>,
}

fn check(p: &ScaleParams) -> Result<()> {
    if let Some(m) = p.max_value {
        if m.is_nan() {
            return Err(KernelError::param("max_value", "is NaN"));
        }
    }
    Ok(())
}

fn std_of(var: Vec<f64>) -> Vec<f64> {
    var.into_iter()
        .map(|v| {
            // A variance below zero only arises from rounding in the one-pass formula (scanpy
            // would produce NaN there); it is treated as zero.
            let s = v.max(0.0).sqrt();
            if s == 0.0 {
                1.0
            } else {
                s
            }
        })
        .collect()
}

#[inline(always)]
fn clip(v: f64, p: &ScaleParams) -> f64 {
    match p.max_value {
        Some(m) if v > m => m,
        Some(m) if p.zero_center && v < -m => -m,
        _ => v,
    }
}

/// Per-gene statistics of a sparse matrix.
pub fn scale_stats<T: Real>(x: &CsrMatrix<T>) -> ScaleStats {
    let (mean, var) = stats::col_mean_var(x, None);
    ScaleStats {
        mean,
        std: std_of(var),
    }
}

/// Means and standard deviations (ddof 1) from column sums and sums of squares over `n` rows.
pub(crate) fn stats_of(sums: &[f64], sq: &[f64], n: usize) -> ScaleStats {
    let (mean, var) = stats::mean_var_from_sums(sums, sq, n);
    ScaleStats {
        mean,
        std: std_of(var),
    }
}

/// The statistics of a matrix of `n` rows from its columns' moments (of the values themselves),
/// taken in a pass over its row blocks: [`gpu::scale_stats_blocks`]'s, or a pass of the
/// caller's.
pub fn stats_of_moments(m: &crate::gpu::reduce::ColumnMoments, n: usize) -> ScaleStats {
    stats_of(&m.sums, &m.sq, n)
}

/// [`stats_of`] the sums over `n` rows of this rank added to the other ranks' sums.
pub(crate) fn stats_across(
    mut sums: Vec<f64>,
    mut sq: Vec<f64>,
    n: usize,
    comm: &dyn Communicator,
) -> Result<ScaleStats> {
    comm.all_reduce_sum(&mut sums)?;
    comm.all_reduce_sum(&mut sq)?;
    Ok(stats_of(&sums, &sq, sum_count(comm, n)?))
}

/// Scales a sparse matrix with zero-centring into a dense matrix of type `O`
/// (`(x - mean) / std` in `f64`, clipped, rounded to `O`).
pub fn scale_csr_to_dense<T: Real, O: Real>(
    x: &CsrMatrix<T>,
    params: &ScaleParams,
) -> Result<(DenseMatrix<O>, ScaleStats)> {
    scale_csr_to_dense_across(x, params, &SingleRank)
}

/// [`scale_csr_to_dense`] of one rank's cells, the means and deviations taken over the cells of
/// all ranks of `comm`.
pub fn scale_csr_to_dense_across<T: Real, O: Real>(
    x: &CsrMatrix<T>,
    params: &ScaleParams,
    comm: &dyn Communicator,
) -> Result<(DenseMatrix<O>, ScaleStats)> {
    check(params)?;
    x.check_finite()?;
    let st = if comm.size() == 1 {
        scale_stats(x)
    } else {
        let (sums, sq) = stats::col_sums_sq(x, None);
        stats_across(sums, sq, x.n_rows, comm)?
    };
    let nc = x.n_cols;
    let mut out = DenseMatrix::<O>::zeros(x.n_rows, nc);
    let p = *params;
    let center = params.zero_center;
    // Value of a zero entry in each column.
    let zero_val: Vec<O> = (0..nc)
        .map(|j| O::from_f64(clip(if center { -st.mean[j] / st.std[j] } else { 0.0 }, &p)))
        .collect();
    if nc > 0 {
        out.data
            .par_chunks_mut(nc)
            .enumerate()
            .for_each(|(i, row)| {
                row.copy_from_slice(&zero_val);
                let (c, v) = x.row(i);
                for (&cc, &vv) in c.iter().zip(v) {
                    let j = cc as usize;
                    let centred = if center {
                        vv.to_f64() - st.mean[j]
                    } else {
                        vv.to_f64()
                    };
                    row[j] = O::from_f64(clip(centred / st.std[j], &p));
                }
            });
    }
    Ok((out, st))
}

/// Scales a sparse matrix without zero-centring, keeping it sparse: `x / std`, clipped above.
pub fn scale_csr_no_center<T: Real, O: Real>(
    x: &CsrMatrix<T>,
    max_value: Option<f64>,
) -> Result<(CsrMatrix<O>, ScaleStats)> {
    let params = ScaleParams {
        zero_center: false,
        max_value,
    };
    check(&params)?;
    x.check_finite()?;
    let st = scale_stats(x);
    let data: Vec<O> = x
        .indices
        .par_iter()
        .zip(x.data.par_iter())
        .map(|(&c, &v)| O::from_f64(clip(v.to_f64() / st.std[c as usize], &params)))
        .collect();
    let out = CsrMatrix {
        n_rows: x.n_rows,
        n_cols: x.n_cols,
        indptr: x.indptr.clone(),
        indices: x.indices.clone(),
        data,
    };
    Ok((out, st))
}

/// Scales a dense matrix in place (numpy's `x -= mean; x /= std` on an array of type `T`).
pub fn scale_dense<T: Real>(x: &mut DenseMatrix<T>, params: &ScaleParams) -> Result<ScaleStats> {
    check(params)?;
    x.check_finite()?;
    let (mean, var) = stats::dense_col_mean_var(x);
    let st = ScaleStats {
        mean,
        std: std_of(var),
    };
    let nc = x.n_cols;
    let p = *params;
    if nc > 0 {
        x.data.par_chunks_mut(nc).for_each(|row| {
            for (j, v) in row.iter_mut().enumerate() {
                let mut t = *v;
                if p.zero_center {
                    t = T::from_f64(t.to_f64() - st.mean[j]);
                }
                t = T::from_f64(t.to_f64() / st.std[j]);
                *v = T::from_f64(clip(t.to_f64(), &p));
            }
        });
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// scanpy's definition: the variance by its one-pass formula (E[x^2] - E[x]^2, ddof = 1), as
    /// `_get_mean_var` computes it; a two-pass variance differs from it where two close values
    /// cancel (a proptest case of 2 x 2 values found that).
    fn naive(d: &[f64], rows: usize, cols: usize, max: Option<f64>) -> Vec<f64> {
        let mut out = vec![0.0; d.len()];
        for j in 0..cols {
            let col: Vec<f64> = (0..rows).map(|i| d[i * cols + j]).collect();
            let n = rows as f64;
            let m = col.iter().sum::<f64>() / n;
            let var = if rows > 1 {
                (col.iter().map(|x| x * x).sum::<f64>() / n - m * m) * n / (n - 1.0)
            } else {
                0.0
            };
            let sd = var.max(0.0).sqrt();
            let s = if sd == 0.0 { 1.0 } else { sd };
            for i in 0..rows {
                let mut v = (col[i] - m) / s;
                if let Some(mx) = max {
                    v = v.clamp(-mx, mx);
                }
                out[i * cols + j] = v;
            }
        }
        out
    }

    #[test]
    fn constant_and_all_zero_genes_get_std_one() {
        let d =
            DenseMatrix::new(3, 3, vec![1.0f32, 0.0, 5.0, 1.0, 0.0, 6.0, 1.0, 0.0, 7.0]).unwrap();
        let x = CsrMatrix::from_dense(&d);
        let (o, st) = scale_csr_to_dense::<f32, f64>(&x, &ScaleParams::default()).unwrap();
        assert_eq!(st.std[0], 1.0);
        assert_eq!(st.std[1], 1.0);
        assert_eq!(st.mean, [1.0, 0.0, 6.0]);
        // scanpy's one-pass variance: (sum of squares / n - mean^2) * n / (n - 1).
        for (a, b) in o
            .row(0)
            .iter()
            .zip([0.0, 0.0, -1.0])
            .chain(o.row(2).iter().zip([0.0, 0.0, 1.0]))
        {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn one_cell_and_clipping() {
        let x = CsrMatrix::from_dense(&DenseMatrix::new(1, 2, vec![3.0f32, 0.0]).unwrap());
        let (o, st) = scale_csr_to_dense::<f32, f32>(&x, &ScaleParams::default()).unwrap();
        assert_eq!(o.data, [0.0, 0.0]);
        assert_eq!(st.std, [1.0, 1.0]);
        let d = DenseMatrix::new(4, 1, vec![0.0f32, 0.0, 0.0, 100.0]).unwrap();
        let (o, _) = scale_csr_to_dense::<f32, f64>(
            &CsrMatrix::from_dense(&d),
            &ScaleParams {
                zero_center: true,
                max_value: Some(1.0),
            },
        )
        .unwrap();
        assert_eq!(o.data, [-0.5, -0.5, -0.5, 1.0]);
        let (s, _) =
            scale_csr_no_center::<f32, f64>(&CsrMatrix::from_dense(&d), Some(1.0)).unwrap();
        assert_eq!(s.data, [1.0]);
    }

    #[test]
    fn rejects_non_finite() {
        let x = CsrMatrix::new(1, 2, vec![0, 1], vec![0], vec![f32::NAN]).unwrap();
        assert!(scale_csr_to_dense::<f32, f32>(&x, &ScaleParams::default()).is_err());
        let mut d = DenseMatrix::new(1, 2, vec![1.0f32, f32::INFINITY]).unwrap();
        assert!(matches!(
            scale_dense(&mut d, &ScaleParams::default()),
            Err(KernelError::NonFinite { col: 1, .. })
        ));
    }

    #[test]
    fn float32_integers_are_exact() {
        let d: Vec<f32> = (0..60).map(|k| ((k * 7) % 11) as f32).collect();
        let x = CsrMatrix::from_dense(&DenseMatrix::new(12, 5, d.clone()).unwrap());
        let (o32, s32) = scale_csr_to_dense::<f32, f64>(&x, &ScaleParams::default()).unwrap();
        let x64 = CsrMatrix::from_dense(
            &DenseMatrix::new(12, 5, d.iter().map(|&v| v as f64).collect()).unwrap(),
        );
        let (o64, s64) = scale_csr_to_dense::<f64, f64>(&x64, &ScaleParams::default()).unwrap();
        assert_eq!(o32, o64);
        assert_eq!(s32, s64);
    }

    proptest! {
        #[test]
        fn sparse_and_dense_match_naive(rows in 1usize..12, cols in 1usize..8, seed in any::<u64>(), clip in proptest::option::of(0.5f64..3.0)) {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // f64 data: scanpy squares in the element type, so float32 data would carry float32
            // rounding in the variance (see `float32_integers_are_exact` for that path).
            let d: Vec<f64> = (0..rows * cols).map(|_| if rng.random_bool(0.5) { rng.random_range(0.0f64..5.0) } else { 0.0 }).collect();
            let d64 = d.clone();
            let want = naive(&d64, rows, cols, clip);
            let p = ScaleParams { zero_center: true, max_value: clip };
            let (o, _) = scale_csr_to_dense::<f64, f64>(&CsrMatrix::from_dense(&DenseMatrix::new(rows, cols, d.clone()).unwrap()), &p).unwrap();
            let mut dm = DenseMatrix::new(rows, cols, d64.clone()).unwrap();
            scale_dense(&mut dm, &p).unwrap();
            for k in 0..want.len() {
                prop_assert!((o.data[k] - want[k]).abs() < 1e-9 * (1.0 + want[k].abs()));
                prop_assert!((dm.data[k] - want[k]).abs() < 1e-9 * (1.0 + want[k].abs()));
            }
        }
    }
}
