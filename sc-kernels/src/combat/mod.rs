//! `combat` (scanpy's `pp.combat`, Johnson et al. 2007, as combat.py): batch effects removed
//! by location and scale per gene, with empirical-Bayes shrinkage across genes, as scanpy 1.12
//! computes it (in f64):
//! - a linear model per gene on the batches (one-hot) and numeric covariates, by least
//!   squares; the pooled variance of its residuals (over all cells, divided by `n`); each
//!   cell's standardized value `(y - m) / sqrt(v)` (0 for genes of zero variance), `m` the
//!   batches' weighted mean plus the covariates' part;
//! - per batch: the genes' mean (gamma) and variance with `n - 1` (delta) of the standardized
//!   values, the priors from their spread across genes (gamma: mean and variance with `n`;
//!   delta: scanpy's `_aprior` / `_bprior` with pandas' variance, `n - 1`), and the posterior
//!   means by scanpy's fixed point (`_it_sol`, to a relative change of 1e-4; after one
//!   iteration when a gene's gamma is 0, a gene of zero variance: scanpy's criterion is NaN
//!   then, which ends its loop);
//! - the adjusted values `(s - gamma*) / sqrt(delta*) * sqrt(v) + m`.
//!
//! Every sum over cells is taken batch by batch over the batch's cells in order, in chunks of
//! [`CHUNK`] cells (each summed in order, the chunks' totals then in order; sums over all cells
//! add the batches' totals in order), and the standardized values are made again from X in
//! each pass instead of being kept (a pass reads X once; no n x genes f64 copies). The GPU twin
//! ([`combat_gpu`], `combat.cu`) makes the same passes with the same operations: the host's
//! values bit for bit.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{combat_gpu, KERNELS};

use crate::dense::{check_finite_rows, DenseMatrix};
use crate::error::{KernelError, Result};
use crate::gpu::trace::PhaseTrace;
use crate::real::Real;
use rayon::prelude::*;

/// scanpy's convergence criterion of the posterior means.
pub const CONVERGENCE: f64 = 1e-4;

/// Iterations of the fixed point before giving up.
const MAX_ITER: usize = 10_000;

/// Cells of a chunk of a batch's sums (the GPU twin is given the same chunks).
pub(crate) const CHUNK: usize = 1024;

/// The batch-corrected matrix (cells x genes) of `x`; `batches`: each cell's batch
/// (`< n_batches`, each with at least 2 cells); `covariates`: numeric covariates, one column
/// of `n` values each.
pub fn combat<T: Real>(
    x: &DenseMatrix<T>,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
) -> Result<DenseMatrix<f64>> {
    combat_as(x, batches, n_batches, covariates)
}

/// [`combat`] with each corrected value rounded to `O` as it is made: the step's f32 X
/// without an f64 copy of it first (the same values as `combat`'s, rounded).
pub fn combat_as<T: Real, O: Real>(
    x: &DenseMatrix<T>,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
) -> Result<DenseMatrix<O>> {
    let mut trace = PhaseTrace::on_host("combat");
    let design = Design::new(x.n_rows, x.n_cols, batches, n_batches, covariates)?;
    check_finite_rows(&x.data, x.n_cols)?;
    trace.mark("checks")?;
    let cells = Counted::new(HostCells { x, design: &design });
    let fit = fit(&cells, &design)?;
    trace.mark(&format!("fit ({} passes over the cells)", cells.passes()))?;
    let (n, g) = (x.n_rows, x.n_cols);
    let mut out = DenseMatrix::<O>::zeros(n, g);
    out.data.par_chunks_mut(g.max(1)).enumerate().for_each_init(
        || vec![0.0; g],
        |cp, (j, out)| {
            let row = &x.data[j * g..(j + 1) * g];
            fit.adjusted_row(&design, j, batches[j] as usize, row, cp, out);
        },
    );
    trace.mark("adjust")?;
    Ok(out)
}

/// The cells' batches, in groups, and the numeric covariates: what the model is fitted on.
pub(crate) struct Design<'a> {
    pub n: usize,
    pub g: usize,
    pub batches: &'a [u32],
    pub n_batches: usize,
    pub covariates: &'a [Vec<f64>],
    /// The cells grouped by batch (each batch's in order), and where each batch starts.
    pub members: Vec<u32>,
    pub starts: Vec<usize>,
}

