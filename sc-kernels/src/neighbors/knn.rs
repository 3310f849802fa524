//! A kNN result and the checks every kNN search makes of its input.

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;

/// The k nearest neighbours of each cell, nearest first; row `i` is `[i*k, (i+1)*k)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Knn {
    pub n_obs: usize,
    pub k: usize,
    pub indices: Vec<u32>,
    pub distances: Vec<f32>,
}

impl Knn {
    /// Neighbours of cell `i`.
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        (
            &self.indices[i * self.k..(i + 1) * self.k],
            &self.distances[i * self.k..(i + 1) * self.k],
        )
    }
}

/// Candidates kept per query beyond `k` before the exact distances decide.
pub(crate) const EXTRA: usize = 8;

/// `k` must be 1 to `n`.
pub(crate) fn check_k(n: usize, k: usize) -> Result<()> {
    if k == 0 || k > n {
        return Err(KernelError::param(
            "n_neighbors",
            format!("must be between 1 and the number of cells ({n}), got {k}"),
        ));
    }
    Ok(())
}

/// Every coordinate must be finite.
pub(crate) fn check_finite<T: Real>(x: &DenseMatrix<T>) -> Result<()> {
    let d = x.n_cols;
    match crate::first_match::par_position_first(&x.data, |v| !v.is_finite()) {
        Some(p) => Err(KernelError::NonFinite {
            row: p / d.max(1),
            col: p % d.max(1),
            value: x.data[p].to_f64(),
        }),
        None => Ok(()),
    }
}
