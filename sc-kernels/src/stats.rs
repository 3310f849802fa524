//! Per-row and per-column sums, means and variances, accumulated as scanpy does: in `f64`, with
//! each square formed in the element type first (scanpy's numba kernels square a float32 value in
//! float32 before adding it to a float64 sum), and the variance corrected to ddof = 1.

use crate::csr::CsrMatrix;
use crate::real::Real;
use rayon::prelude::*;

/// Splits `0..n` into contiguous ranges, several per thread, for folds whose accumulators are large.
pub(crate) fn ranges(n: usize) -> Vec<std::ops::Range<usize>> {
    let parts = (rayon::current_num_threads() * 4).max(1).min(n.max(1));
    let step = n.div_ceil(parts).max(1);
    (0..n).step_by(step).map(|s| s..(s + step).min(n)).collect()
}

/// Fixed-size chunks of `0..len`, each reduced by `f` into a zeroed `size`-vector, added in
/// chunk order: a parallel sum whose bits do not
/// depend on the number of threads.
pub(crate) fn chunked_sum(
    len: usize,
    chunk: usize,
    size: usize,
    f: impl Fn(std::ops::Range<usize>, &mut [f64]) + Sync,
) -> Vec<f64> {
    chunked_sum_dyn(len, chunk, size, &f)
}

/// [`chunked_sum`]'s body, compiled once: rayon's machinery instantiated for every caller's
/// closure was a tenth of this crate's optimised code (the first build, issue 50), and a call
/// through a pointer per chunk costs nothing next to the chunk's work.
fn chunked_sum_dyn(
    len: usize,
    chunk: usize,
    size: usize,
    f: &(dyn Fn(std::ops::Range<usize>, &mut [f64]) + Sync),
) -> Vec<f64> {
    let parts: Vec<Vec<f64>> = (0..len.div_ceil(chunk))
        .into_par_iter()
        .map(|c| {
            let mut acc = vec![0f64; size];
            f(c * chunk..((c + 1) * chunk).min(len), &mut acc);
            acc
        })
        .collect();
    let mut total = vec![0f64; size];
    for p in parts {
        total.iter_mut().zip(&p).for_each(|(t, &v)| *t += v);
    }
    total
}

