//! The eigenpairs of largest magnitude of a large symmetric operator (scipy's `eigsh(which="LM")`,
//! ARPACK's job): thick-restart Lanczos (Wu and Simon 2000) with full reorthogonalization.
//!
//! A basis of `m` vectors ([`basis_len`]: CuPy's default `ncv`, `k + 32`) is grown by the operator,
//! each new vector orthogonalized twice against all the others (so the projected matrix is
//! computed, not assumed tridiagonal); its Ritz pairs are tested (residual `|beta u_m|` at most
//! `tol`); if some of the `k` wanted are not there yet, the basis restarts from the best
//! `(m + k) / 2` Ritz vectors and the residual direction. Every sum is taken over fixed blocks
//! of [`ROWS`] rows in a fixed order ([`block_sum`]), so the result does not depend on the
//! number of threads.
//!
//! The iteration ([`lanczos`]) asks its [`Basis`] for every operation on the long vectors, so
//! that the same iteration runs where the vectors are: [`HostBasis`] here, a GPU basis in the
//! step that has one (`diffmap::gpu`), which gives these bits when it sums and rounds as
//! [`HostBasis`] does.

use crate::error::{KernelError, Result};
use crate::random::SplitMix64;
use crate::stats::chunked_sum;
use faer::{Mat, Side};
use rayon::prelude::*;

/// Rows per block of the dot products ([`block_sum`]): 32 a lane. On an H100 at 1 M rows, a
/// GPU step of diffmap's took 0.49 ms with blocks of 1,024 rows, 0.52-0.58 with 512 and
/// 0.50-0.62 with 2,048 (session 46, `scripts/device/experiments/project_dots_variants.py`).
pub const ROWS: usize = 1024;

/// Lanes of a block's sum ([`block_sum`]): a GPU warp.
pub const LANES: usize = 32;

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

/// The long vectors of the iteration: `m + 1` basis columns of length `n` and a work vector
/// `w`, with the operator. Each method's arithmetic is [`HostBasis`]'s, in its order: a dot
/// product is `0 + ([`block_sum`] of each block of [`ROWS`] rows' products)`, the blocks' sums
/// added in order to 0; nothing fused.
pub trait Basis {
    /// `n`.
    fn rows(&self) -> usize;
    /// `w = A column[j]`.
    fn apply(&mut self, j: usize) -> Result<()>;
    /// `|w|` (the square root of `w . w`).
    fn norm(&mut self) -> Result<f64>;
    /// Projects `w` off `column[0..cols]` twice (one pass leaves what rounding let through),
    /// then measures it: the two `h` added, and `|w|`, as [`HostBasis`] computes them (each
    /// projection `w -= h_c column[c]`, `c` in order, after all of `h` is computed). A device
    /// may fuse the passes; the bits are these.
    fn orthogonalize(&mut self, cols: usize) -> Result<(Vec<f64>, f64)>;
    /// `column[j] = w / d`.
    fn store(&mut self, j: usize, d: f64) -> Result<()>;
    /// `column[j] = 0`.
    fn zero(&mut self, j: usize) -> Result<()>;
    /// `w = values`.
    fn set_w(&mut self, values: &[f64]) -> Result<()>;
    /// `column[c] = sum_j coefs[c][j] column[j]` (`j < m`, from 0 in order) for every `c`, then
    /// `column[coefs.len()] = column[m]`.
    fn restart(&mut self, m: usize, coefs: &[Vec<f64>]) -> Result<()>;
    /// The vectors `sum_j coefs[c][j] column[j]` (`j < m`, from 0 in order) as the columns of
    /// an `n x coefs.len()` matrix.
    fn combine(&self, m: usize, coefs: &[Vec<f64>]) -> Result<Mat<f64>>;
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
    check_k(n, k)?;
    let m = basis_len(n, k);
    lanczos(&mut HostBasis::new(n, m, apply)?, k, tol, seed)
}

/// `k`'s bounds for an `n x n` operator.
pub fn check_k(n: usize, k: usize) -> Result<()> {
    if k == 0 || k >= n {
        return Err(KernelError::param(
            "k",
            format!(
                "must be between 1 and n - 1 = {}, got {k}",
                n.saturating_sub(1)
            ),
        ));
    }
    Ok(())
}

