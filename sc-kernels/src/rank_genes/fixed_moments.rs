//! The per-group moments as exact fixed-point sums: what the GPU computes (`rank_genes.cu`,
//! `rg_moments`), here on the host as its twin. Each value `v` is rounded once to an integer
//! multiple of `1 / s1` (and `fl32(v * v)` to one of `1 / s2`), `s1` and `s2` powers of two chosen
//! from the largest `|v|` and the cell count so that no sum can overflow 63 bits. Integer sums do
//! not depend on the order of addition, so the GPU's atomics give the same bits on every run and
//! the same bits as this twin. Against the CPU's f64 sums ([`super::group_moments`]) the
//! difference is at most `n / (2 s)` in a sum of `n` values: about 2e-12 of a log-normalized
//! value for a million cells.

use super::GroupMoments;
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};

/// The two scales of the fixed-point sums.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MomentScales {
    /// Of the values.
    pub s1: f64,
    /// Of their squares.
    pub s2: f64,
}

impl MomentScales {
    /// The largest powers of two that keep `n_cells` values of magnitude up to `max_abs` (and
    /// their squares) below `2^62` once scaled. Fails when a value is so large that the scale
    /// would fall below 1 (a sum would lose its fractional part).
    pub fn new(max_abs: f32, n_cells: usize) -> Result<Self> {
        let n = n_cells.max(1) as f64;
        let scale = |bound: f64| -> Result<f64> {
            if bound == 0.0 {
                return Ok(1.0);
            }
            let e = (62.0 - (bound * n).log2()).floor().min(60.0);
            if e < 0.0 {
                return Err(KernelError::Unsupported(format!(
                    "values up to {max_abs} over {n_cells} cells are too large for exact sums \
                     on the GPU"
                )));
            }
            Ok(e.exp2())
        };
        let m = max_abs as f64;
        Ok(MomentScales {
            s1: scale(m)?,
            s2: scale(((max_abs * max_abs) as f64).max(m * m))?,
        })
    }

    /// The fixed-point contributions of one value: `(round(v s1), round(fl32(v v) s2))`, half to
    /// even, as the GPU's `__double2ll_rn`.
    pub fn fixed(&self, v: f32) -> (i64, i64) {
        (
            ((v as f64) * self.s1).round_ties_even() as i64,
            (((v * v) as f64) * self.s2).round_ties_even() as i64,
        )
    }

    /// Sums (as the GPU's wrapping `u64` words) back to `f64`.
    pub fn to_moments(
        &self,
        n_groups: usize,
        n_genes: usize,
        sum: &[u64],
        sum_sq: &[u64],
        nnz: Vec<u64>,
    ) -> GroupMoments {
        let back = |words: &[u64], s: f64| -> Vec<f64> {
            words.iter().map(|&w| (w as i64) as f64 / s).collect()
        };
        GroupMoments {
            n_groups,
            n_genes,
            sum: back(sum, self.s1),
            sum_sq: back(sum_sq, self.s2),
            nnz,
        }
    }
}

/// The host twin of the GPU's moments: group-major sums of `x`'s non-zero values, cell `i` in
/// group `groups[i]` (codes checked by the caller).
pub fn fixed_point_moments(
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
) -> Result<GroupMoments> {
    let max_abs = x
        .data
        .iter()
        .filter(|v| **v != 0.0)
        .fold(0f32, |m, v| m.max(v.abs()));
    let scales = MomentScales::new(max_abs, x.n_rows)?;
    let len = n_groups * x.n_cols;
    let (mut sum, mut sq, mut nnz) = (vec![0u64; len], vec![0u64; len], vec![0u64; len]);
    for (i, &g) in groups.iter().enumerate() {
        let (genes, values) = x.row(i);
        for (&j, &v) in genes.iter().zip(values) {
            if v == 0.0 {
                continue;
            }
            let at = g as usize * x.n_cols + j as usize;
            let (a, b) = scales.fixed(v);
            sum[at] = sum[at].wrapping_add(a as u64);
            sq[at] = sq[at].wrapping_add(b as u64);
            nnz[at] += 1;
        }
    }
    Ok(scales.to_moments(n_groups, x.n_cols, &sum, &sq, nnz))
}
