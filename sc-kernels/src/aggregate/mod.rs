//! `get.aggregate` (scanpy 1.12's `sc.get.aggregate`): per group of rows, each column's sum,
//! mean, variance, count of non-zero values and median, as scanpy 1.12.3 defines them:
//! - rows whose group is [`LEFT_OUT`] (a NaN category or a `mask`ed-out row) count nowhere;
//! - `sum` accumulates in f64; `mean` is `sum / n` (n: the group's rows);
//! - `var` comes with its own mean from Welford's algorithm over the stored values, merged with
//!   the group's zeros (Chan et al.'s pairwise combination), divided by `n - dof`; NaN where
//!   `n <= dof` (scanpy warns and writes NaN);
//! - `count_nonzero` counts values `!= 0` (a stored zero is not counted);
//! - `median`: the middle of the group's values with its zeros (the mean of the two middle ones
//!   for an even count), NaN when any value is NaN or the group has no rows.
//!
//! A group without rows (all masked out) has NaN mean, variance and median. Deterministic: the
//! rows of each group go in fixed blocks of [`BLOCK_ROWS`], combined in order, so the result does
//! not depend on the number of threads.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{aggregate_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::group_by::{check_labels, group_members};
use crate::real::Real;
use rayon::prelude::*;

/// The group of a row that belongs to none.
pub const LEFT_OUT: u32 = crate::group_by::NO_GROUP;

/// Rows of one group accumulated together before their block is combined with the others.
pub const BLOCK_ROWS: usize = 4096;

/// What to compute (scanpy's `func` names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AggFuncs {
    pub sum: bool,
    pub mean: bool,
    pub var: bool,
    pub count_nonzero: bool,
    pub median: bool,
}

impl AggFuncs {
    /// The set of scanpy's names `names` ("sum", "mean", "var", "count_nonzero", "median").
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Self> {
        let mut f = AggFuncs::default();
        for n in names {
            match n.as_ref() {
                "sum" => f.sum = true,
                "mean" => f.mean = true,
                "var" => f.var = true,
                "count_nonzero" => f.count_nonzero = true,
                "median" => f.median = true,
                other => {
                    return Err(KernelError::param(
                        "func",
                        format!(
                            "'{other}' is not one of 'count_nonzero', 'mean', 'sum', 'var', \
                             'median'"
                        ),
                    ))
                }
            }
        }
        if f == AggFuncs::default() {
            return Err(KernelError::param("func", "give at least one function"));
        }
        Ok(f)
    }
}

/// The results, each `n_groups x n_cols` row-major, present when asked for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Aggregates {
    pub n_groups: usize,
    pub n_cols: usize,
    /// Rows in each group.
    pub counts: Vec<u64>,
    pub sum: Option<Vec<f64>>,
    pub mean: Option<Vec<f64>>,
    pub var: Option<Vec<f64>>,
    pub count_nonzero: Option<Vec<u64>>,
    pub median: Option<Vec<f64>>,
}

/// A matrix read row by row: a CSR matrix (its stored values) or a dense one (every value).
pub trait Rows: Sync {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// Calls `f(column, value)` for the stored values of row `i`, columns increasing.
    fn for_each_in_row(&self, i: usize, f: impl FnMut(usize, f64));
}

impl<T: Real> Rows for CsrMatrix<T> {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    fn for_each_in_row(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        let (c, v) = self.row(i);
        c.iter()
            .zip(v)
            .for_each(|(&c, &v)| f(c as usize, v.to_f64()));
    }
}

impl<T: Real> Rows for DenseMatrix<T> {
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    fn n_cols(&self) -> usize {
        self.n_cols
    }
    fn for_each_in_row(&self, i: usize, mut f: impl FnMut(usize, f64)) {
        self.row(i)
            .iter()
            .enumerate()
            .for_each(|(c, &v)| f(c, v.to_f64()));
    }
}