/// The basis' size `m` for `k` eigenpairs of an `n x n` operator (it holds `m + 1` columns):
/// CuPy's default (`k + 32`, at least `2k`, as rapids-singlecell's diffmap runs it) rather than
/// ARPACK's (`2k + 1`, at least 20). Clustered cells give many eigenvalues near 1, and a thick
/// restart that keeps more vectors converges in far fewer products: 12 planted groups of
/// 10,000 cells, 15 pairs: 178 restarts (1,424 products) in 16.4 s with 31, 41 restarts (656
/// products) in 9.1 s with 47, on 2 cores.
pub fn basis_len(n: usize, k: usize) -> usize {
    (2 * k + 1).max(k + 32).max(20).min(n)
}

/// The iteration on `basis` (of [`basis_len`]` + 1` columns), for `k` eigenpairs ([`check_k`]
/// passed).
pub fn lanczos(basis: &mut impl Basis, k: usize, tol: f64, seed: u64) -> Result<Eigenpairs> {
    let n = basis.rows();
    check_k(n, k)?;
    let m = basis_len(n, k);
    let mut draws = SplitMix64::new(seed);
    let start: Vec<f64> = (0..n).map(|_| draws.normal()).collect();
    basis.set_w(&start)?;
    let s = basis.norm()?;
    basis.store(0, s)?;
    let mut t = Mat::<f64>::zeros(m, m);
    let mut kept = 0;
    for restart in 0..MAX_RESTARTS {
        let mut beta = 0.0;
        for j in kept..m {
            basis.apply(j)?;
            let h;
            (h, beta) = basis.orthogonalize(j + 1)?;
            for (i, &v) in h.iter().enumerate() {
                t[(i, j)] = v;
                t[(j, i)] = v;
            }
            if beta > 1e-12 {
                basis.store(j + 1, beta)?;
            } else if j + 1 < m {
                // An invariant subspace: go on from a fresh direction, uncoupled.
                beta = 0.0;
                let fresh: Vec<f64> = (0..n).map(|_| draws.normal()).collect();
                basis.set_w(&fresh)?;
                let (_, s) = basis.orthogonalize(j + 1)?;
                basis.store(j + 1, s)?;
            } else {
                // The basis holds an invariant subspace: its Ritz pairs are exact.
                beta = 0.0;
                basis.zero(j + 1)?;
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
        let coefs = |cols: &[usize]| -> Vec<Vec<f64>> {
            cols.iter()
                .map(|&i| (0..m).map(|j| y[(j, i)]).collect())
                .collect()
        };
        if converged || restart + 1 == MAX_RESTARTS {
            if !converged {
                return Err(KernelError::Unsupported(format!(
                    "eigsh: {k} eigenpairs did not converge in {MAX_RESTARTS} restarts"
                )));
            }
            let mut chosen = order[..k].to_vec();
            chosen.sort_by(|&a, &b| theta[b].total_cmp(&theta[a]));
            let vectors = basis.combine(m, &coefs(&chosen))?;
            return Ok(Eigenpairs {
                values: chosen.iter().map(|&i| theta[i]).collect(),
                vectors: signed(vectors),
                restarts: restart,
            });
        }
        // Thick restart: the best Ritz vectors, then the residual direction.
        kept = ((m + k) / 2).max(k).min(m - 1);
        let keep = &order[..kept];
        basis.restart(m, &coefs(keep))?;
        t = Mat::zeros(m, m);
        for (c, &i) in keep.iter().enumerate() {
            t[(c, c)] = theta[i];
        }
    }
    unreachable!("the last restart returns")
}

/// The basis in host memory, the operator a closure.
pub struct HostBasis<F> {
    n: usize,
    /// `m + 1` columns of `n`, one after another.
    columns: Vec<f64>,
    w: Vec<f64>,
    apply: F,
}

impl<F: Fn(&[f64], &mut [f64]) + Sync> HostBasis<F> {
    /// `m + 1` zero columns of `n` for the operator `apply` (`apply(x, y)`: `y = A x`); an
    /// error naming the size when the host cannot hold them (many eigenpairs of many rows),
    /// rather than the process aborting.
    pub fn new(n: usize, m: usize, apply: F) -> Result<Self> {
        Ok(HostBasis {
            n,
            columns: zeros((m + 1).saturating_mul(n), "basis")?,
            w: zeros(n, "work vector")?,
            apply,
        })
    }

    fn column(&self, j: usize) -> &[f64] {
        &self.columns[j * self.n..(j + 1) * self.n]
    }

    /// Removes from `w` its components along `column[0..cols]` (`w -= h_c column[c]`, `c` in
    /// order, after all of `h` is computed); returns them (`h`).
    fn project_out(&mut self, cols: usize) -> Vec<f64> {
        let (n, basis, w) = (self.n, &self.columns, &mut self.w);
        let h = dots(n, cols, |c| &basis[c * n..(c + 1) * n], w);
        w.par_chunks_mut(ROWS).enumerate().for_each(|(b, chunk)| {
            let r0 = b * ROWS;
            for (c, &hc) in h.iter().enumerate() {
                let v = &basis[c * n + r0..c * n + r0 + chunk.len()];
                chunk.iter_mut().zip(v).for_each(|(x, &vv)| *x -= hc * vv);
            }
        });
        h
    }
}

impl<F: Fn(&[f64], &mut [f64]) + Sync> Basis for HostBasis<F> {
    fn rows(&self) -> usize {
        self.n
    }

    fn apply(&mut self, j: usize) -> Result<()> {
        let n = self.n;
        (self.apply)(&self.columns[j * n..(j + 1) * n], &mut self.w);
        Ok(())
    }

    fn orthogonalize(&mut self, cols: usize) -> Result<(Vec<f64>, f64)> {
        let mut h = self.project_out(cols);
        let h2 = self.project_out(cols);
        h.iter_mut().zip(&h2).for_each(|(a, b)| *a += b);
        Ok((h, self.norm()?))
    }

    fn norm(&mut self) -> Result<f64> {
        let w = &self.w;
        Ok(dots(self.n, 1, |_| w, w)[0].sqrt())
    }

    fn store(&mut self, j: usize, d: f64) -> Result<()> {
        let n = self.n;
        let (w, col) = (&self.w, &mut self.columns[j * n..(j + 1) * n]);
        col.iter_mut().zip(w).for_each(|(v, &x)| *v = x / d);
        Ok(())
    }

    fn zero(&mut self, j: usize) -> Result<()> {
        let n = self.n;
        self.columns[j * n..(j + 1) * n].fill(0.0);
        Ok(())
    }

    fn set_w(&mut self, values: &[f64]) -> Result<()> {
        self.w.copy_from_slice(values);
        Ok(())
    }

    fn restart(&mut self, m: usize, coefs: &[Vec<f64>]) -> Result<()> {
        let n = self.n;
        let new = self.combine(m, coefs)?;
        let residual = self.column(m).to_vec();
        for c in 0..coefs.len() {
            for r in 0..n {
                self.columns[c * n + r] = new[(r, c)];
            }
        }
        let kept = coefs.len();
        self.columns[kept * n..(kept + 1) * n].copy_from_slice(&residual);
        Ok(())
    }

    fn combine(&self, m: usize, coefs: &[Vec<f64>]) -> Result<Mat<f64>> {
        let n = self.n;
        let columns: Vec<Vec<f64>> = coefs
            .par_iter()
            .map(|coef| {
                let mut x = vec![0.0; n];
                for (j, &a) in coef[..m].iter().enumerate() {
                    x.iter_mut()
                        .zip(self.column(j))
                        .for_each(|(x, &b)| *x += a * b);
                }
                x
            })
            .collect();
        let mut out = Mat::<f64>::zeros(n, coefs.len());
        for (c, x) in columns.iter().enumerate() {
            for (r, &v) in x.iter().enumerate() {
                out[(r, c)] = v;
            }
        }
        Ok(out)
    }
}

/// `len` zeros, or an error saying how much the eigensolver's `what` needed.
fn zeros(len: usize, what: &str) -> Result<Vec<f64>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        KernelError::Unsupported(format!(
            "eigsh: the {what} needs {} of host memory, which could not be had (fewer \
             eigenpairs need a smaller basis)",
            rmm_core::human_bytes(len.saturating_mul(8))
        ))
    })?;
    v.resize(len, 0.0);
    Ok(v)
}

