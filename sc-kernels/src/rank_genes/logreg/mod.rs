//! `rank_genes_groups(method='logreg')`: the coefficients of an L2-penalised logistic
//! regression of the cells' groups on their genes, as scanpy fits it with scikit-learn's
//! `LogisticRegression()` (C = 1, an unpenalised intercept): for two groups the binary model
//! (one coefficient per gene, for the second group), for more the multinomial one (one per
//! gene and group). The objective, `sum_i loss_i + |W|^2 / (2 C)`, is minimised by L-BFGS with
//! scikit-learn's stopping rule: until no entry of the gradient of the mean loss (the
//! objective over the cells) exceeds `tol`, the objective stops decreasing (scipy's `ftol`,
//! 64 eps), or `max_iter` iterations; its defaults, 1e-4 and 100, are scanpy's.
//! On clusters (groups that are a function of X: a nearly separable problem) that stops
//! short of the minimum, as scanpy's does, and the top genes are what the two share; the
//! minimum itself is reached with a small `tol` and a large `max_iter` (on the real datasets,
//! within 5e-4 of the largest coefficient of scikit-learn's run to convergence in float64).
//!
//! With fewer cells than genes the fit runs first in the cells' whitened coordinates
//! ([`cells`]: the same minimum, reached in a few hundred small dense iterations), then the
//! genes' gradient is checked at it, and L-BFGS in the genes' coordinates polishes it if it
//! must. With more cells, L-BFGS in the genes' coordinates starts each step from
//! [`landmarks`]' approximate inverse Hessian. The cells' scores and the genes' gradients are
//! computed on every core ([`gpu`]: on the device), each sum in an order of its own (a gene's
//! cells in order, fixed blocks of cells): the fit does not depend on the thread count.

mod cells;
mod gpu;
mod landmarks;
mod lbfgs;

pub use gpu::{logreg_gpu, runs_on_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::stats::chunked_sum;
use lbfgs::{dot, minimise, Minimised, Smooth};
use rayon::prelude::*;

/// scikit-learn's parameters that scanpy passes through (`**kwds`), with their meaning there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogregParams {
    /// Inverse of the penalty's strength.
    pub c: f64,
    /// The largest entry of the mean loss's gradient at which the fit stops.
    pub tol: f64,
    /// L-BFGS iterations at most.
    pub max_iter: usize,
}

impl Default for LogregParams {
    /// scikit-learn's, which scanpy keeps.
    fn default() -> Self {
        LogregParams {
            c: 1.0,
            tol: 1e-4,
            max_iter: 100,
        }
    }
}

impl LogregParams {
    /// `tol` for the objective's own gradient (the sum over `n` cells').
    fn gtol(&self, n: usize) -> f64 {
        self.tol * n as f64
    }

    /// Whether the fit in the genes' coordinates is preconditioned by landmark cells: only on
    /// the way to the minimum itself. To scikit-learn's tolerance, plain L-BFGS (its own) gets
    /// there sooner and nearer to scikit-learn's point. The celltypist sample x 10 (5,590
    /// cells, 2 cores), plain against landmarks: tol 1e-4 2.7 s against 5.6 s, the top 25
    /// genes shared with scanpy's 87% against 68%; 1e-5 5.2 s against 7.2 s; 1e-6 15.0 s
    /// against 11.4 s; 1e-7 58.7 s against 13.6 s.
    fn preconditioned(&self) -> bool {
        self.tol < PRECONDITION_BELOW_TOL
    }
}

/// The tolerance below which [`LogregParams::preconditioned`].
const PRECONDITION_BELOW_TOL: f64 = 1e-5;

/// The fitted model.
#[derive(Debug, Clone, PartialEq)]
pub struct LogregFit {
    /// `rows x n_genes`: one row (binary, for group 1) or one per group.
    pub coef: Vec<f64>,
    pub rows: usize,
    pub intercept: Vec<f64>,
    pub iterations: usize,
    /// Whether it stopped by `tol` (or the objective's floor) rather than by `max_iter`: where
    /// scikit-learn warns that lbfgs failed to converge.
    pub converged: bool,
}