impl<'a> Design<'a> {
    /// Checks the labels and covariates (not X) and groups the cells.
    fn new(
        n: usize,
        g: usize,
        batches: &'a [u32],
        n_batches: usize,
        covariates: &'a [Vec<f64>],
    ) -> Result<Self> {
        if batches.len() != n || covariates.iter().any(|c| c.len() != n) {
            return Err(KernelError::Shape(format!(
                "combat: {} batch labels and covariates of {:?} values for {n} cells",
                batches.len(),
                covariates.iter().map(Vec::len).collect::<Vec<_>>()
            )));
        }
        let mut sizes = vec![0usize; n_batches];
        for &b in batches {
            let b = b as usize;
            if b >= n_batches {
                return Err(KernelError::param(
                    "key",
                    format!("batch {b} of {n_batches}"),
                ));
            }
            sizes[b] += 1;
        }
        if let Some(b) = sizes.iter().position(|&s| s < 2) {
            return Err(KernelError::Unsupported(format!(
                "combat: batch {b} has fewer than 2 cells; ComBat needs 2 or more per batch"
            )));
        }
        if let Some(c) = covariates
            .iter()
            .position(|c| c.iter().any(|v| !v.is_finite()))
        {
            return Err(KernelError::param(
                "covariates",
                format!("covariate {c} holds a NaN or infinite value"),
            ));
        }
        let (members, starts) = crate::group_by::group_members(batches, n_batches);
        Ok(Design {
            n,
            g,
            batches,
            n_batches,
            covariates,
            members,
            starts,
        })
    }

    fn size(&self, b: usize) -> usize {
        self.starts[b + 1] - self.starts[b]
    }

    /// Columns of the design: the batches' one-hot, then the covariates.
    fn p(&self) -> usize {
        self.n_batches + self.covariates.len()
    }

    /// The chunks of every batch's cells: `(first member, count, batch)`, batch by batch.
    pub(crate) fn chunks(&self) -> Vec<(usize, usize, usize)> {
        (0..self.n_batches)
            .flat_map(|b| {
                let (s, e) = (self.starts[b], self.starts[b + 1]);
                (s..e).step_by(CHUNK).map(move |c| (c, CHUNK.min(e - c), b))
            })
            .collect()
    }
}

/// The linear model of every gene: its coefficients (`p x g`, the batches' rows then the
/// covariates'), the batches' weighted mean, the pooled variance and its root.
pub(crate) struct Model {
    pub beta: Vec<f64>,
    pub grand: Vec<f64>,
    pub var: Vec<f64>,
    pub sd: Vec<f64>,
}

impl Model {
    /// Cell `j`'s covariates times each gene's coefficients, into `cp` (`g` values): each
    /// covariate's product added to 0 in order.
    fn covariate_parts(&self, d: &Design<'_>, j: usize, cp: &mut [f64]) {
        cp.iter_mut().for_each(|v| *v = 0.0);
        for (m, cov) in d.covariates.iter().enumerate() {
            let (w, row) = (cov[j], (d.n_batches + m) * d.g);
            for (v, &b) in cp.iter_mut().zip(&self.beta[row..row + d.g]) {
                *v += w * b;
            }
        }
    }
}

/// A standardized value: `y` less the model's mean (`grand + cp`) over the standard deviation;
/// 0 for a gene of zero variance.
#[inline]
fn standard(y: f64, var: f64, grand: f64, cp: f64, sd: f64) -> f64 {
    if var == 0.0 {
        0.0
    } else {
        (y - (grand + cp)) / sd
    }
}

