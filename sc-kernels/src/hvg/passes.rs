//! The passes over the matrix that `highly_variable_genes` needs (the moments of each group of
//! cells, the clipped pass of seurat_v3), behind one trait ([`ColumnPasses`]) over a host
//! matrix ([`CpuPasses`]), a device matrix (`gpu::GpuPasses`) or the ranks of a split run
//! ([`Across`]). Everything else (binning, loess, selection, batch merge) is shared host code.

use crate::comm::{all_reduce_counts, sum_count, Communicator};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::reduce::Transform;
use crate::real::Real;
use crate::stats::col_reduce;

/// Batch of each cell: `codes[i]` indexes `categories` (a categorical `obs` column).
#[derive(Debug, Clone, PartialEq)]
pub struct Batches {
    pub codes: Vec<u32>,
    pub categories: Vec<String>,
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

/// Column sums and sums of squares of `min(x, clip[col])` over the stored values of the given
/// rows (all when `None`): the CPU's clipped pass.
pub(crate) fn clipped_pass<T: Real>(
    x: &CsrMatrix<T>,
    rows: Option<&[usize]>,
    clip: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let n = rows.map_or(x.n_rows, |r| r.len());
    let (s, sq, _) = col_reduce(n, x.n_cols, |range, acc| {
        for k in range {
            let (c, v) = x.row(rows.map_or(k, |r| r[k]));
            for (&cc, &vv) in c.iter().zip(v) {
                let j = cc as usize;
                let e = vv.to_f64().min(clip[j]);
                acc[j].sq += e * e;
                acc[j].sum += e;
            }
        }
    });
    (s, sq)
}

/// Column sums of `transform(x)`, sums of its squares and counts of values above zero (of `x`)
/// over one group of cells: the device's column moments, taken on the host alike.
pub(crate) use crate::gpu::reduce::ColumnMoments as Moments;

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
            let (s, q) = clipped_pass(self.x, rows, &clip[part.clone()]);
            sums[part.clone()].copy_from_slice(&s);
            sq[part].copy_from_slice(&q);
        }
        Ok((sums, sq))
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
