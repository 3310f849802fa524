//! The eigenpairs of largest magnitude of a large symmetric operator (scipy's `eigsh(which="LM")`,
//! ARPACK's job): thick-restart Lanczos (Wu and Simon 2000) with full reorthogonalization.
//!
//! A basis of `m = max(2k + 1, 20)` vectors (ARPACK's default `ncv`) is grown by the operator,
//! each new vector orthogonalized twice against all the others (so the projected matrix is
//! computed, not assumed tridiagonal); its Ritz pairs are tested (residual `|beta u_m|` at most
//! `tol`); if some of the `k` wanted are not there yet, the basis restarts from the best
//! `(m + k) / 2` Ritz vectors and the residual direction. Every sum is taken over fixed blocks
//! in order, so the result does not depend on the number of threads.

use crate::error::{KernelError, Result};
use crate::random::SplitMix64;
use crate::stats::chunked_sum;
use faer::{Mat, Side};
use rayon::prelude::*;

/// Rows per block of the dot products.
const ROWS: usize = 4096;

/// Restarts before giving up.
const MAX_RESTARTS: usize = 5000;

/// The eigenpairs found: values in decreasing order (as scanpy sorts them), vectors (unit
/// length, the entry of largest magnitude positive) as the columns of an `n x k` matrix.
#[derive(Debug, Clone)]
pub struct Eigenpairs {
    pub values: Vec<f64>,
    pub vectors: Mat<f64>,
    /// Restarts used.
    pub restarts: usize,
}

/// The `k` eigenpairs of largest magnitude of the symmetric `n x n` operator `apply`
/// (`apply(x, y)` writes `A x` into `y`), to residuals of at most `tol` (relative to the
/// largest magnitude found); the start vector is drawn from `seed`.
pub fn eigsh_largest(
    n: usize,
    k: usize,
    apply: impl Fn(&[f64], &mut [f64]) + Sync,
    tol: f64,
    seed: u64,
) -> Result<Eigenpairs> {
    if k == 0 || k >= n {
        return Err(KernelError::param(
            "k",
            format!(
                "must be between 1 and n - 1 = {}, got {k}",
                n.saturating_sub(1)
            ),
        ));
    }
    let m = (2 * k + 1).max(20).min(n);
    let mut draws = SplitMix64::new(seed);
    // The basis: m + 1 columns of n (the last one the residual direction).
    let mut basis = vec![0.0; (m + 1) * n];
    let mut start: Vec<f64> = (0..n).map(|_| draws.normal()).collect();
    normalize(&mut start);
    basis[..n].copy_from_slice(&start);
    let mut t = Mat::<f64>::zeros(m, m);
    let mut kept = 0;
    let mut w = vec![0.0; n];
    for restart in 0..MAX_RESTARTS {
        let mut beta = 0.0;
        for j in kept..m {
            let (done, rest) = basis.split_at_mut((j + 1) * n);
            apply(&done[j * n..], &mut w);
            // Twice: one pass leaves what rounding let through.
            let mut h = project_out(done, j + 1, n, &mut w);
            let h2 = project_out(done, j + 1, n, &mut w);
            h.iter_mut().zip(&h2).for_each(|(a, b)| *a += b);
            for (i, &v) in h.iter().enumerate() {
                t[(i, j)] = v;
                t[(j, i)] = v;
            }
            beta = norm(&w);
            let next = &mut rest[..n];
            if beta > 1e-12 {
                next.iter_mut().zip(&w).for_each(|(v, &x)| *v = x / beta);
            } else if j + 1 < m {
                // An invariant subspace: go on from a fresh direction, uncoupled.
                beta = 0.0;
                next.iter_mut().for_each(|v| *v = draws.normal());
                let done = &basis[..(j + 1) * n];
                let mut fresh = basis[(j + 1) * n..(j + 2) * n].to_vec();
                project_out(done, j + 1, n, &mut fresh);
                project_out(done, j + 1, n, &mut fresh);
                normalize(&mut fresh);
                basis[(j + 1) * n..(j + 2) * n].copy_from_slice(&fresh);
            } else {
                // The basis holds an invariant subspace: its Ritz pairs are exact.
                beta = 0.0;
                next.iter_mut().for_each(|v| *v = 0.0);
            }
        }
        let evd = t
            .self_adjoint_eigen(Side::Lower)
            .map_err(|e| KernelError::Unsupported(format!("eigsh: {e:?}")))?;
        let (theta, y) = (evd.S().column_vector(), evd.U());
        // Ritz pairs by decreasing magnitude (ties: the larger value first).
        let mut order: Vec<usize> = (0..m).collect();
        order.sort_by(|&a, &b| {
            theta[b]
                .abs()
                .total_cmp(&theta[a].abs())
                .then(theta[b].total_cmp(&theta[a]))
        });
        let scale = theta[order[0]].abs().max(f64::MIN_POSITIVE);
        let converged = order[..k]
            .iter()
            .all(|&i| (beta * y[(m - 1, i)]).abs() <= tol * scale);
        let last = restart + 1 == MAX_RESTARTS;
        if converged || last {
            if !converged {
                return Err(KernelError::Unsupported(format!(
                    "eigsh: {k} eigenpairs did not converge in {MAX_RESTARTS} restarts"
                )));
            }
            let mut chosen = order[..k].to_vec();
            chosen.sort_by(|&a, &b| theta[b].total_cmp(&theta[a]));
            let vectors = ritz_vectors(&basis, n, m, y, &chosen);
            return Ok(Eigenpairs {
                values: chosen.iter().map(|&i| theta[i]).collect(),
                vectors: signed(vectors),
                restarts: restart,
            });
        }
        // Thick restart: the best Ritz vectors, then the residual direction.
        kept = ((m + k) / 2).max(k).min(m - 1);
        let keep = &order[..kept];
        let new = ritz_vectors(&basis, n, m, y, keep);
        let residual = basis[m * n..(m + 1) * n].to_vec();
        for c in 0..kept {
            for r in 0..n {
                basis[c * n + r] = new[(r, c)];
            }
        }
        basis[kept * n..(kept + 1) * n].copy_from_slice(&residual);
        t = Mat::zeros(m, m);
        for (c, &i) in keep.iter().enumerate() {
            t[(c, c)] = theta[i];
        }
    }
    unreachable!("the last restart returns")
}

