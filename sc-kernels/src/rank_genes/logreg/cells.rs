//! The logistic regression in the cells' own coordinates, for fewer cells than genes (scanpy's
//! usual case for markers: hundreds or a few thousand cells, every gene).
//!
//! The minimum's coefficients lie in the span of the centred cells: the loss's gradient is a
//! sum of cells, the intercept's being zero makes it one of centred cells, and the penalty only
//! shrinks what lies outside. With the centred cells' Gram matrix `Xc Xc^T = U L U^T`, the
//! centred cells are `Xc = Z V^T` with `Z = U L^(1/2)` (`n x r`, orthogonal columns) and `V`
//! (`genes x r`) orthonormal, so `W = V C` turns the fit into one of `r <= n` features `Z`, the
//! same loss and the same `|W| = |C|`, with an intercept orthogonal to them (`Z`'s columns sum
//! to zero). `Z`'s columns being orthogonal, the Hessian's diagonal is a good inverse for
//! L-BFGS to start from: a hundred or two dense `n x r` iterations where the genes' coordinates
//! needed thousands of sparse ones. `W = Xc^T U L^(-1/2) C` gives the coefficients back; the
//! caller then checks them against the genes' own gradient.

use super::lbfgs::{minimise, Minimised, Smooth};
use super::{curvature, residual};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::stats::chunked_sum;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use rayon::prelude::*;
use std::sync::Mutex;

/// Most cells for this form: its Gram matrix's eigendecomposition costs `O(n^3)` on one core (for
/// the same bits on any thread count). Above it, the genes' coordinates with landmark cells
/// (at 5,590 cells this form took 61 s, those 24 s).
const MAX_CELLS: usize = 1024;
/// Eigenvalues below this share of the largest are directions the cells do not span (the
/// centring's, rounding's).
const RANK_CUT: f64 = 1e-12;
/// Cells per block of the intercepts' sums.
const ROWS: usize = 16_384;
/// Cells per task of the scores.
const CELLS: usize = 128;
/// Feature columns per task of the gradient.
const COLUMNS: usize = 64;

/// Whether the fit runs in the cells' coordinates: fewer cells than genes, few enough to
/// decompose their Gram matrix.
pub(super) fn applies(n: usize, p: usize) -> bool {
    n <= p && n <= MAX_CELLS
}

/// The fit of `k` coefficient rows (1: binary) as the genes' coordinates hold it
/// (`[W (genes x k), b (k)]`), and how its minimisation ended: where the whitened gradient's
/// norm is at most `gtol`, or after `max_iter` iterations.
pub(super) fn fit(
    x: &CsrMatrix<f32>,
    xt: &CsrMatrix<f32>,
    groups: &[u32],
    k: usize,
    inverse_c: f64,
    gtol: f64,
    max_iter: usize,
) -> Result<(Vec<f64>, Minimised)> {
    let (n, p) = (x.n_rows, x.n_cols);
    let (lambda, u) = centred_gram_eigen(x, xt)?;
    let r = lambda.len();
    let mut z = vec![0.0; n * r];
    z.par_chunks_mut(r).enumerate().for_each(|(i, row)| {
        for (j, v) in row.iter_mut().enumerate() {
            *v = u[(i, j)] * lambda[j].sqrt();
        }
    });
    let objective = Whitened {
        z2: z.iter().map(|v| v * v).collect(),
        z,
        r,
        k,
        groups,
        inverse_c,
        inverse_curvature: Mutex::new(None),
    };
    let mut theta = vec![0.0; r * k + k];
    let ended = minimise(&objective, &mut theta, gtol, max_iter);
    // Back to the genes: beta = U L^(-1/2) C per cell, W = X^T beta - mean (1^T beta).
    let (c, b) = theta.split_at(r * k);
    let mut beta = vec![0.0; n * k];
    beta.par_chunks_mut(k).enumerate().for_each(|(i, bi)| {
        for j in 0..r {
            let f = u[(i, j)] / lambda[j].sqrt();
            for (o, &cv) in bi.iter_mut().zip(&c[j * k..(j + 1) * k]) {
                *o += f * cv;
            }
        }
    });
    let beta_sum = chunked_sum(n, ROWS, k, |rows, acc| {
        for i in rows {
            crate::stats::add_into(acc, &beta[i * k..(i + 1) * k]);
        }
    });
    let mut out = vec![0.0; p * k + k];
    let (w, intercept) = out.split_at_mut(p * k);
    let means: Vec<f64> = w
        .par_chunks_mut(k)
        .enumerate()
        .map(|(g, wg)| {
            let (cells, vals) = xt.row(g);
            let mut total = 0.0;
            for (&i, &v) in cells.iter().zip(vals) {
                let (i, v) = (i as usize, f64::from(v));
                total += v;
                for (o, &bv) in wg.iter_mut().zip(&beta[i * k..(i + 1) * k]) {
                    *o += v * bv;
                }
            }
            let mean = total / n as f64;
            for (o, &s) in wg.iter_mut().zip(&beta_sum) {
                *o -= mean * s;
            }
            mean
        })
        .collect();
    // Scores were `Xc W + b'`; with the raw cells, b = b' - mean . W.
    let shift = chunked_sum(p, ROWS, k, |genes, acc| {
        for g in genes {
            for (a, &wv) in acc.iter_mut().zip(&w[g * k..(g + 1) * k]) {
                *a += means[g] * wv;
            }
        }
    });
    for ((o, &bv), s) in intercept.iter_mut().zip(b).zip(shift) {
        *o = bv - s;
    }
    Ok((out, ended))
}