impl LogregFit {
    /// Row `r` of the coefficients.
    pub fn row(&self, r: usize) -> &[f64] {
        let p = self.coef.len() / self.rows;
        &self.coef[r * p..(r + 1) * p]
    }
}

/// Cells per block of the sums.
const ROWS: usize = 16_384;

/// Fits the model of `groups` (one per cell, `< n_groups`, each group with a cell) on `x`.
pub fn logreg(
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
    params: &LogregParams,
) -> Result<LogregFit> {
    let k = check(x, groups, n_groups, params)?;
    let (n, p) = (x.n_rows, x.n_cols);
    let xt = x.transpose();
    let mut objective = Objective {
        x,
        xt: &xt,
        groups,
        k,
        inverse_c: 1.0 / params.c,
        landmarks: None,
    };
    // Fewer cells than genes: the fit in the cells' coordinates first (its gradient's norm at
    // most `gtol` bounds every gene's entry), then the genes' own gradient checked (and the fit
    // polished in their coordinates if rounding left an entry above `gtol`).
    let gtol = params.gtol(n);
    let (mut theta, first) = if cells::applies(n, p) {
        cells::fit(
            x,
            &xt,
            groups,
            k,
            objective.inverse_c,
            gtol,
            params.max_iter,
        )?
    } else {
        // Otherwise from zero in the genes' coordinates, preconditioned by landmark cells on
        // the way to the minimum.
        objective.landmarks = landmarks_for(params, x, &xt, k)?;
        let start = Minimised {
            iterations: 0,
            converged: false,
        };
        (vec![0.0; p * k + k], start)
    };
    let rest = params.max_iter.saturating_sub(first.iterations);
    let polish = minimise(&objective, &mut theta, gtol, rest);
    let ended = Minimised {
        iterations: first.iterations + polish.iterations,
        converged: polish.converged,
    };
    Ok(fit_from(&theta, p, k, ended))
}

/// The checks of a fit: labels for every cell, at least two groups and a cell in each,
/// positive `C` and `tol`, finite values. Returns the coefficient rows, `k` (1: binary).
fn check(
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
    params: &LogregParams,
) -> Result<usize> {
    let n = x.n_rows;
    if groups.len() != n {
        return Err(KernelError::Shape(format!(
            "logreg: {} group labels for {n} cells",
            groups.len()
        )));
    }
    if n_groups < 2 {
        return Err(KernelError::Unsupported(
            "logreg: cannot perform logistic regression on a single group".into(),
        ));
    }
    let mut sizes = vec![0usize; n_groups];
    for &g in groups {
        *sizes.get_mut(g as usize).ok_or_else(|| {
            KernelError::param("groups", format!("group {g} of {n_groups} groups"))
        })? += 1;
    }
    if let Some(g) = sizes.iter().position(|&s| s == 0) {
        return Err(KernelError::param(
            "groups",
            format!("group {g} has no cells"),
        ));
    }
    for (name, v) in [("C", params.c), ("tol", params.tol)] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(KernelError::param(name, format!("must be > 0, got {v}")));
        }
    }
    x.check_finite()?;
    Ok(score_rows(n_groups))
}

/// The model's coefficient rows for `n_groups` groups: 1 for two (the binary model), else one
/// per group.
fn score_rows(n_groups: usize) -> usize {
    if n_groups == 2 {
        1
    } else {
        n_groups
    }
}

/// The landmarks that precondition a fit in the genes' coordinates, where `params` ask for
/// them ([`LogregParams::preconditioned`]).
fn landmarks_for(
    params: &LogregParams,
    x: &CsrMatrix<f32>,
    xt: &CsrMatrix<f32>,
    k: usize,
) -> Result<Option<landmarks::Landmarks>> {
    match params.preconditioned() {
        true => Ok(Some(landmarks::Landmarks::new(x, xt, k, 1.0 / params.c)?)),
        false => Ok(None),
    }
}