/// Removes from `w` its components along the first `cols` columns of `basis` (each `n` long);
/// returns them.
fn project_out(basis: &[f64], cols: usize, n: usize, w: &mut [f64]) -> Vec<f64> {
    let h = chunked_sum(n, ROWS, cols, |rows, acc| {
        for (c, a) in acc.iter_mut().enumerate() {
            let v = &basis[c * n..(c + 1) * n];
            *a += rows.clone().map(|r| v[r] * w[r]).sum::<f64>();
        }
    });
    w.par_chunks_mut(ROWS).enumerate().for_each(|(b, chunk)| {
        let r0 = b * ROWS;
        for (c, &hc) in h.iter().enumerate() {
            let v = &basis[c * n + r0..c * n + r0 + chunk.len()];
            chunk.iter_mut().zip(v).for_each(|(x, &vv)| *x -= hc * vv);
        }
    });
    h
}

fn norm(w: &[f64]) -> f64 {
    chunked_sum(w.len(), ROWS, 1, |rows, acc| {
        acc[0] += rows.map(|r| w[r] * w[r]).sum::<f64>()
    })[0]
        .sqrt()
}

fn normalize(w: &mut [f64]) {
    let s = norm(w);
    w.iter_mut().for_each(|v| *v /= s);
}

/// `basis[.., ..m] y[.., cols]`: the Ritz vectors of the columns `cols` of `y`.
fn ritz_vectors(
    basis: &[f64],
    n: usize,
    m: usize,
    y: faer::MatRef<'_, f64>,
    cols: &[usize],
) -> Mat<f64> {
    let mut out = Mat::<f64>::zeros(n, cols.len());
    let columns: Vec<Vec<f64>> = cols
        .par_iter()
        .map(|&i| {
            let mut x = vec![0.0; n];
            for j in 0..m {
                let (coef, v) = (y[(j, i)], &basis[j * n..(j + 1) * n]);
                x.iter_mut().zip(v).for_each(|(a, &b)| *a += coef * b);
            }
            x
        })
        .collect();
    for (c, x) in columns.iter().enumerate() {
        for (r, &v) in x.iter().enumerate() {
            out[(r, c)] = v;
        }
    }
    out
}

/// Each column with its entry of largest magnitude positive (the first such on ties).
fn signed(mut v: Mat<f64>) -> Mat<f64> {
    for c in 0..v.ncols() {
        let mut best = (0.0f64, 0usize);
        for r in 0..v.nrows() {
            if v[(r, c)].abs() > best.0 {
                best = (v[(r, c)].abs(), r);
            }
        }
        if v[(best.1, c)] < 0.0 {
            for r in 0..v.nrows() {
                v[(r, c)] = -v[(r, c)];
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symmetric tridiagonal-plus-noise matrix with a known dense spectrum.
    fn dense_case(n: usize, seed: u64) -> Mat<f64> {
        let mut g = SplitMix64::new(seed);
        let mut a = Mat::<f64>::zeros(n, n);
        for i in 0..n {
            a[(i, i)] = 1.0 - 2.0 * i as f64 / n as f64;
            for j in 0..i {
                let v = if j + 1 == i { 0.3 } else { 0.01 * g.normal() };
                a[(i, j)] = v;
                a[(j, i)] = v;
            }
        }
        a
    }

    #[test]
    fn matches_a_dense_eigendecomposition() {
        let n = 300;
        let a = dense_case(n, 1);
        let apply = |x: &[f64], y: &mut [f64]| {
            for i in 0..n {
                y[i] = (0..n).map(|j| a[(i, j)] * x[j]).sum();
            }
        };
        let got = eigsh_largest(n, 6, apply, 1e-12, 3).unwrap();
        let evd = a.self_adjoint_eigen(Side::Lower).unwrap();
        let s = evd.S().column_vector();
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&p, &q| s[q].abs().total_cmp(&s[p].abs()));
        let mut want: Vec<usize> = idx[..6].to_vec();
        want.sort_by(|&p, &q| s[q].total_cmp(&s[p]));
        for (c, &i) in want.iter().enumerate() {
            assert!((got.values[c] - s[i]).abs() < 1e-10, "{:?}", got.values);
            let dot: f64 = (0..n).map(|r| got.vectors[(r, c)] * evd.U()[(r, i)]).sum();
            assert!((dot.abs() - 1.0).abs() < 1e-8, "vector {c}: {dot}");
        }
        // The same seed twice, and another thread count: the same bits.
        let again = crate::on_threads(1, || eigsh_largest(n, 6, apply, 1e-12, 3).unwrap());
        assert_eq!(again.values, got.values);
        assert_eq!(again.vectors, got.vectors);
    }

    #[test]
    fn bad_k_is_named() {
        let apply = |x: &[f64], y: &mut [f64]| y.copy_from_slice(x);
        assert!(eigsh_largest(5, 5, apply, 1e-10, 0).is_err());
        assert!(eigsh_largest(5, 0, apply, 1e-10, 0).is_err());
    }
}
