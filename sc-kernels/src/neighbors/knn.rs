//! A kNN result and the check of k every kNN search makes (the input's finiteness:
//! `DenseMatrix::check_finite`).

use crate::error::{KernelError, Result};

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