/// Aggregates the rows of `x` by `groups` (one per row, `< n_groups` or [`LEFT_OUT`]).
pub fn aggregate<M: Rows>(
    x: &M,
    groups: &[u32],
    n_groups: usize,
    funcs: AggFuncs,
    dof: u32,
) -> Result<Aggregates> {
    let plan = Plan::new(x.n_rows(), x.n_cols(), groups, n_groups, funcs)?;
    let n_cols = plan.n_cols;
    let moments = plan.moments;
    let size = n_groups * n_cols;
    let mut sum = vec![0.0; if moments.sum { size } else { 0 }];
    let mut nonzero = vec![0u64; if moments.nonzero { size } else { 0 }];
    let mut mean = vec![0.0; if moments.welford { size } else { 0 }];
    let mut m2 = vec![0.0; if moments.welford { size } else { 0 }];
    // Only the median asked: no pass over the blocks.
    let blocks = match moments == Moments::default() {
        true => Vec::new(),
        false => plan.blocks(),
    };
    let mut seen_rows = vec![0u64; n_groups];
    let wave = 4 * rayon::current_num_threads().max(1);
    for chunk in blocks.chunks(wave) {
        let stats: Vec<BlockStats> = chunk
            .par_iter()
            .map(|b| BlockStats::of(x, &plan.order[b.rows.clone()], moments))
            .collect();
        for (b, s) in chunk.iter().zip(stats) {
            let at = b.group * n_cols..(b.group + 1) * n_cols;
            s.add_into(
                seen_rows[b.group],
                part(&mut sum, &at),
                part(&mut nonzero, &at),
                part(&mut mean, &at),
                part(&mut m2, &at),
            );
            seen_rows[b.group] += s.rows;
        }
    }
    let mut out = plan.finish(
        dof,
        Running {
            sum,
            nonzero,
            mean,
            m2,
        },
    );
    if funcs.median {
        let medians: Vec<Vec<f64>> = (0..n_groups)
            .into_par_iter()
            .map(|g| group_medians(x, plan.group_rows(g)))
            .collect();
        out.median = Some(medians.concat());
    }
    Ok(out)
}

/// The checked grouping of an aggregation, shared by the host and the GPU: each group's rows
/// in order, their counts, and what the asked functions need.
pub(crate) struct Plan {
    pub n_cols: usize,
    pub n_groups: usize,
    pub funcs: AggFuncs,
    pub moments: Moments,
    /// The rows of group 0, then of group 1, ..., each in increasing order (rows of no group
    /// last, after `starts[n_groups]`).
    pub order: Vec<u32>,
    pub starts: Vec<usize>,
    pub counts: Vec<u64>,
}

/// A block of one group's rows: `order[rows]`, accumulated together.
pub(crate) struct Block {
    pub group: usize,
    pub rows: std::ops::Range<usize>,
}

/// The running numbers of every group and column (`n_groups x n_cols`, row-major; empty when
/// not computed).
pub(crate) struct Running {
    pub sum: Vec<f64>,
    pub nonzero: Vec<u64>,
    pub mean: Vec<f64>,
    pub m2: Vec<f64>,
}

impl Plan {
    pub fn new(
        n_rows: usize,
        n_cols: usize,
        groups: &[u32],
        n_groups: usize,
        funcs: AggFuncs,
    ) -> Result<Self> {
        if groups.len() != n_rows {
            return Err(KernelError::Shape(format!(
                "{} group labels for {n_rows} rows",
                groups.len()
            )));
        }
        check_labels(groups, n_groups, "by")?;
        let (order, starts) = group_members(groups, n_groups);
        let counts = (0..n_groups)
            .map(|g| (starts[g + 1] - starts[g]) as u64)
            .collect();
        Ok(Plan {
            n_cols,
            n_groups,
            funcs,
            moments: Moments::needed(funcs),
            order,
            starts,
            counts,
        })
    }

    pub fn group_rows(&self, g: usize) -> &[u32] {
        &self.order[self.starts[g]..self.starts[g + 1]]
    }

    /// Every group's rows in blocks of [`BLOCK_ROWS`], group after group: they cover
    /// `order[..starts[n_groups]]` in order.
    pub fn blocks(&self) -> Vec<Block> {
        (0..self.n_groups)
            .flat_map(|g| {
                (self.starts[g]..self.starts[g + 1])
                    .step_by(BLOCK_ROWS)
                    .map(move |b| Block {
                        group: g,
                        rows: b..(b + BLOCK_ROWS).min(self.starts[g + 1]),
                    })
            })
            .collect()
    }

    /// The asked functions (all but the median) from the running numbers.
    pub fn finish(&self, dof: u32, r: Running) -> Aggregates {
        let (funcs, n_cols, counts) = (self.funcs, self.n_cols, &self.counts);
        let mut out = Aggregates {
            n_groups: self.n_groups,
            n_cols,
            counts: counts.clone(),
            ..Default::default()
        };
        if funcs.mean && !funcs.var {
            out.mean = Some(per_group(&r.sum, n_cols, |g, s| s / counts[g] as f64));
        }
        if funcs.var {
            let denominator = |g: usize| match counts[g] as i64 - dof as i64 {
                d if d > 0 || dof == 0 => d as f64,
                _ => f64::NAN,
            };
            out.var = Some(per_group(&r.m2, n_cols, |g, m| m / denominator(g)));
            if funcs.mean {
                out.mean = Some(per_group(&r.mean, n_cols, |g, m| {
                    if counts[g] == 0 {
                        f64::NAN
                    } else {
                        m
                    }
                }));
            }
        }
        if funcs.sum {
            out.sum = Some(r.sum);
        }
        if funcs.count_nonzero {
            out.count_nonzero = Some(r.nonzero);
        }
        out
    }
}

