//! t-SNE's affinities (scikit-learn's `_joint_probabilities_nn`): per cell, a Gaussian over the
//! squared distances to its `k` nearest others, its precision found by bisection (at most 100
//! steps, to an entropy within 1e-5 of `ln(perplexity)`); the conditional probabilities
//! symmetrized (`P + P^T`) and divided by their total.

use crate::csr::{csr_from_rows, CsrMatrix};
use crate::error::{KernelError, Result};
use crate::neighbors::Knn;
use rayon::prelude::*;

/// scikit-learn's neighbour count for a perplexity: `min(n - 1, 3 perplexity + 1)`.
pub fn neighbours_for(n: usize, perplexity: f64) -> usize {
    (n - 1).min((3.0 * perplexity + 1.0) as usize)
}

/// Bisection steps and entropy tolerance (scikit-learn's `_binary_search_perplexity`).
const STEPS: usize = 100;
const TOLERANCE: f64 = 1e-5;

/// The joint affinities from `knn` (each cell's neighbours, itself included, `k + 1` of them;
/// distances Euclidean), as a symmetric CSR matrix summing to 1.
pub fn affinities(knn: &Knn, k: usize, perplexity: f64) -> Result<CsrMatrix<f64>> {
    let n = knn.n_obs;
    if knn.k < k + 1 {
        return Err(KernelError::Shape(format!(
            "t-SNE needs {} neighbours a cell (itself included), the kNN has {}",
            k + 1,
            knn.k
        )));
    }
    let target = perplexity.ln();
    // Each cell's k others (itself dropped) and their conditional probabilities.
    let rows: Vec<(Vec<u32>, Vec<f64>)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (idx, dist) = knn.row(i);
            let mut others: Vec<(u32, f64)> = idx
                .iter()
                .zip(dist)
                .filter(|(&j, _)| j as usize != i)
                .map(|(&j, &d)| (j, (d as f64) * (d as f64)))
                .collect();
            others.truncate(k);
            let d2: Vec<f64> = others.iter().map(|o| o.1).collect();
            (
                others.iter().map(|o| o.0).collect(),
                conditional(&d2, target),
            )
        })
        .collect();
    // P + P^T: each row's own entries, sorted, merged with their mirrors (the transpose's
    // counting sort, linear in the entries: a million cells have 180 million).
    let own: Vec<Vec<(u32, f64)>> = rows
        .into_par_iter()
        .map(|(cols, p)| {
            let mut e: Vec<(u32, f64)> = cols.into_iter().zip(p).collect();
            e.sort_unstable_by_key(|e| e.0);
            e
        })
        .collect();
    let a = csr_from_rows(n, n, &own);
    let mut joint = a.union_with(&a.transpose(), |x, y| Some(x + y));
    let total: f64 = joint.data.iter().sum::<f64>().max(f64::EPSILON);
    joint.data.iter_mut().for_each(|v| *v /= total);
    Ok(joint)
}

/// The conditional probabilities over squared distances `d2` whose entropy is `target`.
fn conditional(d2: &[f64], target: f64) -> Vec<f64> {
    let (mut beta, mut lo, mut hi) = (1.0f64, f64::NEG_INFINITY, f64::INFINITY);
    let mut p = vec![0.0; d2.len()];
    for _ in 0..STEPS {
        let mut sum = 0.0;
        for (pj, &d) in p.iter_mut().zip(d2) {
            *pj = (-d * beta).exp();
            sum += *pj;
        }
        if sum == 0.0 {
            sum = 1e-8;
        }
        let mut weighted = 0.0;
        for (pj, &d) in p.iter_mut().zip(d2) {
            *pj /= sum;
            weighted += d * *pj;
        }
        let entropy = sum.ln() + beta * weighted;
        let diff = entropy - target;
        if diff.abs() <= TOLERANCE {
            break;
        }
        if diff > 0.0 {
            lo = beta;
            beta = if hi == f64::INFINITY {
                beta * 2.0
            } else {
                (beta + hi) / 2.0
            };
        } else {
            hi = beta;
            beta = if lo == f64::NEG_INFINITY {
                beta / 2.0
            } else {
                (beta + lo) / 2.0
            };
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entropy_is_the_perplexitys() {
        let d2: Vec<f64> = (1..=90).map(|i| (i as f64).sqrt()).collect();
        let p = conditional(&d2, 30f64.ln());
        let h: f64 = -p
            .iter()
            .filter(|&&v| v > 0.0)
            .map(|&v| v * v.ln())
            .sum::<f64>();
        assert!((h - 30f64.ln()).abs() < 1e-4, "{h}");
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(p.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn joint_affinities_are_symmetric_and_sum_to_one() {
        // Four cells on a line, each with its 2 others + itself.
        let knn = Knn {
            n_obs: 4,
            k: 3,
            indices: vec![0, 1, 2, 1, 0, 2, 2, 1, 3, 3, 2, 1],
            distances: vec![0., 1., 2., 0., 1., 1., 0., 1., 1., 0., 1., 2.],
        };
        let p = affinities(&knn, 2, 1.5).unwrap();
        assert!((p.data.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let dense = p.to_dense();
        for i in 0..4 {
            for j in 0..4 {
                assert!((dense.get(i, j) - dense.get(j, i)).abs() < 1e-15);
            }
            assert_eq!(dense.get(i, i), 0.0);
        }
        assert_eq!(neighbours_for(4, 30.0), 3);
        assert_eq!(neighbours_for(10_000, 30.0), 91);
    }
}
