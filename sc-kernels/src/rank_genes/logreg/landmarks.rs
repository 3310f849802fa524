//! A preconditioner for the fit in the genes' coordinates (more cells than the cells' form
//! takes): the cells' form of landmark cells (evenly spaced, at most [`LANDMARKS`]).
//! - In the centred coordinates `(W, b' = b + mean . W)`: the genes' mean direction acts as a
//!   second intercept of enormous scale, the worst of the problem's conditioning.
//! - The landmarks' centred rows span the directions where the cells vary most,
//!   `V = Xc_S^T U L^(-1/2)` (orthonormal, from the eigendecomposition of their Gram matrix);
//!   along each, the Hessian's diagonal is estimated from the landmarks' curvature at the
//!   point last evaluated, scaled to all cells. The rest of the space gets the penalty's.
//!
//! Applying it costs two sparse passes over the landmarks' rows and two dense `m x r x k`
//! products. On 5,590 cells x 32,786 genes: 261 iterations instead of about 2,000.

use crate::csr::CsrMatrix;
use crate::error::Result;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use rayon::prelude::*;
use std::sync::Mutex;

/// Landmark cells at most (on 5,590 cells: 512 took 318 iterations and 25.9 s, 1,024 261 and
/// 23.6 s, 2,048 246 and 32.2 s).
pub(super) const LANDMARKS: usize = 1024;
/// Rows or columns of the factor per task of its products.
const BLOCK: usize = 128;

/// The landmarks' factor and the curvature last recorded.
pub(super) struct Landmarks {
    /// The landmark cells' rows and their transpose (genes x landmarks).
    xs: CsrMatrix<f32>,
    xst: CsrMatrix<f32>,
    /// Which cells are landmarks, in order.
    pub(super) cells: Vec<usize>,
    /// Every gene's mean over all cells.
    mean: Vec<f64>,
    /// `U L^(-1/2)` (`m x r`), and the landmarks' coordinates squared `(U L^(1/2))^2`.
    u_scaled: Mat<f64>,
    z2: Mat<f64>,
    r: usize,
    k: usize,
    n: usize,
    inverse_c: f64,
    /// Inverse curvatures at the point last evaluated: `r x k` along `V`, then the intercepts.
    inverse: Mutex<Option<Vec<f64>>>,
}

impl Landmarks {
    pub(super) fn new(
        x: &CsrMatrix<f32>,
        xt: &CsrMatrix<f32>,
        k: usize,
        inverse_c: f64,
    ) -> Result<Self> {
        let n = x.n_rows;
        let m = n.min(LANDMARKS);
        let cells: Vec<usize> = (0..m).map(|t| t * n / m).collect();
        let mut mask = vec![false; n];
        cells.iter().for_each(|&c| mask[c] = true);
        let xs = x.select_rows(&mask)?;
        let xst = xs.transpose();
        let mean: Vec<f64> = (0..x.n_cols)
            .into_par_iter()
            .map(|g| xt.row(g).1.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64)
            .collect();
        // The landmarks' Gram matrix, centred by every cell's mean.
        let xm: Vec<f64> = (0..m)
            .map(|s| {
                let (g, v) = xs.row(s);
                g.iter()
                    .zip(v)
                    .map(|(&g, &v)| f64::from(v) * mean[g as usize])
                    .sum()
            })
            .collect();
        let mm: f64 = mean.iter().map(|v| v * v).sum();
        let gram = super::cells::gram(&xs, &xst);
        let centred = Mat::from_fn(m, m, |a, b| gram[a * m + b] - xm[a] - xm[b] + mm);
        drop(gram);
        let (vals, vecs) = super::cells::leading_eigen(centred)?;
        let r = vals.len();
        let u_scaled = Mat::from_fn(m, r, |i, j| vecs[(i, j)] / vals[j].sqrt());
        let z2 = Mat::from_fn(m, r, |i, j| vecs[(i, j)] * vecs[(i, j)] * vals[j]);
        Ok(Landmarks {
            xs,
            xst,
            cells,
            mean,
            u_scaled,
            z2,
            r,
            k,
            n,
            inverse_c,
            inverse: Mutex::new(None),
        })
    }

    /// Records the loss's curvature at the point just evaluated: `at`, each landmark's per
    /// score (`m x k`, in [`Landmarks::cells`]' order), and `totals`, each score's over all
    /// cells.
    pub(super) fn record(&self, at: &[f64], totals: &[f64]) {
        let (k, r) = (self.k, self.r);
        let share = self.n as f64 / self.cells.len() as f64;
        let mut inv = vec![0.0; r * k + k];
        inv[..r * k]
            .par_chunks_mut(k)
            .enumerate()
            .for_each(|(j, o)| {
                for (s, c) in at.chunks(k).enumerate() {
                    let z = self.z2[(s, j)];
                    for (ov, &dv) in o.iter_mut().zip(c) {
                        *ov += z * dv;
                    }
                }
                for ov in o.iter_mut() {
                    *ov = 1.0 / (share * *ov + self.inverse_c);
                }
            });
        for (l, &h) in totals.iter().enumerate() {
            inv[r * k + l] = 1.0 / h.max(f64::MIN_POSITIVE.sqrt());
        }
        *self.inverse.lock().unwrap() = Some(inv);
    }

