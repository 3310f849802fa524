//! The correction step of harmony: per cluster, a ridge regression of the embedding on the
//! batch design weighted by the soft assignments, and the subtraction of the batch terms.
//!
//! The normal matrix of cluster `k`, `Phi^T diag(R_:k) Phi + diag(0, lambda_:k)` with `Phi =
//! [1, one-hot batch]`, is the arrowhead `[[N_k, o^T], [o, diag(o + lambda)]]` (`o_b = O_bk`,
//! `N_k = sum_b o_b`). Its solve against `[M_0; M_1; ...; M_B]` (`M_b = sum over batch b of
//! R_ik Z_i`, `M_0 = sum_b M_b`) in closed form: with `w_b = lambda_b / (o_b + lambda_b)`,
//! the intercept is `mu = sum_b w_b M_b / sum_b w_b o_b` and the batch coefficients are
//! `W_bk = (M_b - o_b mu) / (o_b + lambda_b)` — the same numbers as inverting the matrix
//! (rapids-singlecell's `compute_inv_mats` writes out that inverse), without its cancellations.
//! The intercept is not removed.

use super::{expected, HarmonyFlavor, HarmonyParams, Setup, SUPPRESS_PENALTY};
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// The ridge penalties `lambda_bk` (`B x K`): harmony2 `alpha E_bk`, pruned to
/// [`SUPPRESS_PENALTY`] where `N_b = 0` or `O_bk / N_b < batch_prune_threshold`; harmony1
/// `ridge_lambda`; and [`SUPPRESS_PENALTY`] where `O_bk + lambda_bk = 0`.
pub fn ridge_lambdas(
    o: &[f64],
    pr_b: &[f64],
    n_b: &[f64],
    k: usize,
    params: &HarmonyParams,
) -> Vec<f64> {
    let e = expected(o, pr_b, k);
    o.iter()
        .zip(&e)
        .enumerate()
        .map(|(i, (&o, &e))| {
            let nb = n_b[i / k];
            let lambda = match params.flavor {
                HarmonyFlavor::Harmony1 => params.ridge_lambda,
                HarmonyFlavor::Harmony2 => {
                    let pruned = nb == 0.0
                        || params
                            .batch_prune_threshold
                            .is_some_and(|t| o / nb.max(1.0) < t);
                    if pruned {
                        SUPPRESS_PENALTY
                    } else {
                        params.alpha * e
                    }
                }
            };
            if o + lambda == 0.0 {
                SUPPRESS_PENALTY
            } else {
                lambda
            }
        })
        .collect()
}

/// The batch coefficients `W` (`B x K x d`, batch-major) from `O` (`B x K`), the penalties
/// (`B x K`) and the moments `M` (`B x K x d`).
pub fn ridge_coefficients(
    o: &[f64],
    lambda: &[f64],
    m: &[f64],
    b: usize,
    k: usize,
    d: usize,
) -> Vec<f64> {
    let mut w = vec![0f64; b * k * d];
    let mut mu = vec![0f64; d];
    for c in 0..k {
        let mut denom = 0f64;
        mu.fill(0.0);
        for bb in 0..b {
            let (ob, lb) = (o[bb * k + c], lambda[bb * k + c]);
            let wb = lb / (ob + lb);
            denom += wb * ob;
            let mb = &m[(bb * k + c) * d..(bb * k + c + 1) * d];
            mu.iter_mut().zip(mb).for_each(|(a, &v)| *a += wb * v);
        }
        if denom <= 0.0 {
            continue; // an empty cluster: nothing to correct
        }
        mu.iter_mut().for_each(|v| *v /= denom);
        for bb in 0..b {
            let (ob, lb) = (o[bb * k + c], lambda[bb * k + c]);
            let f = 1.0 / (ob + lb);
            let mb = &m[(bb * k + c) * d..(bb * k + c + 1) * d];
            let wb = &mut w[(bb * k + c) * d..(bb * k + c + 1) * d];
            for j in 0..d {
                wb[j] = f * (mb[j] - ob * mu[j]);
            }
        }
    }
    w
}

/// `M_b = R_b^T Z_b` for every batch (`B x K x d`, f32 products widened to f64).
pub(crate) fn batch_moments(setup: &Setup, r: &[f32]) -> Vec<f64> {
    let (d, k, b) = (setup.d, setup.k, setup.b);
    let mut m = vec![0f32; b * k * d];
    for bb in 0..b {
        let (s, e) = (setup.offsets[bb], setup.offsets[bb + 1]);
        if e == s {
            continue;
        }
        faer::linalg::matmul::matmul(
            MatMut::from_row_major_slice_mut(&mut m[bb * k * d..(bb + 1) * k * d], k, d),
            Accum::Replace,
            MatRef::from_row_major_slice(&r[s * k..e * k], e - s, k).transpose(),
            MatRef::from_row_major_slice(&setup.x[s * d..e * d], e - s, d),
            1.0,
            Par::rayon(0),
        );
    }
    m.into_iter().map(|v| v as f64).collect()
}