/// The fit from `theta` (`[W (genes x k), b (k)]`, gene-major during the fit: a cell's genes
/// touch contiguous groups), its coefficients row-major.
fn fit_from(theta: &[f64], p: usize, k: usize, ended: Minimised) -> LogregFit {
    let coef = (0..k)
        .flat_map(|r| (0..p).map(move |j| (r, j)))
        .map(|(r, j)| theta[j * k + r])
        .collect();
    LogregFit {
        coef,
        rows: k,
        intercept: theta[p * k..].to_vec(),
        iterations: ended.iterations,
        converged: ended.converged,
    }
}

/// `sum_i loss_i + |W|^2 / (2 C)` over `theta = [W (genes x k), b (k)]`.
struct Objective<'a> {
    x: &'a CsrMatrix<f32>,
    /// X's transpose: each gene's cells in order, for the gradient gene by gene.
    xt: &'a CsrMatrix<f32>,
    groups: &'a [u32],
    /// Coefficient rows: 1 (binary) or the groups.
    k: usize,
    inverse_c: f64,
    /// The preconditioner, where the fit runs in the genes' coordinates from zero.
    landmarks: Option<landmarks::Landmarks>,
}

impl Smooth for Objective<'_> {
    fn precondition(&self, v: &mut [f64]) -> bool {
        self.landmarks.as_ref().is_some_and(|l| l.apply(v))
    }

    /// The value at `theta`, its gradient into `grad`. Cells, then genes, on every core; every
    /// sum runs in an order of its own (cells in order, fixed blocks), whatever the threads.
    fn eval(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        let (x, k) = (self.x, self.k);
        let p = x.n_cols;
        let (w, b) = theta.split_at(p * k);
        // Each cell's scores, replaced by the residuals d loss / d z; its loss.
        let mut resid = vec![0.0; x.n_rows * k];
        let losses: Vec<f64> = resid
            .par_chunks_mut(k)
            .enumerate()
            .map(|(i, z)| {
                z.copy_from_slice(b);
                let (cols, vals) = x.row(i);
                for (&j, &v) in cols.iter().zip(vals) {
                    let (j, v) = (j as usize, f64::from(v));
                    for (zr, &wr) in z.iter_mut().zip(&w[j * k..(j + 1) * k]) {
                        *zr += v * wr;
                    }
                }
                residual(z, self.groups[i] as usize)
            })
            .collect();
        if let Some(l) = &self.landmarks {
            let mut curv = resid.clone();
            curv.par_chunks_mut(k)
                .enumerate()
                .for_each(|(i, c)| curvature(c, self.groups[i] as usize));
            let at: Vec<f64> = l
                .cells
                .iter()
                .flat_map(|&c| curv[c * k..(c + 1) * k].to_vec())
                .collect();
            let totals: Vec<f64> = (0..k)
                .map(|r| (0..x.n_rows).map(|i| curv[i * k + r]).sum())
                .collect();
            l.record(&at, &totals);
        }
        // Each gene's gradient: its cells' residuals weighted by its values, plus the penalty's.
        grad[..p * k]
            .par_chunks_mut(k)
            .zip(w.par_chunks(k))
            .enumerate()
            .for_each(|(j, (g, wj))| {
                g.fill(0.0);
                let (cells, vals) = self.xt.row(j);
                for (&i, &v) in cells.iter().zip(vals) {
                    let (i, v) = (i as usize, f64::from(v));
                    for (gr, &r) in g.iter_mut().zip(&resid[i * k..(i + 1) * k]) {
                        *gr += v * r;
                    }
                }
                for (gr, &wv) in g.iter_mut().zip(wj) {
                    *gr += wv * self.inverse_c;
                }
            });
        // The intercepts' gradient and the loss, over fixed blocks of cells.
        let sums = chunked_sum(x.n_rows, ROWS, k + 1, |rows, acc| {
            for i in rows {
                for (a, &r) in acc.iter_mut().zip(&resid[i * k..(i + 1) * k]) {
                    *a += r;
                }
                acc[k] += losses[i];
            }
        });
        grad[p * k..].copy_from_slice(&sums[..k]);
        sums[k] + 0.5 * self.inverse_c * dot(w, w)
    }
}