/// Adds `b` into `a` element-wise.
pub(crate) fn add_into<T: Copy + std::ops::AddAssign>(a: &mut [T], b: &[T]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// One column's running sums in a column pass: kept side by side so that each stored value
/// updates one cache line instead of three (separate arrays made the scatter L2-bound).
#[derive(Clone, Copy, Default)]
pub(crate) struct ColAcc {
    pub(crate) sum: f64,
    pub(crate) sq: f64,
    /// Values `> 0`, counted in `f64` (exact below 2^53), where a pass counts them.
    pub(crate) positive: f64,
}

/// The rayon skeleton of every column pass: `scan(range, acc)` adds the rows `range` (positions
/// in the rows the caller chose) into one accumulator per column; the parts are summed, then
/// split into `(sums, sums of squares, positive counts)`.
pub(crate) fn col_reduce<F>(n: usize, nc: usize, scan: F) -> (Vec<f64>, Vec<f64>, Vec<i64>)
where
    F: Fn(std::ops::Range<usize>, &mut [ColAcc]) + Sync,
{
    col_reduce_dyn(n, nc, &scan)
}

/// [`col_reduce`]'s body, compiled once (as [`chunked_sum_dyn`]).
fn col_reduce_dyn(
    n: usize,
    nc: usize,
    scan: &(dyn Fn(std::ops::Range<usize>, &mut [ColAcc]) + Sync),
) -> (Vec<f64>, Vec<f64>, Vec<i64>) {
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

/// Column sums and sums of squares over the given rows (all rows when `rows` is `None`), in `f64`.
pub fn col_sums_sq<T: Real>(x: &CsrMatrix<T>, rows: Option<&[usize]>) -> (Vec<f64>, Vec<f64>) {
    let n = rows.map_or(x.n_rows, |r| r.len());
    let (s, q, _) = col_reduce(n, x.n_cols, |range, acc| {
        for k in range {
            let (c, v) = x.row(rows.map_or(k, |r| r[k]));
            for (&cc, &vv) in c.iter().zip(v) {
                let a = &mut acc[cc as usize];
                a.sum += vv.to_f64();
                a.sq += (vv * vv).to_f64();
            }
        }
    });
    (s, q)
}

/// Turns sums and sums of squares over `n` rows into means and variances (ddof = 1 unless n = 1),
/// the way scanpy's `_get_mean_var` does: `var = (sq/n - mean^2) * n/(n-1)`.
pub fn mean_var_from_sums(sums: &[f64], sq: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let nf = n as f64;
    let mut mean = Vec::with_capacity(sums.len());
    let mut var = Vec::with_capacity(sums.len());
    for (&s, &q) in sums.iter().zip(sq) {
        let m = s / nf;
        let mut v = q / nf - m * m;
        if n != 1 {
            v *= nf / (nf - 1.0);
        }
        mean.push(m);
        var.push(v);
    }
    (mean, var)
}

/// Column means and variances (ddof = 1) over the given rows, as scanpy's `_get_mean_var(X, axis=0)`.
pub fn col_mean_var<T: Real>(x: &CsrMatrix<T>, rows: Option<&[usize]>) -> (Vec<f64>, Vec<f64>) {
    let n = rows.map_or(x.n_rows, |r| r.len());
    let (s, q) = col_sums_sq(x, rows);
    mean_var_from_sums(&s, &q, n)
}

/// Rows a task (or a GPU thread) sums in the dense matrices' column sums; the chunks' sums are
/// added in row order, so the bits depend on neither the number of threads nor the device.
pub const DENSE_CHUNK_ROWS: usize = 4096;

/// Column means and variances (ddof = 1) of a dense row-major matrix.
pub fn dense_col_mean_var<T: Real>(x: &crate::dense::DenseMatrix<T>) -> (Vec<f64>, Vec<f64>) {
    let (s, q) = dense_col_moments(x);
    mean_var_from_sums(&s, &q, x.n_rows)
}

/// Column sums and sums of squares (each square rounded to `T`, as numpy squares an array) in
/// `f64`, over chunks of [`DENSE_CHUNK_ROWS`] rows added in order
/// (`gpu::dense_reduce::dense_col_moments` gives the same bits).
pub fn dense_col_moments<T: Real>(x: &crate::dense::DenseMatrix<T>) -> (Vec<f64>, Vec<f64>) {
    let g = x.n_cols;
    let mut t = chunked_sum(x.n_rows, DENSE_CHUNK_ROWS, 2 * g, |rows, acc| {
        let (s, q) = acc.split_at_mut(g);
        for i in rows {
            for ((s, q), &v) in s.iter_mut().zip(q.iter_mut()).zip(x.row(i)) {
                *s += v.to_f64();
                *q += (v * v).to_f64();
            }
        }
    });
    let sq = t.split_off(g);
    (t, sq)
}

/// Row sums in `f64`.
pub fn row_sums<T: Real>(x: &CsrMatrix<T>) -> Vec<f64> {
    (0..x.n_rows)
        .into_par_iter()
        .map(|i| x.row(i).1.iter().map(|v| v.to_f64()).sum())
        .collect()
}

/// Number of stored values per column that are non-zero (scanpy's `axis_nnz(X, 0)` after
/// `eliminate_zeros`), optionally only those above zero (scanpy's `X > 0` in `filter_genes`).
pub fn col_counts<T: Real>(x: &CsrMatrix<T>, positive_only: bool) -> Vec<i64> {
    let nc = x.n_cols;
    ranges(x.n_rows)
        .into_par_iter()
        .map(|range| {
            let mut cnt = vec![0i64; nc];
            for i in range {
                let (c, v) = x.row(i);
                for (&cc, &vv) in c.iter().zip(v) {
                    let keep = if positive_only {
                        vv > T::ZERO
                    } else {
                        vv != T::ZERO
                    };
                    cnt[cc as usize] += keep as i64;
                }
            }
            cnt
        })
        .reduce(
            || vec![0; nc],
            |mut a, b| {
                add_into(&mut a, &b);
                a
            },
        )
}

/// The median as numpy computes it: the middle value, or the mean of the two middle values.
/// NaN for an empty slice.
pub fn median(values: &[f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    if v.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let mid = n / 2;
    let (_, &mut hi, _) = v.select_nth_unstable_by(mid, |a, b| a.partial_cmp(b).unwrap());
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..mid].iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (lo + hi) / 2.0
    }
}

/// Pearson's correlation of two equally long series (NaN when either is constant).
pub fn correlation(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        sab += (x - ma) * (y - mb);
        saa += (x - ma) * (x - ma);
        sbb += (y - mb) * (y - mb);
    }
    sab / (saa * sbb).sqrt()
}