    /// `v = [W (genes x k), b (k)]` times the approximate inverse Hessian.
    pub(super) fn apply(&self, v: &mut [f64]) -> bool {
        let guard = self.inverse.lock().unwrap();
        let Some(inv) = guard.as_ref() else {
            return false;
        };
        let (k, r, m) = (self.k, self.r, self.cells.len());
        let p = self.mean.len();
        let (q, b) = v.split_at_mut(p * k);
        // In the centred coordinates (w, b' = b + mean . w): the gradient's w part less the
        // mean times the intercepts'.
        q.par_chunks_mut(k).enumerate().for_each(|(g, qg)| {
            for (qv, &bv) in qg.iter_mut().zip(b.iter()) {
                *qv -= self.mean[g] * bv;
            }
        });
        // Along V: A = Xc_S Q (m x k), Q_P = (U L^(-1/2))^T A.
        let mut mq = vec![0.0; k];
        for (g, qg) in q.chunks(k).enumerate() {
            for (o, &x) in mq.iter_mut().zip(qg) {
                *o += self.mean[g] * x;
            }
        }
        let a: Vec<f64> = (0..m)
            .into_par_iter()
            .flat_map_iter(|s| {
                let mut o = vec![0.0; k];
                let (genes, vals) = self.xs.row(s);
                for (&g, &x) in genes.iter().zip(vals) {
                    for (ov, &qv) in o.iter_mut().zip(&q[g as usize * k..(g as usize + 1) * k]) {
                        *ov += f64::from(x) * qv;
                    }
                }
                o.iter_mut().zip(&mq).for_each(|(ov, &c)| *ov -= c);
                o
            })
            .collect();
        let gamma = 1.0 / self.inverse_c;
        // Y = Q_P (h^-1 - gamma), T = U L^(-1/2) Y: blocks of the factor's columns, then of its
        // rows, each by faer on one core (fixed blocks: the same bits on any thread count).
        let am = MatRef::from_row_major_slice(&a, m, k);
        let u = self.u_scaled.as_ref();
        let mut y = by_row_blocks(r, k, am, |first, rows| u.subcols(first, rows).transpose());
        y.par_chunks_mut(k).enumerate().for_each(|(j, yj)| {
            for (l, yv) in yj.iter_mut().enumerate() {
                *yv *= inv[j * k + l] - gamma;
            }
        });
        let ym = MatRef::from_row_major_slice(&y, r, k);
        let t = by_row_blocks(m, k, ym, |first, rows| u.subrows(first, rows));
        let mut tsum = vec![0.0; k];
        for ts in t.chunks(k) {
            tsum.iter_mut().zip(ts).for_each(|(o, &x)| *o += x);
        }
        // Q' = gamma Q + Xs^T T - mean (1^T T).
        q.par_chunks_mut(k).enumerate().for_each(|(g, qg)| {
            let (cells, vals) = self.xst.row(g);
            let mut o = vec![0.0; k];
            for (&s, &x) in cells.iter().zip(vals) {
                for (ov, &tv) in o.iter_mut().zip(&t[s as usize * k..(s as usize + 1) * k]) {
                    *ov += f64::from(x) * tv;
                }
            }
            for ((qv, ov), &ts) in qg.iter_mut().zip(o).zip(&tsum) {
                *qv = gamma * *qv + ov - self.mean[g] * ts;
            }
        });
        for (bv, &h) in b.iter_mut().zip(&inv[r * k..]) {
            *bv *= h;
        }
        // Back: b = b' - mean . w.
        let mut mw = vec![0.0; k];
        for (g, qg) in q.chunks(k).enumerate() {
            for (o, &x) in mw.iter_mut().zip(qg) {
                *o += self.mean[g] * x;
            }
        }
        b.iter_mut().zip(&mw).for_each(|(bv, &m)| *bv -= m);
        true
    }
}

/// The row-major `rows x k` product `L rhs`, where `lhs(first, count)` is `L`'s rows
/// `first .. first + count`: fixed blocks of [`BLOCK`] rows in parallel, each by faer on one
/// core (the same bits on any thread count).
fn by_row_blocks<'a>(
    rows: usize,
    k: usize,
    rhs: MatRef<'_, f64>,
    lhs: impl Fn(usize, usize) -> MatRef<'a, f64> + Sync,
) -> Vec<f64> {
    let mut out = vec![0.0; rows * k];
    out.par_chunks_mut(BLOCK * k)
        .enumerate()
        .for_each(|(blk, o)| {
            let count = o.len() / k;
            matmul(
                MatMut::from_row_major_slice_mut(o, count, k),
                Accum::Replace,
                lhs(blk * BLOCK, count),
                rhs,
                1.0,
                Par::Seq,
            );
        });
    out
}
