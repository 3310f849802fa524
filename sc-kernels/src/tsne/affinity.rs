//! t-SNE's affinities (scikit-learn's `_joint_probabilities_nn`): per cell, a Gaussian over the
//! squared distances to its `k` nearest others, its precision found by bisection (at most 100
//! steps, to an entropy within 1e-5 of `ln(perplexity)`); the conditional probabilities
//! symmetrized (`P + P^T`) and divided by their total.

use crate::csr::CsrMatrix;
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
    let (indptr, indices, mut data) = symmetrized(&rows, n);
    let total: f64 = data.iter().sum::<f64>().max(f64::EPSILON);
    data.iter_mut().for_each(|v| *v /= total);
    Ok(CsrMatrix {
        n_rows: n,
        n_cols: n,
        indptr,
        indices,
        data,
    })
}

/// `P + P^T` in CSR (columns ascending, an entry and its mirror summed) from each row's
/// columns and values: the mirrors gathered by column in row order (a counting sort), then
/// each row's own entries, sorted, merged with them. Linear in the entries, not a sort of
/// all of them (a million cells have 180 million).
fn symmetrized(rows: &[(Vec<u32>, Vec<f64>)], n: usize) -> (Vec<u64>, Vec<u32>, Vec<f64>) {
    let mut mirror_ptr = vec![0usize; n + 1];
    for (cols, _) in rows {
        for &j in cols {
            mirror_ptr[j as usize + 1] += 1;
        }
    }
    for i in 0..n {
        mirror_ptr[i + 1] += mirror_ptr[i];
    }
    let mut next = mirror_ptr.clone();
    let mut mirrors = vec![(0u32, 0.0f64); mirror_ptr[n]];
    for (i, (cols, p)) in rows.iter().enumerate() {
        for (&j, &v) in cols.iter().zip(p) {
            mirrors[next[j as usize]] = (i as u32, v);
            next[j as usize] += 1;
        }
    }
    let merged: Vec<Vec<(u32, f64)>> = rows
        .par_iter()
        .enumerate()
        .map(|(i, (cols, p))| {
            let mut own: Vec<(u32, f64)> = cols.iter().copied().zip(p.iter().copied()).collect();
            own.sort_unstable_by_key(|e| e.0);
            // Both lists ascend by column, the mirrors by their row of origin.
            let theirs = &mirrors[mirror_ptr[i]..mirror_ptr[i + 1]];
            let mut out = Vec::with_capacity(own.len() + theirs.len());
            let (mut a, mut b) = (0, 0);
            while a < own.len() || b < theirs.len() {
                let next = match (own.get(a), theirs.get(b)) {
                    (Some(x), Some(y)) if x.0 == y.0 => {
                        (a, b) = (a + 1, b + 1);
                        (x.0, x.1 + y.1)
                    }
                    (Some(x), Some(y)) if x.0 < y.0 => {
                        a += 1;
                        *x
                    }
                    (Some(x), None) => {
                        a += 1;
                        *x
                    }
                    (_, Some(y)) => {
                        b += 1;
                        *y
                    }
                    (None, None) => unreachable!("the loop's condition"),
                };
                out.push(next);
            }
            out
        })
        .collect();
    let mut indptr = Vec::with_capacity(n + 1);
    indptr.push(0u64);
    for r in &merged {
        indptr.push(indptr.last().expect("pushed above") + r.len() as u64);
    }
    let indices = merged.iter().flat_map(|r| r.iter().map(|e| e.0)).collect();
    let data = merged.iter().flat_map(|r| r.iter().map(|e| e.1)).collect();
    (indptr, indices, data)
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