/// `column(c) . w` for `c < cols`, in blocks of [`ROWS`] rows.
fn dots<'a>(
    n: usize,
    cols: usize,
    column: impl Fn(usize) -> &'a [f64] + Sync,
    w: &[f64],
) -> Vec<f64> {
    chunked_sum(n, ROWS, cols, |rows, acc| {
        let w = &w[rows.clone()];
        for (c, a) in acc.iter_mut().enumerate() {
            *a += block_sum(&column(c)[rows.clone()], w);
        }
    })
}

/// The sum of `a[i] * b[i]` over a block (at most [`ROWS`] long) in the order a GPU warp adds
/// it: product `i` goes to lane `i % LANES`, each lane adds its products in order from -0, then
/// the lanes are added pairwise ([`fold_lanes`]). A chain of `ROWS / LANES` additions a lane
/// where a row-order sum is a chain of `ROWS`, so a warp sums a block at once (`diffmap.cu`'s
/// `diffmap_project_dots`).
pub fn block_sum(a: &[f64], b: &[f64]) -> f64 {
    let mut s = [-0.0f64; LANES];
    for (a, b) in a.chunks(LANES).zip(b.chunks(LANES)) {
        s.iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(s, (a, b))| *s += a * b);
    }
    fold_lanes(s)
}

