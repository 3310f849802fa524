//! `rank_genes_groups(method='logreg')`: the coefficients of an L2-penalised logistic
//! regression of the cells' groups on their genes, as scanpy fits it with scikit-learn's
//! `LogisticRegression()` (C = 1, an unpenalised intercept): for two groups the binary model
//! (one coefficient per gene, for the second group), for more the multinomial one (one per
//! gene and group). The objective, `sum_i loss_i + |W|^2 / (2 C)`, is minimised by L-BFGS
//! from zero until no entry of its gradient exceeds `tol` (or it stops decreasing in f64).
//! scikit-learn's `lbfgs` stops when the gradient of the mean loss is under 1e-4, where its
//! coefficients are still a few percent off the minimum (and, on float32 data, fitted in
//! float32); this goes on to it in f64. On the real datasets the coefficients are within 5e-4
//! of the largest of scikit-learn's run to convergence on float64 data; where they differ most
//! (scvi), this fit has the lower objective and the smaller gradient.
//!
//! The cells' scores and the genes' gradients are computed on every core, each sum in an order
//! of its own (a gene's cells in order, fixed blocks of cells): the fit does not depend on the
//! thread count.

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::stats::chunked_sum;
use rayon::prelude::*;

/// scikit-learn's parameters that scanpy passes through (`**kwds`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogregParams {
    /// Inverse of the penalty's strength.
    pub c: f64,
    /// The gradient's largest entry at which the fit stops.
    pub tol: f64,
    pub max_iter: usize,
}

impl Default for LogregParams {
    fn default() -> Self {
        LogregParams {
            c: 1.0,
            tol: 1e-6,
            max_iter: 10_000,
        }
    }
}

/// The fitted model.
#[derive(Debug, Clone, PartialEq)]
pub struct LogregFit {
    /// `rows x n_genes`: one row (binary, for group 1) or one per group.
    pub coef: Vec<f64>,
    pub rows: usize,
    pub intercept: Vec<f64>,
    pub iterations: usize,
}

impl LogregFit {
    /// Row `r` of the coefficients.
    pub fn row(&self, r: usize) -> &[f64] {
        let p = self.coef.len() / self.rows;
        &self.coef[r * p..(r + 1) * p]
    }
}

/// Cells (or vector entries) per block of the sums.
const ROWS: usize = 16_384;
/// Corrections L-BFGS keeps.
const MEMORY: usize = 10;

/// Fits the model of `groups` (one per cell, `< n_groups`, each group with a cell) on `x`.
pub fn logreg(
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
    params: &LogregParams,
) -> Result<LogregFit> {
    let (n, p) = (x.n_rows, x.n_cols);
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
    let k = if n_groups == 2 { 1 } else { n_groups };
    let objective = Objective::new(x, groups, k, 1.0 / params.c);
    let mut theta = vec![0.0; p * k + k];
    let iterations = minimise(&objective, &mut theta, params.tol, params.max_iter);
    // Gene-major during the fit (a cell's genes touch contiguous groups); row-major out.
    let coef = (0..k)
        .flat_map(|r| (0..p).map(move |j| (r, j)))
        .map(|(r, j)| theta[j * k + r])
        .collect();
    Ok(LogregFit {
        coef,
        rows: k,
        intercept: theta[p * k..].to_vec(),
        iterations,
    })
}

/// `sum_i loss_i + |W|^2 / (2 C)` over `theta = [W (genes x k), b (k)]`.
struct Objective<'a> {
    x: &'a CsrMatrix<f32>,
    /// X's transpose: each gene's cells in order, for the gradient gene by gene.
    xt: CsrMatrix<f32>,
    groups: &'a [u32],
    /// Coefficient rows: 1 (binary) or the groups.
    k: usize,
    inverse_c: f64,
}

impl<'a> Objective<'a> {
    fn new(x: &'a CsrMatrix<f32>, groups: &'a [u32], k: usize, inverse_c: f64) -> Self {
        Objective {
            x,
            xt: x.transpose(),
            groups,
            k,
            inverse_c,
        }
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

/// `a . b` over fixed blocks (on every core for the long vectors of many genes and groups).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    chunked_sum(a.len(), ROWS, 1, |r, acc| {
        acc[0] += a[r.clone()]
            .iter()
            .zip(&b[r])
            .map(|(x, y)| x * y)
            .sum::<f64>();
    })[0]
}