/// What a pass sums over a batch's cells, gene by gene (`COMBAT_*` in `combat.cu`).
#[derive(Clone, Copy)]
pub(crate) enum Term<'a> {
    /// The value times covariate `m` (`None`: times 1).
    Weighted(Option<usize>),
    /// The model's residual squared.
    Residual(&'a Model),
    /// The standardized value.
    Standard(&'a Model),
    /// The standardized value less `centre[b * g + c]`, squared.
    Squared(&'a Model, &'a [f64]),
}

impl Term<'_> {
    /// Adds the term of cell `j` (batch `b`, values `row`) of every gene to `acc`; `cp` is room
    /// for the cell's covariate parts (`g` values). The match is outside the genes' loop, so
    /// each arm's loop vectorizes.
    fn add_row<T: Real>(
        &self,
        d: &Design<'_>,
        j: usize,
        b: usize,
        row: &[T],
        cp: &mut [f64],
        acc: &mut [f64],
    ) {
        let g = d.g;
        if let Term::Residual(m) | Term::Standard(m) | Term::Squared(m, _) = *self {
            m.covariate_parts(d, j, cp);
        }
        let cells = acc.iter_mut().zip(row).zip(cp.iter()).enumerate();
        match *self {
            Term::Weighted(None) => cells.for_each(|(_, ((a, y), _))| *a += y.to_f64()),
            Term::Weighted(Some(m)) => {
                let w = d.covariates[m][j];
                cells.for_each(|(_, ((a, y), _))| *a += w * y.to_f64())
            }
            Term::Residual(m) => {
                let beta = &m.beta[b * g..(b + 1) * g];
                cells.for_each(|(c, ((a, y), &cp))| {
                    let r = y.to_f64() - (beta[c] + cp);
                    *a += r * r
                })
            }
            Term::Standard(m) => cells.for_each(|(c, ((a, y), &cp))| {
                *a += standard(y.to_f64(), m.var[c], m.grand[c], cp, m.sd[c])
            }),
            Term::Squared(m, centre) => {
                let centre = &centre[b * g..(b + 1) * g];
                cells.for_each(|(c, ((a, y), &cp))| {
                    let t = standard(y.to_f64(), m.var[c], m.grand[c], cp, m.sd[c]) - centre[c];
                    *a += t * t
                })
            }
        }
    }
}

/// The passes over the cells the fit makes: on the host ([`HostCells`]) or the GPU.
pub(crate) trait Passes {
    /// Each batch's sum of `term` over its cells, gene by gene (`n_batches x g`), in chunks
    /// of [`CHUNK`]; with `only`, that batch's alone (the other rows 0).
    fn sums(&self, term: Term<'_>, only: Option<usize>) -> Result<Vec<f64>>;
}

/// Passes that count themselves (for the phase marks).
pub(crate) struct Counted<P> {
    inner: P,
    count: std::cell::Cell<usize>,
}

impl<P: Passes> Counted<P> {
    pub(crate) fn new(inner: P) -> Self {
        Counted {
            inner,
            count: std::cell::Cell::new(0),
        }
    }

    pub(crate) fn passes(&self) -> usize {
        self.count.get()
    }

    pub(crate) fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Passes> Passes for Counted<P> {
    fn sums(&self, term: Term<'_>, only: Option<usize>) -> Result<Vec<f64>> {
        self.count.set(self.count.get() + 1);
        self.inner.sums(term, only)
    }
}

struct HostCells<'a, T> {
    x: &'a DenseMatrix<T>,
    design: &'a Design<'a>,
}

impl<T: Real> Passes for HostCells<'_, T> {
    fn sums(&self, term: Term<'_>, only: Option<usize>) -> Result<Vec<f64>> {
        let d = self.design;
        let g = d.g;
        let chunks: Vec<(usize, usize, usize)> = d
            .chunks()
            .into_iter()
            .filter(|c| only.is_none_or(|b| c.2 == b))
            .collect();
        let partial: Vec<Vec<f64>> = chunks
            .par_iter()
            .map(|&(first, count, b)| {
                let (mut acc, mut cp) = (vec![0.0; g], vec![0.0; g]);
                for &j in &d.members[first..first + count] {
                    let j = j as usize;
                    let row = &self.x.data[j * g..(j + 1) * g];
                    term.add_row(d, j, b, row, &mut cp, &mut acc);
                }
                acc
            })
            .collect();
        Ok(fold_chunks(&chunks, &partial, d.n_batches, g))
    }
}

/// The chunks' totals (`partial[t]`, chunk `t` of `chunks`) added in order into their batch's
/// row (`n_batches x g`).
fn fold_chunks(
    chunks: &[(usize, usize, usize)],
    partial: &[Vec<f64>],
    n_batches: usize,
    g: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; n_batches * g];
    for (&(_, _, b), p) in chunks.iter().zip(partial) {
        for (o, v) in out[b * g..(b + 1) * g].iter_mut().zip(p) {
            *o += v;
        }
    }
    out
}

