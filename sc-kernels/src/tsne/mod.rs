//! `tsne` (scanpy's `tl.tsne`, which runs scikit-learn's `TSNE`): t-distributed stochastic
//! neighbour embedding (van der Maaten and Hinton 2008) in 2-D by Barnes-Hut (van der Maaten
//! 2014), with scikit-learn's definition and defaults:
//! - affinities: each cell's `k = min(n - 1, 3 perplexity + 1)` nearest others (exact kNN),
//!   a Gaussian on the squared distances whose width is found by bisection so that the
//!   entropy is `ln(perplexity)` (`affinity`), symmetrized and normalized to sum to 1;
//! - start: the representation's first two principal components, scaled so that the first
//!   has standard deviation 1e-4;
//! - 250 iterations with the affinities multiplied by `early_exaggeration` and momentum 0.5,
//!   then `max_iter - 250` with momentum 0.8; gradient steps with per-coordinate gains
//!   (+0.2 on a sign change, x0.8 otherwise, at least 0.01) and `learning_rate`;
//! - the gradient `4 (sum_j p_ij q_ij (y_i - y_j) - sum_j q_ij^2 (y_i - y_j) / Z)`, the
//!   repulsion from the quadtree with angle 0.5 (`quadtree`).
//!
//! On a GPU ([`tsne_gpu`]): the same affinities, start and schedule, the repulsion interpolated
//! on a grid and convolved by FFT ([`interp`]) instead of the quadtree.
//!
//! Every iteration is a function of the previous one (forces of all cells computed, then all
//! moved), sums in a fixed order: the same seed gives the same embedding on any thread count.
//! scikit-learn's own draws are not repeated (its PCA start is deterministic up to sign; the
//! results match by quality: trustworthiness).

mod affinity;
mod gpu;
pub mod interp;
#[cfg(test)]
mod tests;

pub use affinity::{affinities, neighbours_for};
pub use gpu::tsne_gpu;

/// The GPU twin's kernel modules.
pub const KERNELS: [crate::gpu::module_cache::KernelSource; 1] = [gpu::SRC];

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::quadtree::QuadTree;
use crate::stats::chunked_sum;
use rayon::prelude::*;

/// Iterations with exaggerated affinities (scikit-learn's `_EXPLORATION_MAX_ITER`).
pub const EXPLORATION_ITER: usize = 250;

/// scikit-learn's parameters, with the values scanpy passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TsneParams {
    pub perplexity: f64,
    pub early_exaggeration: f64,
    pub learning_rate: f64,
    pub max_iter: usize,
    /// Barnes-Hut's angle.
    pub angle: f64,
    /// Draws nothing today (the start is the PCA); kept for the parameters' record.
    pub random_state: u64,
}

impl Default for TsneParams {
    fn default() -> Self {
        TsneParams {
            perplexity: 30.0,
            early_exaggeration: 12.0,
            learning_rate: 1000.0,
            max_iter: 1000,
            angle: 0.5,
            random_state: 0,
        }
    }
}

fn check(n: usize, p: &TsneParams) -> Result<()> {
    if !(p.perplexity > 0.0) || p.perplexity >= n as f64 {
        return Err(KernelError::param(
            "perplexity",
            format!(
                "must be above 0 and less than the number of cells ({n}), got {}",
                p.perplexity
            ),
        ));
    }
    for (name, v) in [
        ("early_exaggeration", p.early_exaggeration),
        ("learning_rate", p.learning_rate),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(KernelError::param(name, format!("must be > 0, got {v}")));
        }
    }
    if !(p.angle >= 0.0 && p.angle <= 1.0) {
        return Err(KernelError::param(
            "angle",
            format!("must be in [0, 1], got {}", p.angle),
        ));
    }
    if p.max_iter < EXPLORATION_ITER {
        return Err(KernelError::param(
            "max_iter",
            format!("must be at least {EXPLORATION_ITER}, got {}", p.max_iter),
        ));
    }
    Ok(())
}

/// The 2-D embedding (`n x 2`) of the rows of `x`.
pub fn tsne(x: &DenseMatrix<f32>, params: &TsneParams) -> Result<DenseMatrix<f32>> {
    let n = x.n_rows;
    check(n, params)?;
    x.check_finite()?;
    let k = neighbours_for(n, params.perplexity);
    let knn = crate::neighbors::exact::knn_exact(x, k + 1)?;
    let p = affinities(&knn, k, params.perplexity)?;
    let start = pca_start(x)?;
    Ok(optimize(&p, start, params))
}

