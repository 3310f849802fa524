//! LISI, the local inverse Simpson index (Korsunsky et al. 2019), as the reference
//! implementation (immunogenomics/LISI, harmonypy's `compute_lisi`) computes it: for each cell,
//! its `3 * perplexity` nearest neighbours (euclidean, the cell itself included, then removed),
//! a Gaussian kernel on the (not squared) distances `p_j ∝ exp(-beta d_j)` with `beta` found by
//! binary search (at most 50 steps, from `beta = 1`) so that the entropy
//! `ln(sum e^{-beta d}) + beta sum d p` is `ln(perplexity)` within `1e-5`, then the inverse of
//! Simpson's index `1 / sum_c (sum of p_j over the neighbours labelled c)^2`.
//!
//! iLISI (batch labels) near the number of batches means well mixed batches; cLISI (cell-type
//! labels) near 1 means cell types kept apart.

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::neighbors::knn_exact;
use rayon::prelude::*;

/// Parameters, with the reference's default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LisiParams {
    pub perplexity: f64,
}

impl Default for LisiParams {
    fn default() -> Self {
        LisiParams { perplexity: 30.0 }
    }
}

/// LISI of every row of `x` for the labels `labels` (codes in `0..n_categories`). A cell whose
/// kernel vanishes (every neighbour infinitely far for the search) gets NaN, where the
/// reference returns -1.
pub fn compute_lisi(
    x: &DenseMatrix<f32>,
    labels: &[u32],
    n_categories: usize,
    params: &LisiParams,
) -> Result<Vec<f64>> {
    let n = x.n_rows;
    if labels.len() != n {
        return Err(KernelError::Shape(format!(
            "{} labels for {n} points",
            labels.len()
        )));
    }
    if let Some((i, &c)) = labels
        .iter()
        .enumerate()
        .find(|(_, &c)| c as usize >= n_categories)
    {
        return Err(KernelError::param(
            "labels",
            format!("point {i} has label {c}, but there are {n_categories} categories"),
        ));
    }
    if !(params.perplexity.is_finite() && params.perplexity >= 1.0) {
        return Err(KernelError::param(
            "perplexity",
            format!("must be finite and at least 1, got {}", params.perplexity),
        ));
    }
    if n < 2 {
        return Err(KernelError::param(
            "x",
            format!("LISI needs at least 2 points, got {n}"),
        ));
    }
    let k = ((3.0 * params.perplexity) as usize).clamp(2, n);
    let knn = knn_exact(x, k)?;
    let log_u = params.perplexity.ln();
    Ok((0..n)
        .into_par_iter()
        .map(|i| {
            let (idx, dist) = knn.row(i);
            // Drop the cell itself (first, ties aside; drop it wherever it is).
            let pos = idx.iter().position(|&j| j as usize == i).unwrap_or(k - 1);
            let nb: Vec<(u32, f64)> = idx
                .iter()
                .zip(dist)
                .enumerate()
                .filter(|&(t, _)| t != pos)
                .map(|(_, (&j, &dd))| (labels[j as usize], dd as f64))
                .collect();
            let simpson = simpson(&nb, n_categories, log_u);
            if simpson > 0.0 {
                1.0 / simpson
            } else {
                f64::NAN
            }
        })
        .collect())
}

/// Simpson's index of one cell's neighbours `(label, distance)`; -1 when the kernel vanishes.
fn simpson(nb: &[(u32, f64)], n_categories: usize, log_u: f64) -> f64 {
    const TOL: f64 = 1e-5;
    let mut beta = 1.0f64;
    let (mut betamin, mut betamax) = (f64::NEG_INFINITY, f64::INFINITY);
    let mut p = vec![0f64; nb.len()];
    let mut h = 0.0;
    for _ in 0..50 {
        let mut sum_p = 0.0;
        let mut sum_dp = 0.0;
        for (pj, &(_, dj)) in p.iter_mut().zip(nb) {
            *pj = (-dj * beta).exp();
            sum_p += *pj;
            sum_dp += dj * *pj;
        }
        if sum_p == 0.0 {
            h = 0.0;
            p.fill(0.0);
        } else {
            h = sum_p.ln() + beta * sum_dp / sum_p;
            p.iter_mut().for_each(|v| *v /= sum_p);
        }
        let hdiff = h - log_u;
        if hdiff.abs() < TOL {
            break;
        }
        if hdiff > 0.0 {
            betamin = beta;
            beta = if betamax.is_finite() {
                (beta + betamax) / 2.0
            } else {
                beta * 2.0
            };
        } else {
            betamax = beta;
            beta = if betamin.is_finite() {
                (beta + betamin) / 2.0
            } else {
                beta / 2.0
            };
        }
    }
    if h == 0.0 {
        return -1.0;
    }
    let mut by_label = vec![0f64; n_categories];
    for (pj, &(c, _)) in p.iter().zip(nb) {
        by_label[c as usize] += pj;
    }
    by_label.iter().map(|v| v * v).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_label_gives_one_and_even_mixing_gives_about_two() {
        // A 20 x 20 grid; labels in a checkerboard, then all equal.
        let pts: Vec<f32> = (0..400)
            .flat_map(|i| [(i % 20) as f32, (i / 20) as f32])
            .collect();
        let x = DenseMatrix::new(400, 2, pts).unwrap();
        let same = vec![0u32; 400];
        let l = compute_lisi(&x, &same, 1, &LisiParams::default()).unwrap();
        assert!(l.iter().all(|&v| (v - 1.0).abs() < 1e-12));
        let checker: Vec<u32> = (0..400).map(|i| ((i % 20 + i / 20) % 2) as u32).collect();
        let l = compute_lisi(&x, &checker, 2, &LisiParams::default()).unwrap();
        let mean = l.iter().sum::<f64>() / 400.0;
        assert!(mean > 1.9 && mean <= 2.0, "{mean}");
    }

    #[test]
    fn bad_input_is_refused() {
        let x = DenseMatrix::new(3, 1, vec![0.0, 1.0, 2.0]).unwrap();
        assert!(compute_lisi(&x, &[0, 1], 2, &LisiParams::default()).is_err());
        assert!(compute_lisi(&x, &[0, 1, 2], 2, &LisiParams::default()).is_err());
        let p = LisiParams { perplexity: 0.0 };
        assert!(compute_lisi(&x, &[0, 1, 1], 2, &p).is_err());
    }
}