/// L-BFGS from `theta` until the gradient's largest entry is at most `gtol` (or the objective
/// stops decreasing, or `max_iter`); Armijo backtracking from the unit step. Returns the
/// iterations taken. The vector updates run on every core (each entry on its own: the same
/// bits on any thread count).
fn minimise(f: &Objective<'_>, theta: &mut [f64], gtol: f64, max_iter: usize) -> usize {
    let m = theta.len();
    let mut grad = vec![0.0; m];
    let mut value = f.eval(theta, &mut grad);
    let (mut s_hist, mut y_hist, mut rho): (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut next, mut next_grad) = (vec![0.0; m], vec![0.0; m]);
    for iter in 0..max_iter {
        if grad.iter().fold(0.0f64, |a, g| a.max(g.abs())) <= gtol {
            return iter;
        }
        // The two-loop recursion: d = -H grad.
        let mut d: Vec<f64> = grad.iter().map(|g| -g).collect();
        let mut alpha = vec![0.0; s_hist.len()];
        for h in (0..s_hist.len()).rev() {
            alpha[h] = rho[h] * dot(&s_hist[h], &d);
            d.par_iter_mut()
                .zip(y_hist[h].par_iter())
                .for_each(|(v, y)| *v -= alpha[h] * y);
        }
        if let Some(last) = s_hist.len().checked_sub(1) {
            let gamma = dot(&s_hist[last], &y_hist[last]) / dot(&y_hist[last], &y_hist[last]);
            d.par_iter_mut().for_each(|v| *v *= gamma);
        }
        for h in 0..s_hist.len() {
            let beta = rho[h] * dot(&y_hist[h], &d);
            d.par_iter_mut()
                .zip(s_hist[h].par_iter())
                .for_each(|(v, s)| *v += (alpha[h] - beta) * s);
        }
        let mut slope = dot(&grad, &d);
        if slope >= 0.0 {
            // Not a descent direction: start the memory again along the gradient.
            d = grad.iter().map(|g| -g).collect();
            slope = dot(&grad, &d);
            s_hist.clear();
            y_hist.clear();
            rho.clear();
        }
        let mut step = if s_hist.is_empty() {
            1.0 / grad.iter().map(|g| g * g).sum::<f64>().sqrt().max(1.0)
        } else {
            1.0
        };
        let mut accepted = None;
        for _ in 0..60 {
            next.par_iter_mut()
                .zip(theta.par_iter().zip(d.par_iter()))
                .for_each(|(t, (&x, &dv))| *t = x + step * dv);
            let v = f.eval(&next, &mut next_grad);
            if v <= value + 1e-4 * step * slope {
                accepted = Some(v);
                break;
            }
            step *= 0.5;
        }
        let Some(new_value) = accepted else {
            return iter;
        };
        let s: Vec<f64> = next.iter().zip(theta.iter()).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = next_grad.iter().zip(&grad).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-12 * dot(&y, &y).sqrt() * dot(&s, &s).sqrt() {
            if s_hist.len() == MEMORY {
                s_hist.remove(0);
                y_hist.remove(0);
                rho.remove(0);
            }
            s_hist.push(s);
            y_hist.push(y);
            rho.push(1.0 / sy);
        }
        theta.copy_from_slice(&next);
        grad.copy_from_slice(&next_grad);
        let decrease = value - new_value;
        value = new_value;
        if decrease <= 1e-15 * value.abs().max(1.0) {
            return iter + 1;
        }
    }
    max_iter
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

    /// The gradient is zero at the fit: what the minimum means, checked by the objective's own
    /// finite differences on a few coordinates and by its gradient.
    #[test]
    fn the_fit_is_the_minimum_of_the_penalised_loss() {
        for k in [2, 4] {
            let (x, groups) = data(300, 12, k, 1);
            let fit = logreg(&x, &groups, k, &LogregParams::default()).unwrap();
            assert_eq!(fit.rows, if k == 2 { 1 } else { k });
            let f = Objective::new(&x, &groups, fit.rows, 1.0);
            let p = x.n_cols;
            let mut theta = vec![0.0; p * fit.rows + fit.rows];
            for r in 0..fit.rows {
                for j in 0..p {
                    theta[j * fit.rows + r] = fit.row(r)[j];
                }
            }
            theta[p * fit.rows..].copy_from_slice(&fit.intercept);
            let mut grad = vec![0.0; theta.len()];
            let at = f.eval(&theta, &mut grad);
            assert!(grad.iter().all(|g| g.abs() <= 1e-6), "k {k}: {grad:?}");
            // Any small move raises the objective.
            for c in [0, 5, theta.len() - 1] {
                for h in [1e-3, -1e-3] {
                    let mut moved = theta.clone();
                    moved[c] += h;
                    assert!(f.eval(&moved, &mut grad) > at, "k {k} coordinate {c}");
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

    #[test]
    fn the_fit_does_not_depend_on_the_thread_count() {
        let (x, groups) = data(40_000, 6, 3, 2);
        let on = |t: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
                .install(|| logreg(&x, &groups, 3, &LogregParams::default()).unwrap())
        };
        assert_eq!(on(1), on(3));
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