/// The first two principal components, the first scaled to standard deviation 1e-4.
fn pca_start(x: &DenseMatrix<f32>) -> Result<Vec<f64>> {
    let n = x.n_rows;
    let comps = 2.min(x.n_cols).min(n.saturating_sub(1)).max(1);
    let pca = crate::pca::pca_dense(
        x,
        &crate::pca::PcaParams {
            n_comps: comps,
            zero_center: true,
        },
    )?;
    let mut y = vec![0.0; 2 * n];
    for i in 0..n {
        for c in 0..comps.min(2) {
            y[2 * i + c] = pca.x_pca.data[i * pca.x_pca.n_cols + c] as f64;
        }
    }
    let mean = (0..n).map(|i| y[2 * i]).sum::<f64>() / n as f64;
    let var = (0..n).map(|i| (y[2 * i] - mean).powi(2)).sum::<f64>() / n as f64;
    let scale = if var > 0.0 { 1e-4 / var.sqrt() } else { 1.0 };
    y.iter_mut().for_each(|v| *v *= scale);
    Ok(y)
}

/// scikit-learn's two stages: `(iterations, momentum, exaggeration)`.
fn stages(params: &TsneParams) -> [(usize, f64, f64); 2] {
    [
        (EXPLORATION_ITER, 0.5, params.early_exaggeration),
        (params.max_iter - EXPLORATION_ITER, 0.8, 1.0),
    ]
}

/// Gradient descent from `y` (`n x 2`) on the affinities `p`.
pub fn optimize(p: &CsrMatrix<f64>, mut y: Vec<f64>, params: &TsneParams) -> DenseMatrix<f32> {
    let n = p.n_rows;
    for (iterations, momentum, exaggeration) in stages(params) {
        // scikit-learn starts each stage with fresh steps and gains.
        let mut update = vec![0.0; 2 * n];
        let mut gains = vec![1.0; 2 * n];
        for _ in 0..iterations {
            let grad = gradient(p, &y, exaggeration, params.angle);
            y.par_iter_mut()
                .zip(update.par_iter_mut())
                .zip(gains.par_iter_mut())
                .zip(grad.par_iter())
                .for_each(
                    |(((y, u), g), &gr): (((&mut f64, &mut f64), &mut f64), &f64)| {
                        *g = if *u * gr < 0.0 { *g + 0.2 } else { *g * 0.8 };
                        *g = g.max(0.01);
                        *u = momentum * *u - params.learning_rate * *g * gr;
                        *y += *u;
                    },
                );
        }
    }
    DenseMatrix::new(n, 2, y.iter().map(|&v| v as f32).collect()).expect("n x 2")
}

/// Rows per block of the normalization sum.
const ROWS: usize = 4096;

/// The gradient of the KL divergence at `y` (Barnes-Hut repulsion), the affinities times
/// `exaggeration`.
fn gradient(p: &CsrMatrix<f64>, y: &[f64], exaggeration: f64, angle: f64) -> Vec<f64> {
    let n = p.n_rows;
    let tree = QuadTree::build(y);
    let theta2 = angle * angle;
    let repulsion: Vec<([f64; 2], f64)> = (0..n)
        .into_par_iter()
        .map_init(Vec::new, |stack, i| repulsion(&tree, y, i, theta2, stack))
        .collect();
    let z = chunked_sum(n, ROWS, 1, |rows, acc| {
        acc[0] += rows.map(|i| repulsion[i].1).sum::<f64>()
    })[0]
        .max(f64::MIN_POSITIVE);
    let mut grad = vec![0.0; 2 * n];
    grad.par_chunks_mut(2).enumerate().for_each(|(i, g)| {
        let (cols, pij) = p.row(i);
        let mut attract = [0.0; 2];
        for (&j, &pv) in cols.iter().zip(pij) {
            let j = j as usize;
            let d = [y[2 * i] - y[2 * j], y[2 * i + 1] - y[2 * j + 1]];
            let q = 1.0 / (1.0 + d[0] * d[0] + d[1] * d[1]);
            attract[0] += pv * exaggeration * q * d[0];
            attract[1] += pv * exaggeration * q * d[1];
        }
        let (rep, _) = repulsion[i];
        g[0] = 4.0 * (attract[0] - rep[0] / z);
        g[1] = 4.0 * (attract[1] - rep[1] / z);
    });
    grad
}

/// The repulsion on point `i`: `(sum_j q_ij^2 (y_i - y_j), sum_j q_ij)` over the other points,
/// `q_ij = 1 / (1 + |y_i - y_j|^2)`, far cells (`width^2 / d^2 < theta2`) taken as one point of
/// their count at their centre of mass.
fn repulsion(
    tree: &QuadTree,
    y: &[f64],
    i: usize,
    theta2: f64,
    stack: &mut Vec<u32>,
) -> ([f64; 2], f64) {
    let p = [y[2 * i], y[2 * i + 1]];
    let (mut force, mut z) = ([0.0; 2], 0.0);
    tree.walk(y, i, theta2, stack, |yj, count| {
        let diff = [p[0] - yj[0], p[1] - yj[1]];
        let q = 1.0 / (1.0 + diff[0] * diff[0] + diff[1] * diff[1]);
        z += count * q;
        force[0] += count * q * q * diff[0];
        force[1] += count * q * q * diff[1];
    });
    (force, z)
}
