//! L-BFGS with Armijo backtracking, the minimiser of both forms of the logistic regression
//! (the genes' coordinates and the cells' whitened ones). The vector updates run on every
//! core, each entry on its own, and every dot product over fixed blocks: the same bits on any
//! thread count.

use crate::stats::chunked_sum;
use rayon::prelude::*;

/// Vector entries per block of the dot products.
const BLOCK: usize = 16_384;
/// Corrections L-BFGS keeps.
const MEMORY: usize = 10;

/// A smooth objective to minimise.
pub(super) trait Smooth: Sync {
    /// The value at `theta`, its gradient written into `grad`.
    fn eval(&self, theta: &[f64], grad: &mut [f64]) -> f64;

    /// Applies to `v` an approximate inverse Hessian at the point last evaluated, where the
    /// objective has one (`false`: none, `v` untouched): L-BFGS's first guess of the inverse
    /// Hessian, scaled by the last pair (else that guess is the last pair's scalar).
    fn precondition(&self, _v: &mut [f64]) -> bool {
        false
    }

    /// How far `grad` is from stationary, in the measure `tol` bounds: by default its largest
    /// entry.
    fn stationarity(&self, grad: &[f64]) -> f64 {
        grad.iter().fold(0.0f64, |a, g| a.max(g.abs()))
    }
}

/// `a . b` over fixed blocks (on every core for long vectors).
pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    chunked_sum(a.len(), BLOCK, 1, |r, acc| {
        acc[0] += a[r.clone()]
            .iter()
            .zip(&b[r])
            .map(|(x, y)| x * y)
            .sum::<f64>();
    })[0]
}

/// scipy's L-BFGS-B `ftol` as scikit-learn sets it: the fit has converged when an iteration
/// lowers the objective by at most this much of it.
const FTOL: f64 = 64.0 * f64::EPSILON;

/// How a minimisation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Minimised {
    /// Iterations taken (0 when the start was already stationary).
    pub iterations: usize,
    /// Stopped by `gtol` or by `FTOL` (scipy's status 0), not by `max_iter` or a failed line
    /// search (where scikit-learn warns that lbfgs failed to converge).
    pub converged: bool,
}

/// L-BFGS from `theta` until `f.stationarity` of the gradient is at most `gtol` (or the
/// objective stops decreasing, or `max_iter`); Armijo backtracking from the unit step.
pub(super) fn minimise<F: Smooth>(
    f: &F,
    theta: &mut [f64],
    gtol: f64,
    max_iter: usize,
) -> Minimised {
    let stop = |iterations, converged| Minimised {
        iterations,
        converged,
    };
    let m = theta.len();
    let mut grad = vec![0.0; m];
    let mut value = f.eval(theta, &mut grad);
    let (mut s_hist, mut y_hist, mut rho): (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<f64>) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut next, mut next_grad) = (vec![0.0; m], vec![0.0; m]);
    for iter in 0..max_iter {
        if f.stationarity(&grad) <= gtol {
            return stop(iter, true);
        }
        // The two-loop recursion: d = -H grad.
        let mut d: Vec<f64> = grad.iter().map(|g| -g).collect();
        let mut alpha = vec![0.0; s_hist.len()];
        for h in (0..s_hist.len()).rev() {
            alpha[h] = rho[h] * dot(&s_hist[h], &d);
            d.par_iter_mut()
                .with_min_len(BLOCK)
                .zip(y_hist[h].par_iter())
                .for_each(|(v, y)| *v -= alpha[h] * y);
        }
        let preconditioned = f.precondition(&mut d);
        if preconditioned {
            if let Some(last) = s_hist.len().checked_sub(1) {
                let mut hy = y_hist[last].clone();
                f.precondition(&mut hy);
                let tau = dot(&s_hist[last], &y_hist[last]) / dot(&y_hist[last], &hy);
                d.par_iter_mut().with_min_len(BLOCK).for_each(|v| *v *= tau);
            }
        } else if let Some(last) = s_hist.len().checked_sub(1) {
            let gamma = dot(&s_hist[last], &y_hist[last]) / dot(&y_hist[last], &y_hist[last]);
            d.par_iter_mut()
                .with_min_len(BLOCK)
                .for_each(|v| *v *= gamma);
        }
        for h in 0..s_hist.len() {
            let beta = rho[h] * dot(&y_hist[h], &d);
            d.par_iter_mut()
                .with_min_len(BLOCK)
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
        let mut step = if s_hist.is_empty() && !preconditioned {
            1.0 / grad.iter().map(|g| g * g).sum::<f64>().sqrt().max(1.0)
        } else {
            1.0
        };
        let mut accepted = None;
        for _ in 0..60 {
            next.par_iter_mut()
                .with_min_len(BLOCK)
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
            return stop(iter, false);
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
        let scale = value.abs().max(new_value.abs()).max(1.0);
        value = new_value;
        if decrease <= FTOL * scale {
            return stop(iter + 1, true);
        }
    }
    // The last iteration may have reached `gtol`.
    stop(max_iter, f.stationarity(&grad) <= gtol)
}