/// One cell's loss at the scores `z` of its group `y`, `z` replaced by the loss's derivative:
/// binary (one score, for group 1) `log(1 + e^z) - [y = 1] z`, `sigmoid(z) - [y = 1]`;
/// multinomial `logsumexp(z) - z_y`, `softmax(z) - onehot(y)`.
fn residual(z: &mut [f64], y: usize) -> f64 {
    if z.len() == 1 {
        let (s, t) = (z[0], (y == 1) as u8 as f64);
        // log(1 + e^s), stable on both sides.
        let softplus = s.max(0.0) + (-s.abs()).exp().ln_1p();
        z[0] = 1.0 / (1.0 + (-s).exp()) - t;
        return softplus - t * s;
    }
    let top = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = z.iter().map(|&v| (v - top).exp()).sum();
    let lse = top + sum.ln();
    let loss = lse - z[y];
    for (c, v) in z.iter_mut().enumerate() {
        *v = (*v - lse).exp() - (c == y) as u8 as f64;
    }
    loss
}

/// A cell's residuals (`residual`'s output, its group `y`) replaced by the loss's curvature
/// per score: the probability (residual plus the group's indicator) times its complement.
fn curvature(resid: &mut [f64], y: usize) {
    let binary = resid.len() == 1;
    for (l, v) in resid.iter_mut().enumerate() {
        let q = *v
            + if binary {
                (y == 1) as u8 as f64
            } else {
                (l == y) as u8 as f64
            };
        *v = q * (1.0 - q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// Cells of `k` groups, each expressing its own genes more.
    fn data(n: usize, p: usize, k: usize, seed: u64) -> (CsrMatrix<f32>, Vec<u32>) {
        let mut r = SplitMix64::new(seed);
        let groups: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
        let dense: Vec<f32> = (0..n * p)
            .map(|e| {
                let (i, j) = (e / p, e % p);
                let base = if j % k == groups[i] as usize {
                    1.5
                } else {
                    0.3
                };
                let v = base + r.normal() * 0.7;
                if v > 0.4 {
                    v as f32
                } else {
                    0.0
                }
            })
            .collect();
        let m = crate::dense::DenseMatrix::new(n, p, dense).unwrap();
        (CsrMatrix::from_dense(&m), groups)
    }

    /// A fit run to the minimum: the mean gradient's largest entry at most 1e-9.
    const CONVERGED: LogregParams = LogregParams {
        c: 1.0,
        tol: 1e-9,
        max_iter: 10_000,
    };

    /// The genes' objective at a fit, with `theta` in its layout.
    fn at_fit(x: &CsrMatrix<f32>, groups: &[u32], fit: &LogregFit) -> (f64, Vec<f64>, Vec<f64>) {
        let xt = x.transpose();
        let f = Objective {
            x,
            xt: &xt,
            groups,
            k: fit.rows,
            inverse_c: 1.0,
            landmarks: None,
        };
        let p = x.n_cols;
        let mut theta = vec![0.0; p * fit.rows + fit.rows];
        for r in 0..fit.rows {
            for j in 0..p {
                theta[j * fit.rows + r] = fit.row(r)[j];
            }
        }
        theta[p * fit.rows..].copy_from_slice(&fit.intercept);
        let mut grad = vec![0.0; theta.len()];
        let value = f.eval(&theta, &mut grad);
        (value, theta, grad)
    }

    /// The gradient is zero at the fit: what the minimum means, checked by the objective's own
    /// finite differences on a few coordinates and by its gradient. More cells than genes (the
    /// genes' coordinates) and fewer (the cells').
    #[test]
    fn the_fit_is_the_minimum_of_the_penalised_loss() {
        for (n, p) in [(300, 12), (60, 200)] {
            for k in [2, 4] {
                let (x, groups) = data(n, p, k, 1);
                let fit = logreg(&x, &groups, k, &CONVERGED).unwrap();
                assert!(fit.converged, "{n}x{p} k {k}");
                assert_eq!(fit.rows, if k == 2 { 1 } else { k });
                let (at, theta, grad) = at_fit(&x, &groups, &fit);
                // scipy's `ftol` (64 eps of the objective) may end it before `tol`.
                assert!(
                    grad.iter().all(|g| g.abs() <= 1e-5),
                    "{n}x{p} k {k}: {grad:?}"
                );
                // Any small move raises the objective.
                let xt = x.transpose();
                let f = Objective {
                    x: &x,
                    xt: &xt,
                    groups: &groups,
                    k: fit.rows,
                    inverse_c: 1.0,
                    landmarks: None,
                };
                let mut scratch = grad.clone();
                for c in [0, 5, theta.len() - 1] {
                    for h in [1e-3, -1e-3] {
                        let mut moved = theta.clone();
                        moved[c] += h;
                        assert!(
                            f.eval(&moved, &mut scratch) > at,
                            "{n}x{p} k {k} coordinate {c}"
                        );
                    }
                }
                // Each group's own genes weigh for it.
                let own = |r: usize, g: usize| {
                    (0..p)
                        .filter(|j| j % k == g)
                        .map(|j| fit.row(r)[j])
                        .sum::<f64>()
                };
                if k == 2 {
                    assert!(own(0, 1) > own(0, 0));
                } else {
                    assert!((0..k).all(|g| own(g, g) > own(g, (g + 1) % k)));
                }
            }
        }
    }

    /// The cells' whitened form reaches the genes' minimum by itself (the genes' check after it
    /// has nothing left to do) in far fewer iterations than the genes' coordinates take, and
    /// both land on the same coefficients.
    #[test]
    fn the_cells_form_is_the_genes_minimum_in_fewer_iterations() {
        for k in [2, 5] {
            // Genes on scales from 1 to 40, as counts are: a badly conditioned problem.
            let (mut x, groups) = data(80, 400, k, 4);
            let scales: Vec<f32> = (0..x.n_cols).map(|j| 1.0 + (j * 7 % 40) as f32).collect();
            for i in 0..x.n_rows {
                let (s, e) = (x.indptr[i] as usize, x.indptr[i + 1] as usize);
                for t in s..e {
                    x.data[t] *= scales[x.indices[t] as usize];
                }
            }
            let xt = x.transpose();
            let rows = if k == 2 { 1 } else { k };
            let tol = 1e-7;
            let (theta, ended) = cells::fit(&x, &xt, &groups, rows, 1.0, tol, 10_000).unwrap();
            let iters = ended.iterations;
            let genes = Objective {
                x: &x,
                xt: &xt,
                groups: &groups,
                k: rows,
                inverse_c: 1.0,
                landmarks: None,
            };
            let mut grad = vec![0.0; theta.len()];
            genes.eval(&theta, &mut grad);
            assert!(
                genes.stationarity(&grad) <= 1e-6,
                "k {k}: {}",
                genes.stationarity(&grad)
            );
            let mut direct = vec![0.0; theta.len()];
            let direct_iters = minimise(&genes, &mut direct, tol, 100_000).iterations;
            assert!(
                iters * 2 < direct_iters,
                "k {k}: {iters} against {direct_iters}"
            );
            // The coefficients (the intercepts of several groups can all move together), as
            // near as two fits stopped by scipy's `ftol` on a flat minimum come.
            let coef = x.n_cols * rows;
            let top = direct[..coef].iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let worst = theta[..coef]
                .iter()
                .zip(&direct[..coef])
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(worst <= 1e-3 * top, "k {k}: {worst} of {top}");
        }
    }

    /// Landmark cells precondition the genes' coordinates: the same minimum, fewer
    /// iterations (cells on badly scaled genes, more cells than landmarks).
    #[test]
    fn landmarks_reach_the_same_minimum_in_fewer_iterations() {
        let (mut x, groups) = data(3000, 300, 4, 5);
        for t in 0..x.data.len() {
            x.data[t] *= 1.0 + (x.indices[t] * 7 % 40) as f32;
        }
        let xt = x.transpose();
        let plain = Objective {
            x: &x,
            xt: &xt,
            groups: &groups,
            k: 4,
            inverse_c: 1.0,
            landmarks: None,
        };
        let with = Objective {
            landmarks: Some(landmarks::Landmarks::new(&x, &xt, 4, 1.0).unwrap()),
            ..plain
        };
        let m = x.n_cols * 4 + 4;
        let (mut a, mut b) = (vec![0.0; m], vec![0.0; m]);
        let slow = minimise(&plain, &mut a, 1e-9, 100_000).iterations;
        let fast = minimise(&with, &mut b, 1e-9, 100_000).iterations;
        assert!(fast * 2 < slow, "{fast} against {slow}");
        // Both stop on the f64 floor of a flat minimum: the landmarks' as low, as stationary.
        let mut g = vec![0.0; m];
        let (fa, ga) = (plain.eval(&a, &mut g), plain.stationarity(&g));
        let (fb, gb) = (plain.eval(&b, &mut g), plain.stationarity(&g));
        assert!(fb <= fa + 1e-12 * fa.abs().max(1.0), "{fb} against {fa}");
        assert!(gb <= ga.max(1e-6), "{gb} against {ga}");
        let coef = x.n_cols * 4;
        let top = a[..coef].iter().fold(0.0f64, |t, v| t.max(v.abs()));
        let worst = a[..coef]
            .iter()
            .zip(&b[..coef])
            .fold(0.0f64, |t, (p, q)| t.max((p - q).abs()));
        assert!(worst <= 1e-3 * top, "{worst} of {top}");
    }

    /// scikit-learn's stopping rule: `tol` bounds the mean loss's gradient (the objective's,
    /// over the cells), so the default fit stops where the objective's gradient is at most
    /// `1e-4 n`; `max_iter` ends it unconverged, and says so.
    #[test]
    fn the_fit_stops_by_scikit_learns_rule() {
        for (n, p) in [(3_000, 40), (60, 200)] {
            let (x, groups) = data(n, p, 3, 6);
            let fit = logreg(&x, &groups, 3, &LogregParams::default()).unwrap();
            let (_, _, grad) = at_fit(&x, &groups, &fit);
            let largest = grad.iter().fold(0.0f64, |a, g| a.max(g.abs()));
            assert!(fit.converged && fit.iterations <= 100, "{n}x{p}: {fit:?}");
            assert!(largest <= 1e-4 * n as f64, "{n}x{p}: {largest}");
            let tighter = logreg(&x, &groups, 3, &CONVERGED).unwrap();
            assert!(tighter.iterations > fit.iterations, "{n}x{p}");
            let short = LogregParams {
                max_iter: 3,
                ..CONVERGED
            };
            let stopped = logreg(&x, &groups, 3, &short).unwrap();
            assert_eq!(
                (stopped.iterations, stopped.converged),
                (3, false),
                "{n}x{p}"
            );
        }
    }

    #[test]
    fn the_fit_does_not_depend_on_the_thread_count() {
        for (n, p) in [(40_000, 6), (300, 1_000)] {
            let (x, groups) = data(n, p, 3, 2);
            let on = |t: usize| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap()
                    .install(|| logreg(&x, &groups, 3, &LogregParams::default()).unwrap())
            };
            assert_eq!(on(1), on(3), "{n} x {p}");
        }
    }

    #[test]
    fn bad_input_is_named() {
        let (x, groups) = data(30, 4, 3, 3);
        let e =
            |g: &[u32], n: usize, p: LogregParams| logreg(&x, g, n, &p).unwrap_err().to_string();
        assert!(e(&groups, 1, LogregParams::default()).contains("single group"));
        assert!(e(&groups, 4, LogregParams::default()).contains("group 3 has no cells"));
        assert!(e(&groups[..10], 3, LogregParams::default()).contains("10 group labels"));
        let c0 = LogregParams {
            c: 0.0,
            ..LogregParams::default()
        };
        assert!(e(&groups, 3, c0).contains("`C`"));
    }
}