/// `Z_hat_b = Z_b - R_b W_b` for every batch (internal order).
pub(crate) fn apply(setup: &Setup, r: &[f32], w: &[f64]) -> Vec<f32> {
    let (d, k, b) = (setup.d, setup.k, setup.b);
    let wf: Vec<f32> = w.par_iter().map(|&v| v as f32).collect();
    let mut z = setup.x.clone();
    for bb in 0..b {
        let (s, e) = (setup.offsets[bb], setup.offsets[bb + 1]);
        if e == s {
            continue;
        }
        faer::linalg::matmul::matmul(
            MatMut::from_row_major_slice_mut(&mut z[s * d..e * d], e - s, d),
            Accum::Add,
            MatRef::from_row_major_slice(&r[s * k..e * k], e - s, k),
            MatRef::from_row_major_slice(&wf[bb * k * d..(bb + 1) * k * d], k, d),
            -1.0,
            Par::rayon(0),
        );
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::linalg::solvers::Solve;
    use faer::Mat;

    /// The closed form equals solving the full (B+1) x (B+1) system and dropping the intercept.
    #[test]
    fn closed_form_matches_the_dense_solve() {
        let (b, k, d) = (3, 2, 4);
        let o = vec![5.0, 0.5, 2.0, 7.0, 0.0, 3.0];
        let lambda = vec![1.0, 0.1, 0.4, 1.4, SUPPRESS_PENALTY, 0.6];
        let m: Vec<f64> = (0..b * k * d)
            .map(|i| ((i * 7919) % 23) as f64 - 11.0)
            .collect();
        let w = ridge_coefficients(&o, &lambda, &m, b, k, d);
        for c in 0..k {
            let nk: f64 = (0..b).map(|bb| o[bb * k + c]).sum();
            let a = Mat::from_fn(b + 1, b + 1, |i, j| match (i, j) {
                (0, 0) => nk,
                (0, j) => o[(j - 1) * k + c],
                (i, 0) => o[(i - 1) * k + c],
                (i, j) if i == j => o[(i - 1) * k + c] + lambda[(i - 1) * k + c],
                _ => 0.0,
            });
            let rhs = Mat::from_fn(b + 1, d, |i, j| {
                if i == 0 {
                    (0..b).map(|bb| m[(bb * k + c) * d + j]).sum()
                } else {
                    m[((i - 1) * k + c) * d + j]
                }
            });
            let sol = a.partial_piv_lu().solve(&rhs);
            for bb in 0..b {
                for j in 0..d {
                    let got = w[(bb * k + c) * d + j];
                    let want = sol[(bb + 1, j)];
                    assert!(
                        (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                        "cluster {c} batch {bb} pc {j}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn lambdas_follow_the_flavour_and_prune() {
        let p = HarmonyParams::default();
        // Batch 0: N_b = 0; batch 1 well represented; batch 2: one cell, only in cluster 1.
        let o = vec![0.0, 0.0, 30.0, 40.0, 0.0, 1.0];
        let n_b = vec![0.0, 70.0, 1.0];
        let pr_b = vec![0.0, 70.0 / 71.0, 1.0 / 71.0];
        let l = ridge_lambdas(&o, &pr_b, &n_b, 2, &p);
        assert_eq!(&l[..2], &[SUPPRESS_PENALTY, SUPPRESS_PENALTY]);
        assert!((l[2] - 0.2 * 30.0 * 70.0 / 71.0).abs() < 1e-12);
        assert_eq!(l[4], SUPPRESS_PENALTY);
        assert!((l[5] - 0.2 * 41.0 / 71.0).abs() < 1e-12);
        let p1 = HarmonyParams {
            flavor: HarmonyFlavor::Harmony1,
            ridge_lambda: 0.0,
            ..p
        };
        let l1 = ridge_lambdas(&o, &pr_b, &n_b, 2, &p1);
        assert_eq!(
            l1,
            vec![
                SUPPRESS_PENALTY,
                SUPPRESS_PENALTY,
                0.0,
                0.0,
                SUPPRESS_PENALTY,
                0.0
            ]
        );
    }
}
