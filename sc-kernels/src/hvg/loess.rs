//! Local quadratic regression (loess) of one predictor, as the netlib `dloess` code that
//! `skmisc.loess` wraps computes it with its defaults (`surface="interpolate"`, family gaussian,
//! `cell=0.2`): a k-d tree whose cells hold at most `floor(n * span * cell)` points, an exact
//! local fit (value and slope) at each vertex, and cubic Hermite interpolation between vertices.
//! Reimplemented from the published algorithm (Cleveland & Grosse 1991) and checked against
//! `skmisc.loess` values (see the tests).
//!
//! Local fit at `q`: the `nf = floor(n * span)` nearest points, tricube weights
//! `(1 - (d / d_max)^3)^3` with `d_max` the `nf`-th smallest distance, weighted least squares on
//! `1, (x - q), (x - q)^2` with column equilibration, a QR factorization and a pseudo-inverse
//! (singular values below `100 * eps * sigma_max` dropped).

use crate::error::{KernelError, Result};

/// The fitted values of `y ~ x` at the points `x`.
pub fn loess_fitted(x: &[f64], y: &[f64], span: f64) -> Result<Vec<f64>> {
    let n = x.len();
    if y.len() != n {
        return Err(KernelError::Shape(format!(
            "loess: {} x values, {} y values",
            n,
            y.len()
        )));
    }
    if !(span > 0.0 && span.is_finite()) {
        return Err(KernelError::param(
            "span",
            format!("must be positive, got {span}"),
        ));
    }
    if x.iter().chain(y).any(|v| !v.is_finite()) {
        return Err(KernelError::Unsupported("loess: non-finite input".into()));
    }
    let nf = ((n as f64 * span).floor() as usize).min(n);
    if nf < 4 {
        return Err(KernelError::Unsupported(format!(
            "loess: span {span} over {n} points leaves {nf} points per local fit, at least 4 are needed"
        )));
    }
    let tree = KdTree::build(x, span);
    let mut vval = Vec::with_capacity(tree.vertices.len());
    let mut scratch = Vec::with_capacity(n);
    for &q in &tree.vertices {
        vval.push(local_fit(x, y, q, nf, &mut scratch)?);
    }
    Ok(x.iter().map(|&z| tree.eval(z, &vval)).collect())
}

/// A 1-d k-d tree: cells are intervals between vertices.
struct KdTree {
    vertices: Vec<f64>,
    /// Per cell: split value (None for a leaf), children, and its two vertex indices.
    cells: Vec<Cell>,
}

struct Cell {
    split: Option<f64>,
    lo: usize,
    hi: usize,
    v_lo: usize,
    v_hi: usize,
}

impl KdTree {
    fn build(x: &[f64], span: f64) -> Self {
        let n = x.len();
        let alpha = x.iter().copied().fold(f64::INFINITY, f64::min);
        let beta = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mu = 0.005 * (beta - alpha).max(1e-10 * alpha.abs().max(beta.abs()) + 1e-30);
        let vertices = vec![alpha - mu, beta + mu];
        // Cell capacity: floor(n * fcell) with fcell = span * cell, cell = 0.2.
        let fc = (n as f64 * (span * 0.2)).floor() as usize;
        let nvmax = n.max(200);
        let ncmax = nvmax;
        let mut sorted: Vec<f64> = x.to_vec();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut tree = KdTree {
            vertices,
            cells: vec![Cell {
                split: None,
                lo: 0,
                hi: 0,
                v_lo: 0,
                v_hi: 1,
            }],
        };
        // Point ranges of the cells (0-based, inclusive) in `sorted`.
        let mut ranges = vec![(0usize, n - 1)];
        let mut p = 0;
        while p < tree.cells.len() {
            let (l, u) = ranges[p];
            let (vl, vh) = (
                tree.vertices[tree.cells[p].v_lo],
                tree.vertices[tree.cells[p].v_hi],
            );
            let diam = vh - vl;
            let mut leaf = u + 1 - l <= fc
                || diam <= 0.0
                || ncmax < tree.cells.len() + 2
                || (nvmax as f64) < tree.vertices.len() as f64 + 1.0;
            let mut m = 0;
            if !leaf {
                // Median position (1-based (l+u)/2 in the original), moved off ties.
                let (l1, u1) = (l + 1, u + 1);
                let mut m1 = (l1 + u1) / 2;
                let mut offset: isize = 0;
                loop {
                    let mo = m1 as isize + offset;
                    if mo >= u1 as isize || mo < l1 as isize {
                        break;
                    }
                    let mo = mo as usize;
                    if sorted[mo - 1] == sorted[mo] {
                        offset = -offset;
                        if offset >= 0 {
                            offset += 1;
                        }
                    } else {
                        m1 = mo;
                        break;
                    }
                }
                m = m1 - 1;
                let s = sorted[m];
                leaf = vl == s || vh == s;
            }
            if !leaf {
                let s = sorted[m];
                tree.vertices.push(s);
                let nv = tree.vertices.len() - 1;
                let (v_lo, v_hi) = (tree.cells[p].v_lo, tree.cells[p].v_hi);
                let lo = tree.cells.len();
                tree.cells.push(Cell {
                    split: None,
                    lo: 0,
                    hi: 0,
                    v_lo,
                    v_hi: nv,
                });
                ranges.push((l, m));
                tree.cells.push(Cell {
                    split: None,
                    lo: 0,
                    hi: 0,
                    v_lo: nv,
                    v_hi,
                });
                ranges.push((m + 1, u));
                let c = &mut tree.cells[p];
                c.split = Some(s);
                c.lo = lo;
                c.hi = lo + 1;
            }
            p += 1;
        }
        tree
    }