/// The eigenvalues of the centred cells' Gram matrix `H X X^T H` above [`RANK_CUT`] of the
/// largest (descending) and their eigenvectors (columns).
fn centred_gram_eigen(x: &CsrMatrix<f32>, xt: &CsrMatrix<f32>) -> Result<(Vec<f64>, Mat<f64>)> {
    let n = x.n_rows;
    let gram = gram(x, xt);
    let row_means: Vec<f64> = gram
        .par_chunks(n)
        .map(|row| row.iter().sum::<f64>() / n as f64)
        .collect();
    let mean = row_means.iter().sum::<f64>() / n as f64;
    let centred = Mat::from_fn(n, n, |a, b| {
        gram[a * n + b] - row_means[a] - row_means[b] + mean
    });
    drop(gram);
    leading_eigen(centred)
}

/// The Gram matrix `a a^T` of `a`'s rows (`at`: its transpose), row-major. Row `i` sums over
/// its genes in gene order, each gene's products with the other rows: exactly symmetric.
pub(super) fn gram(a: &CsrMatrix<f32>, at: &CsrMatrix<f32>) -> Vec<f64> {
    let n = a.n_rows;
    let mut gram = vec![0.0; n * n];
    gram.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        let (genes, vals) = a.row(i);
        for (&g, &v) in genes.iter().zip(vals) {
            let (others, w) = at.row(g as usize);
            for (&o, &wv) in others.iter().zip(w) {
                row[o as usize] += f64::from(v) * f64::from(wv);
            }
        }
    });
    gram
}

/// A symmetric matrix's eigenvalues above [`RANK_CUT`] of the largest (descending) and their
/// eigenvectors (columns), decomposed on one core.
pub(super) fn leading_eigen(m: Mat<f64>) -> Result<(Vec<f64>, Mat<f64>)> {
    let n = m.nrows();
    let (vals, vecs) = crate::pca::faer_top_eigen_seq(m, n)?;
    let top = vals.first().copied().unwrap_or(0.0);
    let r = vals.iter().take_while(|&&l| l > RANK_CUT * top).count();
    Ok((vals[..r].to_vec(), vecs.subcols(0, r).to_owned()))
}

/// `sum_i loss_i + |C|^2 / (2 C)` over `theta = [C (r x k), b' (k)]`.
struct Whitened<'a> {
    /// `n x r`, row-major: `U L^(1/2)`.
    z: Vec<f64>,
    /// `z` squared, for the Hessian's diagonal.
    z2: Vec<f64>,
    r: usize,
    k: usize,
    groups: &'a [u32],
    inverse_c: f64,
    /// The inverse of the Hessian's diagonal at the point last evaluated (the accepted one
    /// when L-BFGS asks for it).
    inverse_curvature: Mutex<Option<Vec<f64>>>,
}