/// [`block_sum`]'s order for any terms (at most [`ROWS`]): term `k` to lane `k % LANES`, each
/// lane from -0, then [`fold_lanes`] (`draw_graph.cu`'s speed sums).
pub fn lane_sum(terms: impl Iterator<Item = f64>) -> f64 {
    let mut s = [-0.0f64; LANES];
    for (k, t) in terms.enumerate() {
        s[k % LANES] += t;
    }
    fold_lanes(s)
}

/// The lanes added pairwise into lane 0 as a warp's shuffles add them: lane `l` += lane
/// `l + h` for `h` = 16, 8, 4, 2, 1 (`common.cuh`'s `warp_sum_f64`).
pub fn fold_lanes(mut s: [f64; LANES]) -> f64 {
    let mut h = LANES / 2;
    while h > 0 {
        for l in 0..h {
            s[l] += s[l + h];
        }
        h /= 2;
    }
    s[0]
}

/// Each column with its entry of largest magnitude positive (the first such on ties).
fn signed(mut v: Mat<f64>) -> Mat<f64> {
    for c in 0..v.ncols() {
        let col = v.col_as_slice_mut(c);
        let mut best = (0.0f64, 0usize);
        for (r, x) in col.iter().enumerate() {
            if x.abs() > best.0 {
                best = (x.abs(), r);
            }
        }
        if col.get(best.1).is_some_and(|&x| x < 0.0) {
            col.iter_mut().for_each(|x| *x = -*x);
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
    fn a_basis_too_large_for_the_host_is_named() {
        // 2^50 columns of 2^20 rows: no host holds them; an error, not an abort.
        let apply = |_: &[f64], _: &mut [f64]| {};
        let e = HostBasis::new(1 << 20, 1 << 50, apply).err().unwrap();
        assert!(e.to_string().contains("basis needs"), "{e}");
    }

    #[test]
    fn a_block_is_summed_by_lanes_then_pairwise() {
        // 1 at rows 0 and 1, and 2^53 at row 32 cancelled at row 64: the order decides what
        // survives. Row order: (2 + 2^53) - 2^53 = 2. Lanes: lane 0 has rows 0, 32 and 64
        // (1 + 2^53 rounds to 2^53, then 0); lane 1's 1 survives the pairs.
        let big = 2f64.powi(53);
        let mut a = vec![0.0; 100];
        (a[0], a[1], a[32], a[64]) = (1.0, 1.0, big, -big);
        let ones = vec![1.0; 100];
        assert_eq!(block_sum(&a, &ones), 1.0);
        assert_eq!(a.iter().sum::<f64>(), 2.0);
        // Each lane's chain, then lanes 0..16 += 16..32, 0..8 += 8..16, ... into lane 0.
        let v: Vec<f64> = (0..ROWS)
            .map(|i| ((i * 7919) % 1009) as f64 / 1009.0 - 0.5)
            .collect();
        let lane = |l: usize| v.iter().skip(l).step_by(LANES).fold(-0.0, |s, x| s + x);
        let mut s: Vec<f64> = (0..LANES).map(lane).collect();
        for h in [16, 8, 4, 2, 1] {
            for l in 0..h {
                s[l] += s[l + h];
            }
        }
        assert_eq!(block_sum(&v, &vec![1.0; ROWS]).to_bits(), s[0].to_bits());
        assert_eq!(lane_sum(v.iter().copied()).to_bits(), s[0].to_bits());
        // No rows: -0, as a warp whose rows are all past the end.
        assert_eq!(block_sum(&[], &[]).to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn bad_k_is_named() {
        let apply = |x: &[f64], y: &mut [f64]| y.copy_from_slice(x);
        assert!(eigsh_largest(5, 5, apply, 1e-10, 0).is_err());
        assert!(eigsh_largest(5, 0, apply, 1e-10, 0).is_err());
    }
}