    fn eval(&self, z: f64, vval: &[(f64, f64)]) -> f64 {
        let mut j = 0;
        while let Some(s) = self.cells[j].split {
            j = if z <= s {
                self.cells[j].lo
            } else {
                self.cells[j].hi
            };
        }
        let c = &self.cells[j];
        let (v0, v1) = (self.vertices[c.v_lo], self.vertices[c.v_hi]);
        let (g0, d0) = vval[c.v_lo];
        let (g1, d1) = vval[c.v_hi];
        let h = (z - v0) / (v1 - v0);
        let phi0 = (1.0 - h).powi(2) * (1.0 + 2.0 * h);
        let phi1 = h.powi(2) * (3.0 - 2.0 * h);
        let psi0 = h * (1.0 - h).powi(2);
        let psi1 = h.powi(2) * (h - 1.0);
        phi0 * g0 + phi1 * g1 + (psi0 * d0 + psi1 * d1) * (v1 - v0)
    }
}

/// Value and slope of the local quadratic fit at `q`.
fn local_fit(
    x: &[f64],
    y: &[f64],
    q: f64,
    nf: usize,
    scratch: &mut Vec<(f64, usize)>,
) -> Result<(f64, f64)> {
    scratch.clear();
    scratch.extend(
        x.iter()
            .enumerate()
            .map(|(i, &xi)| ((xi - q) * (xi - q), i)),
    );
    scratch.select_nth_unstable_by(nf - 1, |a, b| a.0.partial_cmp(&b.0).unwrap());
    let rho = scratch[nf - 1].0;
    if !(rho > 0.0) {
        return Err(KernelError::Unsupported(
            "loess: span too small (all neighbours at distance zero)".into(),
        ));
    }
    let near = &scratch[..nf];
    // Design matrix b (nf x 3) and response eta, with sqrt-of-tricube weights.
    let mut b = vec![[0.0f64; 3]; nf];
    let mut eta = vec![0.0f64; nf];
    for (r, &(d, i)) in near.iter().enumerate() {
        let w = (d / rho).sqrt();
        let w = ((1.0 - w.powi(3)).powi(3)).sqrt();
        let dx = x[i] - q;
        b[r] = [w, w * dx, w * dx * dx];
        eta[r] = w * y[i];
    }
    if b.iter().all(|row| row[0] == 0.0) {
        return Err(KernelError::Unsupported(
            "loess: all local weights are zero".into(),
        ));
    }
    // Equilibrate columns.
    let mut colnorm = [1.0f64; 3];
    for (j, cn) in colnorm.iter_mut().enumerate() {
        let s = b.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
        if s > 0.0 {
            b.iter_mut().for_each(|r| r[j] /= s);
            *cn = s;
        }
    }
    // Householder QR of b, applying the reflections to eta.
    for k in 0..3 {
        let norm = b[k..].iter().map(|r| r[k] * r[k]).sum::<f64>().sqrt();
        if norm == 0.0 {
            continue;
        }
        let alpha = if b[k][k] > 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = b[k..].iter().map(|r| r[k]).collect();
        v[0] -= alpha;
        let vnorm2: f64 = v.iter().map(|a| a * a).sum();
        if vnorm2 == 0.0 {
            continue;
        }
        for j in k..3 {
            let dot: f64 = v.iter().zip(&b[k..]).map(|(a, r)| a * r[j]).sum();
            let f = 2.0 * dot / vnorm2;
            for (a, r) in v.iter().zip(b[k..].iter_mut()) {
                r[j] -= f * a;
            }
        }
        let dot: f64 = v.iter().zip(&eta[k..]).map(|(a, e)| a * e).sum();
        let f = 2.0 * dot / vnorm2;
        for (a, e) in v.iter().zip(eta[k..].iter_mut()) {
            *e -= f * a;
        }
    }
    let mut r = [[0.0f64; 3]; 3];
    for i in 0..3 {
        for j in i..3 {
            r[i][j] = b[i][j];
        }
    }
    let rhs = [eta[0], eta[1], eta[2]];
    let coef = pinv_solve3(r, rhs);
    Ok((coef[0] / colnorm[0], coef[1] / colnorm[1]))
}