impl Smooth for Whitened<'_> {
    /// Dense products, `Z C` (blocks of cells), `Z^T R` and `(Z*Z)^T D` (blocks of features),
    /// each block by faer on one core: fixed blocks, so the same bits on any thread count.
    fn eval(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        let (r, k, n) = (self.r, self.k, self.groups.len());
        let (c, b) = theta.split_at(r * k);
        let cm = MatRef::from_row_major_slice(c, r, k);
        // Each cell's residuals (d loss / d score) and the loss's curvature per score.
        let mut resid = vec![0.0; n * k];
        let mut curv = vec![0.0; n * k];
        let losses: Vec<f64> = resid
            .par_chunks_mut(CELLS * k)
            .zip(curv.par_chunks_mut(CELLS * k))
            .enumerate()
            .flat_map_iter(|(blk, (s, d))| {
                let first = blk * CELLS;
                let rows = s.len() / k;
                for si in s.chunks_mut(k) {
                    si.copy_from_slice(b);
                }
                let z =
                    MatRef::from_row_major_slice(&self.z[first * r..(first + rows) * r], rows, r);
                let sm = MatMut::from_row_major_slice_mut(s, rows, k);
                matmul(sm, Accum::Add, z, cm, 1.0, Par::Seq);
                let losses: Vec<f64> = s
                    .chunks_mut(k)
                    .zip(d.chunks_mut(k))
                    .enumerate()
                    .map(|(i, (si, di))| {
                        let y = self.groups[first + i] as usize;
                        let loss = residual(si, y);
                        di.copy_from_slice(si);
                        curvature(di, y);
                        loss
                    })
                    .collect();
                losses
            })
            .collect();
        // Each feature's gradient and curvature.
        let (gc, gb) = grad.split_at_mut(r * k);
        let mut hc = vec![0.0; r * k];
        let (zm, z2m) = (
            MatRef::from_row_major_slice(&self.z, n, r),
            MatRef::from_row_major_slice(&self.z2, n, r),
        );
        let (rm, dm) = (
            MatRef::from_row_major_slice(&resid, n, k),
            MatRef::from_row_major_slice(&curv, n, k),
        );
        gc.par_chunks_mut(COLUMNS * k)
            .zip(hc.par_chunks_mut(COLUMNS * k))
            .enumerate()
            .for_each(|(blk, (g, h))| {
                let first = blk * COLUMNS;
                let width = g.len() / k;
                let (zt, z2t) = (
                    zm.subcols(first, width).transpose(),
                    z2m.subcols(first, width).transpose(),
                );
                let gm = MatMut::from_row_major_slice_mut(g, width, k);
                matmul(gm, Accum::Replace, zt, rm, 1.0, Par::Seq);
                let hm = MatMut::from_row_major_slice_mut(h, width, k);
                matmul(hm, Accum::Replace, z2t, dm, 1.0, Par::Seq);
                let cj = &c[first * k..(first + width) * k];
                for ((gv, hv), &cv) in g.iter_mut().zip(h.iter_mut()).zip(cj) {
                    *gv += self.inverse_c * cv;
                    *hv = 1.0 / (*hv + self.inverse_c);
                }
            });
        let sums = chunked_sum(n, ROWS, 2 * k + 1, |rows, acc| {
            for i in rows {
                crate::stats::add_into(&mut acc[..k], &resid[i * k..(i + 1) * k]);
                crate::stats::add_into(&mut acc[k..2 * k], &curv[i * k..(i + 1) * k]);
                acc[2 * k] += losses[i];
            }
        });
        gb.copy_from_slice(&sums[..k]);
        // The intercepts' curvature (no penalty): tiny only where every cell is certain.
        hc.extend(
            sums[k..2 * k]
                .iter()
                .map(|h| 1.0 / h.max(f64::MIN_POSITIVE.sqrt())),
        );
        *self.inverse_curvature.lock().unwrap() = Some(hc);
        sums[2 * k] + 0.5 * self.inverse_c * c.iter().map(|v| v * v).sum::<f64>()
    }

    /// Times the inverse of the Hessian's diagonal.
    fn precondition(&self, v: &mut [f64]) -> bool {
        match &*self.inverse_curvature.lock().unwrap() {
            Some(h) => {
                v.iter_mut().zip(h).for_each(|(x, h)| *x *= h);
                true
            }
            None => false,
        }
    }

    /// The norm of the coefficients' gradient (which bounds every gene's entry, `V` being
    /// orthonormal) or the intercepts' largest entry.
    fn stationarity(&self, grad: &[f64]) -> f64 {
        let (gc, gb) = grad.split_at(self.r * self.k);
        let norm = gc.iter().map(|v| v * v).sum::<f64>().sqrt();
        gb.iter().fold(norm, |m, g| m.max(g.abs()))
    }
}