/// Gene `c`'s sum over all cells: its batches' totals in order.
fn over_batches(sums: &[f64], n_batches: usize, g: usize, c: usize) -> f64 {
    let mut t = 0.0;
    for b in 0..n_batches {
        t += sums[b * g + c];
    }
    t
}

/// The fitted model and every batch's posterior gamma and delta (`n_batches x g`).
pub(crate) struct Fit {
    pub model: Model,
    pub gamma_star: Vec<f64>,
    pub delta_star: Vec<f64>,
}

impl Fit {
    /// Cell `j`'s (of batch `b`, values `row`) adjusted values into `out`; `cp` is room for its
    /// covariate parts (`g` values each).
    fn adjusted_row<T: Real, O: Real>(
        &self,
        d: &Design<'_>,
        j: usize,
        b: usize,
        row: &[T],
        cp: &mut [f64],
        out: &mut [O],
    ) {
        let (m, g) = (&self.model, d.g);
        m.covariate_parts(d, j, cp);
        let (gs, ds) = (
            &self.gamma_star[b * g..(b + 1) * g],
            &self.delta_star[b * g..(b + 1) * g],
        );
        for (c, (o, y)) in out.iter_mut().zip(row).enumerate() {
            let s = standard(y.to_f64(), m.var[c], m.grand[c], cp[c], m.sd[c]);
            *o = O::from_f64((s - gs[c]) / ds[c].sqrt() * m.sd[c] + (m.grand[c] + cp[c]));
        }
    }
}

/// The model, the batches' gamma and delta and their posterior means, from `cells`' passes.
pub(crate) fn fit(cells: &impl Passes, d: &Design<'_>) -> Result<Fit> {
    let (n, g, nb, p) = (d.n, d.g, d.n_batches, d.p());
    // The design's normal equations and their inverse.
    let column = |j: usize, a: usize| -> f64 {
        if a < nb {
            (d.batches[j] as usize == a) as u8 as f64
        } else {
            d.covariates[a - nb][j]
        }
    };
    let mut dtd = faer::Mat::<f64>::zeros(p, p);
    for j in 0..n {
        for a in 0..p {
            for b in 0..p {
                dtd[(a, b)] += column(j, a) * column(j, b);
            }
        }
    }
    let inverse = inverse(dtd)?;
    // The design's columns times each gene's values: the batches' sums, the covariates'.
    let batch_sums = cells.sums(Term::Weighted(None), None)?;
    let mut dty = vec![0.0; p * g];
    dty[..nb * g].copy_from_slice(&batch_sums);
    for m in 0..d.covariates.len() {
        let s = cells.sums(Term::Weighted(Some(m)), None)?;
        for c in 0..g {
            dty[(nb + m) * g + c] = over_batches(&s, nb, g, c);
        }
    }
    let mut beta = vec![0.0; p * g];
    for c in 0..g {
        for a in 0..p {
            let mut t = 0.0;
            for b in 0..p {
                t += inverse[(a, b)] * dty[b * g + c];
            }
            beta[a * g + c] = t;
        }
    }
    let weights: Vec<f64> = (0..nb).map(|b| d.size(b) as f64 / n as f64).collect();
    let grand: Vec<f64> = (0..g)
        .map(|c| {
            let mut t = 0.0;
            for (b, w) in weights.iter().enumerate() {
                t += w * beta[b * g + c];
            }
            t
        })
        .collect();
    let mut model = Model {
        beta,
        grand,
        var: vec![0.0; g],
        sd: vec![0.0; g],
    };
    let residuals = cells.sums(Term::Residual(&model), None)?;
    model.var = (0..g)
        .map(|c| over_batches(&residuals, nb, g, c) / n as f64)
        .collect();
    model.sd = model.var.iter().map(|v| v.sqrt()).collect();
    // Per batch: gamma and delta per gene, their priors, the posterior means.
    let sizes: Vec<f64> = (0..nb).map(|b| d.size(b) as f64).collect();
    let mut gamma_hat = cells.sums(Term::Standard(&model), None)?;
    for (b, k) in sizes.iter().enumerate() {
        gamma_hat[b * g..(b + 1) * g]
            .iter_mut()
            .for_each(|v| *v /= k);
    }
    let mut delta_hat = cells.sums(Term::Squared(&model, &gamma_hat), None)?;
    for (b, k) in sizes.iter().enumerate() {
        delta_hat[b * g..(b + 1) * g]
            .iter_mut()
            .for_each(|v| *v /= k - 1.0);
    }
    let mut gamma_star = vec![0.0; nb * g];
    let mut delta_star = vec![0.0; nb * g];
    for b in 0..nb {
        let rows = b * g..(b + 1) * g;
        let (gh, dh) = (&gamma_hat[rows.clone()], &delta_hat[rows.clone()]);
        let gamma_bar = mean(gh);
        let t2 = variance(gh, 0.0);
        let (m, s2) = (mean(dh), variance(dh, 1.0));
        let prior = Prior {
            gamma_bar,
            t2,
            a: (2.0 * s2 + m * m) / s2,
            b: (m * s2 + m * m * m) / s2,
        };
        let (gs, ds) = posterior(cells, &model, b, sizes[b], gh, dh, &prior)?;
        gamma_star[rows.clone()].copy_from_slice(&gs);
        delta_star[rows].copy_from_slice(&ds);
    }
    Ok(Fit {
        model,
        gamma_star,
        delta_star,
    })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The variance with `len - ddof` in the denominator.
fn variance(v: &[f64], ddof: f64) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - ddof)
}