/// Solves `r c = rhs` with the pseudo-inverse of the 3x3 matrix `r` (one-sided Jacobi SVD),
/// dropping singular values at or below `100 * eps * sigma_max`.
fn pinv_solve3(r: [[f64; 3]; 3], rhs: [f64; 3]) -> [f64; 3] {
    // Columns of A = r, and V accumulated.
    let mut a = [[0.0f64; 3]; 3]; // a[col][row]
    for i in 0..3 {
        for j in 0..3 {
            a[j][i] = r[i][j];
        }
    }
    let mut v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]; // v[col][row]
    for _sweep in 0..60 {
        let mut off = 0.0f64;
        for p in 0..3 {
            for q in p + 1..3 {
                let alpha: f64 = a[p].iter().map(|x| x * x).sum();
                let beta: f64 = a[q].iter().map(|x| x * x).sum();
                let gamma: f64 = a[p].iter().zip(&a[q]).map(|(x, y)| x * y).sum();
                if gamma == 0.0 {
                    continue;
                }
                off = off.max(gamma.abs() / (alpha * beta).sqrt());
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let t = if zeta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                for k in 0..3 {
                    let (x, y) = (a[p][k], a[q][k]);
                    a[p][k] = c * x - s * y;
                    a[q][k] = s * x + c * y;
                    let (x, y) = (v[p][k], v[q][k]);
                    v[p][k] = c * x - s * y;
                    v[q][k] = s * x + c * y;
                }
            }
        }
        if off < 1e-15 {
            break;
        }
    }
    let sigma: Vec<f64> = a
        .iter()
        .map(|c| c.iter().map(|x| x * x).sum::<f64>().sqrt())
        .collect();
    let smax = sigma.iter().copied().fold(0.0, f64::max);
    let tol = smax * 100.0 * f64::EPSILON;
    let mut out = [0.0f64; 3];
    for j in 0..3 {
        if sigma[j] > tol {
            // u_j = a_j / sigma_j; gamma_j = u_j . rhs / sigma_j
            let g = a[j].iter().zip(&rhs).map(|(u, b)| u * b).sum::<f64>() / (sigma[j] * sigma[j]);
            for k in 0..3 {
                out[k] += v[j][k] * g;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_a_quadratic_exactly() {
        let x: Vec<f64> = (0..200).map(|i| i as f64 / 10.0).collect();
        let y: Vec<f64> = x.iter().map(|v| 1.0 + 2.0 * v - 0.3 * v * v).collect();
        let f = loess_fitted(&x, &y, 0.3).unwrap();
        for (a, b) in f.iter().zip(&y) {
            assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }

    #[test]
    fn pseudo_inverse_of_a_singular_system() {
        // Only the first column is informative: c = (rhs0 / 1, 0, 0).
        let r = [[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]];
        assert_eq!(pinv_solve3(r, [4.0, 0.0, 0.0]), [2.0, 0.0, 0.0]);
        let r = [[1.0, 2.0, 0.5], [0.0, 3.0, 1.0], [0.0, 0.0, 4.0]];
        let c = pinv_solve3(r, [1.0, 2.0, 3.0]);
        let back = [
            r[0][0] * c[0] + r[0][1] * c[1] + r[0][2] * c[2],
            r[1][1] * c[1] + r[1][2] * c[2],
            r[2][2] * c[2],
        ];
        for (a, b) in back.iter().zip([1.0, 2.0, 3.0]) {
            assert!((a - b).abs() < 1e-12);
        }
    }

    #[test]
    fn refuses_too_few_points() {
        assert!(loess_fitted(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 0.3).is_err());
        assert!(loess_fitted(&[1.0; 50], &[1.0; 50], 0.3).is_err());
    }
}