/// `v[at]`, or nothing when `v` is not computed (empty).
fn part<'a, T>(v: &'a mut [T], at: &std::ops::Range<usize>) -> &'a mut [T] {
    if v.is_empty() {
        v
    } else {
        &mut v[at.clone()]
    }
}

/// `f(group, value)` of every value of a `groups x n_cols` array.
fn per_group(values: &[f64], n_cols: usize, f: impl Fn(usize, f64) -> f64) -> Vec<f64> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| f(i / n_cols.max(1), v))
        .collect()
}

/// Which running numbers the asked functions need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moments {
    pub sum: bool,
    pub nonzero: bool,
    pub welford: bool,
}

impl Moments {
    fn needed(f: AggFuncs) -> Self {
        Moments {
            sum: f.sum || (f.mean && !f.var),
            nonzero: f.count_nonzero,
            welford: f.var,
        }
    }
}

/// One block of a group's rows: sums, non-zero counts, and Welford's mean and M2 over its
/// values (its zeros included).
struct BlockStats {
    rows: u64,
    sum: Vec<f64>,
    nonzero: Vec<u64>,
    /// Values seen per column (stored ones; the rest of the block's rows are zeros).
    seen: Vec<u64>,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl BlockStats {
    fn of<M: Rows>(x: &M, rows: &[u32], m: Moments) -> Self {
        let n = x.n_cols();
        let mut s = BlockStats {
            rows: rows.len() as u64,
            sum: vec![0.0; if m.sum { n } else { 0 }],
            nonzero: vec![0; if m.nonzero { n } else { 0 }],
            seen: vec![0; if m.welford { n } else { 0 }],
            mean: vec![0.0; if m.welford { n } else { 0 }],
            m2: vec![0.0; if m.welford { n } else { 0 }],
        };
        for &r in rows {
            x.for_each_in_row(r as usize, |c, v| {
                if m.sum {
                    s.sum[c] += v;
                }
                if m.nonzero && v != 0.0 {
                    s.nonzero[c] += 1;
                }
                if m.welford {
                    s.seen[c] += 1;
                    let delta = v - s.mean[c];
                    s.mean[c] += delta / s.seen[c] as f64;
                    s.m2[c] += delta * (v - s.mean[c]);
                }
            });
        }
        if m.welford {
            // The block's zeros: `rows - seen` more values of 0.
            for c in 0..n {
                let (nz, zeros) = (s.seen[c] as f64, (s.rows - s.seen[c]) as f64);
                if zeros > 0.0 && nz > 0.0 {
                    let total = nz + zeros;
                    s.m2[c] += s.mean[c] * s.mean[c] * nz * zeros / total;
                    s.mean[c] *= nz / total;
                }
            }
        }
        s
    }

    /// Adds this block to a group's running numbers, `rows_before` rows so far (`mean` and
    /// `m2` combined pairwise; empty slices are the numbers not computed).
    fn add_into(
        &self,
        rows_before: u64,
        sum: &mut [f64],
        nonzero: &mut [u64],
        mean: &mut [f64],
        m2: &mut [f64],
    ) {
        sum.iter_mut().zip(&self.sum).for_each(|(a, b)| *a += b);
        nonzero
            .iter_mut()
            .zip(&self.nonzero)
            .for_each(|(a, b)| *a += b);
        let (na, nb) = (rows_before as f64, self.rows as f64);
        let n = na + nb;
        for (c, (mean, m2)) in mean.iter_mut().zip(m2.iter_mut()).enumerate() {
            if rows_before == 0 {
                (*mean, *m2) = (self.mean[c], self.m2[c]);
            } else {
                let delta = self.mean[c] - *mean;
                *mean += delta * nb / n;
                *m2 += self.m2[c] + delta * delta * na * nb / n;
            }
        }
    }
}

/// The medians of every column over `rows` (see the module's definition).
fn group_medians<M: Rows>(x: &M, rows: &[u32]) -> Vec<f64> {
    let n_cols = x.n_cols();
    let mut columns: Vec<Vec<f64>> = vec![Vec::new(); n_cols];
    for &r in rows {
        x.for_each_in_row(r as usize, |c, v| columns[c].push(v));
    }
    let n = rows.len();
    columns
        .into_iter()
        .map(|mut values| median_with_zeros(&mut values, n))
        .collect()
}

/// The median of `values` and `n - values.len()` zeros.
pub fn median_with_zeros(values: &mut [f64], n: usize) -> f64 {
    if n == 0 || values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    values.sort_unstable_by(f64::total_cmp);
    let zeros = n - values.len();
    let negatives = values.partition_point(|&v| v < 0.0);
    let at = |k: usize| {
        if k < negatives {
            values[k]
        } else if k < negatives + zeros {
            0.0
        } else {
            values[k - zeros]
        }
    };
    if n % 2 == 1 {
        at(n / 2)
    } else {
        (at(n / 2 - 1) + at(n / 2)) / 2.0
    }
}