/// A batch's priors: gamma's mean and variance across genes, delta's inverse-gamma `a`, `b`.
struct Prior {
    gamma_bar: f64,
    t2: f64,
    a: f64,
    b: f64,
}

/// scanpy's `_it_sol` over all genes of batch `b` (`k` cells): gamma and delta's posterior
/// means, each iteration's sums a pass over the batch's cells.
fn posterior(
    cells: &impl Passes,
    model: &Model,
    b: usize,
    k: f64,
    gamma_hat: &[f64],
    delta_hat: &[f64],
    prior: &Prior,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let g = gamma_hat.len();
    let Prior {
        gamma_bar,
        t2,
        a,
        b: beta,
    } = *prior;
    let mut g_old = gamma_hat.to_vec();
    let mut d_old = delta_hat.to_vec();
    let mut centre = vec![0.0; (b + 1) * g];
    for _ in 0..MAX_ITER {
        let g_new: Vec<f64> = (0..g)
            .map(|c| (t2 * k * gamma_hat[c] + d_old[c] * gamma_bar) / (t2 * k + d_old[c]))
            .collect();
        centre[b * g..].copy_from_slice(&g_new);
        let sum2 = cells.sums(Term::Squared(model, &centre), Some(b))?;
        let d_new: Vec<f64> = sum2[b * g..(b + 1) * g]
            .iter()
            .map(|s| (0.5 * s + beta) / (k / 2.0 + a - 1.0))
            .collect();
        let c = python_max(
            relative_change(&g_new, &g_old),
            relative_change(&d_new, &d_old),
        );
        g_old = g_new;
        d_old = d_new;
        if !(c > CONVERGENCE) {
            return Ok((g_old, d_old));
        }
    }
    Err(KernelError::Unsupported(format!(
        "combat: the posterior means did not converge in {MAX_ITER} iterations"
    )))
}

/// scanpy's `(abs(new - old) / old).max()` with numpy's semantics: the signs as written (a
/// negative old value counts as no change), and NaN when any ratio is NaN (an old value of 0
/// that stayed 0: a gene of zero variance), which ends scanpy's loop.
fn relative_change(new: &[f64], old: &[f64]) -> f64 {
    new.iter()
        .zip(old)
        .map(|(n, o)| (n - o).abs() / o)
        .try_fold(f64::NEG_INFINITY, |m, r| {
            if r.is_nan() {
                None
            } else {
                Some(m.max(r))
            }
        })
        .unwrap_or(f64::NAN)
}

/// Python's `max(a, b)`: `b` only when `b > a` (so a NaN `a` stays).
fn python_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Inverts the (symmetric positive definite) normal equations.
fn inverse(m: faer::Mat<f64>) -> Result<faer::Mat<f64>> {
    let p = m.nrows();
    use faer::linalg::solvers::DenseSolveCore;
    let lu = m.partial_piv_lu();
    let inv = lu.inverse();
    if (0..p).any(|i| (0..p).any(|j| !inv[(i, j)].is_finite())) {
        return Err(KernelError::Unsupported(
            "combat: the design (batches and covariates) is singular".into(),
        ));
    }
    Ok(inv)
}
