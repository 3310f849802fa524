//! `ingest` (scanpy's `tl.ingest`): new cells mapped onto a reference's PCA, UMAP and labels,
//! on the CPU, as scanpy 1.12's `Ingest` does it:
//! - [`project_pca`]: the new cells' values times the reference's principal axes, centred by
//!   the reference's gene means when its PCA was centred (scanpy 1.12's `Ingest._pca`);
//! - the new cells' nearest reference cells in the representation the reference's neighbors
//!   used ([`crate::neighbors::knn_query`]: exact, where scanpy queries pynndescent's index);
//! - [`vote`]: each new cell's label, the most common among its neighbours' (ties: the first
//!   category, as pandas' `mode()[0]`);
//! - [`umap_transform`]: umap-learn's `UMAP.transform` with the reference's layout fixed: the
//!   neighbours' memberships (`smooth_knn_dist` with a local connectivity of 0), each new cell
//!   started at its neighbours' layout weighted by them, then `n_epochs` (100 up to 10,000
//!   cells, else 30) of attraction to its neighbours and repulsion from random reference
//!   cells at a quarter of the learning rate. The new cells do not move each other, so each
//!   one's epochs run on their own (in parallel); the negative samples are our own draws.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{project_pca_gpu, umap_transform_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::neighbors::{smooth_knn_dist, Knn};
use crate::umap::{
    negative_key, negative_sample, nudge, sample_period, squared_distance, Gradient,
};
use rayon::prelude::*;

/// The new cells' values (genes x the reference's) as a CSR or dense matrix.
pub enum Values<'a> {
    Sparse(&'a CsrMatrix<f32>),
    Dense(&'a DenseMatrix<f32>),
}

impl Values<'_> {
    fn shape(&self) -> (usize, usize) {
        match self {
            Values::Sparse(m) => (m.n_rows, m.n_cols),
            Values::Dense(m) => (m.n_rows, m.n_cols),
        }
    }
}

/// scanpy's `Ingest._pca`: `x` (cells x genes, the genes of `basis`' rows) minus `mean` (the
/// reference's gene means, when its PCA was centred: scanpy 1.12 centres the new cells by the
/// reference's means, 1.11 by their own), times `basis` (genes x components), in f64, rounded
/// to f32.
pub fn project_pca(
    x: Values<'_>,
    basis: &DenseMatrix<f32>,
    mean: Option<&[f64]>,
) -> Result<DenseMatrix<f32>> {
    let (n, g) = x.shape();
    let shift = centring_shift(g, basis, mean)?;
    let k = basis.n_cols;
    let mut out = DenseMatrix::zeros(n, k);
    out.data
        .par_chunks_mut(k.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            let mut acc = vec![0f64; k];
            let mut add = |j: usize, v: f64| {
                let axes = &basis.data[j * k..(j + 1) * k];
                for (a, &b) in acc.iter_mut().zip(axes) {
                    *a += v * b as f64;
                }
            };
            match &x {
                Values::Sparse(m) => {
                    let (cols, vals) = m.row(i);
                    cols.iter()
                        .zip(vals)
                        .for_each(|(&j, &v)| add(j as usize, v as f64));
                }
                Values::Dense(m) => m
                    .row(i)
                    .iter()
                    .enumerate()
                    .for_each(|(j, &v)| add(j, v as f64)),
            }
            for ((o, a), s) in row.iter_mut().zip(&acc).zip(&shift) {
                *o = (a - s) as f32;
            }
        });
    Ok(out)
}

/// What centring by `mean` subtracts from every projected row (sparse rows stay sparse): the
/// means' projection on each axis (zeros without means), after checking that the values'
/// `g` genes, `basis`' rows and the means agree.
fn centring_shift(g: usize, basis: &DenseMatrix<f32>, mean: Option<&[f64]>) -> Result<Vec<f64>> {
    if basis.n_rows != g {
        return Err(KernelError::Shape(format!(
            "the new cells have {g} genes, the reference's principal axes {}",
            basis.n_rows
        )));
    }
    if let Some(m) = mean.filter(|m| m.len() != g) {
        return Err(KernelError::Shape(format!(
            "{} reference means for the principal axes' {g} genes",
            m.len()
        )));
    }
    let k = basis.n_cols;
    Ok(match mean {
        Some(mean) => (0..k)
            .map(|c| (0..g).map(|j| mean[j] * basis.data[j * k + c] as f64).sum())
            .collect(),
        None => vec![0.0; k],
    })
}

/// Each new cell's label: the most common code among its neighbours' (`knn`'s rows of the
/// reference) in `labels` (codes below `n_categories`, negative: none), ties to the smaller
/// code; -1 where no neighbour has one.
pub fn vote(labels: &[i32], n_categories: usize, knn: &Knn) -> Result<Vec<i32>> {
    if let Some(&bad) = labels.iter().find(|&&c| c >= n_categories as i32) {
        return Err(KernelError::param(
            "labels",
            format!("code {bad} of {n_categories} categories"),
        ));
    }
    check_neighbours(knn, labels.len())?;
    Ok(knn
        .indices
        .par_chunks(knn.k.max(1))
        .map(|nbrs| {
            let mut counts = vec![0u32; n_categories];
            for &r in nbrs {
                let c = labels[r as usize];
                if c >= 0 {
                    counts[c as usize] += 1;
                }
            }
            // The first largest count: the smaller code on ties.
            let (best, &most) = counts
                .iter()
                .enumerate()
                .rev()
                .max_by_key(|&(_, c)| c)
                .unwrap_or((0, &0));
            if most == 0 {
                -1
            } else {
                best as i32
            }
        })
        .collect())
}

/// umap-learn's settings of `UMAP.transform` that ingest uses (the reference's `a`, `b` and
/// random state; umap-learn's defaults for the rest).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransformParams {
    pub a: f64,
    pub b: f64,
    /// `None`: 100 epochs up to 10,000 new cells, else 30.
    pub n_epochs: Option<usize>,
    /// The layout's learning rate (the transform uses a quarter of it).
    pub learning_rate: f64,
    pub repulsion_strength: f64,
    pub negative_sample_rate: usize,
    pub random_state: u64,
}

impl TransformParams {
    /// umap-learn's defaults with the reference's `a` and `b`.
    pub fn new(a: f64, b: f64, random_state: u64) -> Self {
        TransformParams {
            a,
            b,
            n_epochs: None,
            learning_rate: 1.0,
            repulsion_strength: 1.0,
            negative_sample_rate: 5,
            random_state,
        }
    }
}

/// The new cells' layout among the reference's `layout` (cells x dimensions), from their
/// nearest reference cells (`knn`, nearest first).
pub fn umap_transform(
    layout: &DenseMatrix<f32>,
    knn: &Knn,
    params: &TransformParams,
) -> Result<DenseMatrix<f32>> {
    let t = Transform::new(layout, knn, params)?;
    let (k, dim) = (knn.k, layout.n_cols);
    let (indices, weights) = (&knn.indices, &t.weights);
    let (n_epochs, max, floor, gradient) = (t.n_epochs, t.max, t.floor, t.gradient);
    let (alpha0, rate) = (t.alpha0, t.rate);
    let mut out = DenseMatrix::zeros(knn.n_obs, dim);
    out.data
        .par_chunks_mut(dim.max(1))
        .enumerate()
        .for_each(|(i, cur)| {
            let nbrs = &indices[i * k..(i + 1) * k];
            let w = &weights[i * k..(i + 1) * k];
            // The start: the neighbours' layout weighted by their memberships (l1-normalized).
            let total: f32 = w.iter().sum();
            for (&r, &wj) in nbrs.iter().zip(w) {
                let share = if total > 0.0 { wj / total } else { 0.0 };
                for (c, &y) in cur.iter_mut().zip(layout.row(r as usize)) {
                    *c += share * y;
                }
            }
            let per_sample: Vec<f64> = w
                .iter()
                .map(|&wj| {
                    if wj >= floor && wj > 0.0 {
                        sample_period(wj, max, n_epochs)
                    } else {
                        -1.0 // dropped
                    }
                })
                .collect();
            let mut next_sample = per_sample.clone();
            let mut next_negative: Vec<f64> = per_sample.iter().map(|p| p / rate).collect();
            for epoch in 0..n_epochs {
                let alpha = (alpha0 * (1.0 - epoch as f64 / n_epochs as f64)) as f32;
                let now = epoch as f64;
                for (j, &r) in nbrs.iter().enumerate() {
                    if per_sample[j] < 0.0 || next_sample[j] > now {
                        continue;
                    }
                    let other = layout.row(r as usize);
                    nudge(
                        cur,
                        other,
                        gradient.attraction(squared_distance(cur, other)),
                        alpha,
                    );
                    next_sample[j] += per_sample[j];
                    if !gradient.negative_samples {
                        continue;
                    }
                    let per_negative = per_sample[j] / rate;
                    let count = ((now - next_negative[j]) / per_negative).max(0.0) as usize;
                    let key = negative_key(gradient.seed, epoch, i * k + j);
                    for p in 0..count {
                        let other = layout.row(negative_sample(key, p, layout.n_rows));
                        let coeff = gradient.repulsion(squared_distance(cur, other));
                        if coeff > 0.0 {
                            nudge(cur, other, coeff, alpha);
                        }
                    }
                    next_negative[j] += count as f64 * per_negative;
                }
            }
        });
    Ok(out)
}

/// What the transform's epochs start from on either device: the neighbours' memberships, the
/// epochs, the heaviest membership and the floor below which an edge is dropped, the gradient,
/// the learning rate and the negative samples an edge.
pub(crate) struct Transform {
    pub weights: Vec<f32>,
    pub n_epochs: usize,
    pub max: f32,
    pub floor: f32,
    pub gradient: Gradient,
    pub alpha0: f64,
    pub rate: f64,
}

impl Transform {
    fn new(layout: &DenseMatrix<f32>, knn: &Knn, params: &TransformParams) -> Result<Self> {
        check_neighbours(knn, layout.n_rows)?;
        if !(params.a > 0.0 && params.b > 0.0) {
            return Err(KernelError::param(
                "umap params",
                format!(
                    "a and b must be positive, got {} and {}",
                    params.a, params.b
                ),
            ));
        }
        let (n, k) = (knn.n_obs, knn.k);
        let (sigmas, rhos) = smooth_knn_dist(knn, 0.0, 1.0);
        let weights: Vec<f32> = knn
            .distances
            .par_iter()
            .enumerate()
            .map(|(e, &d)| {
                let (sigma, rho) = (sigmas[e / k], rhos[e / k]);
                if d - rho <= 0.0 || sigma == 0.0 {
                    1.0
                } else {
                    (-((d - rho) / sigma)).exp()
                }
            })
            .collect();
        let n_epochs = params
            .n_epochs
            .unwrap_or(if n <= 10_000 { 100 } else { 30 })
            .max(1);
        // umap-learn drops the edges below the heaviest's share of one epoch.
        let max = weights.iter().copied().fold(0f32, f32::max);
        let floor = max / n_epochs as f32;
        let gradient = Gradient {
            a: params.a as f32,
            b: params.b as f32,
            gamma: params.repulsion_strength as f32,
            negative_samples: params.negative_sample_rate > 0,
            seed: params.random_state,
        };
        Ok(Transform {
            weights,
            n_epochs,
            max,
            floor,
            gradient,
            alpha0: params.learning_rate / 4.0,
            rate: params.negative_sample_rate.max(1) as f64,
        })
    }
}

/// Refuses a kNN whose arrays are not `n_obs x k` or that names a row beyond `n_reference`.
fn check_neighbours(knn: &Knn, n_reference: usize) -> Result<()> {
    let expected = knn.n_obs * knn.k;
    if knn.k == 0 || knn.indices.len() != expected || knn.distances.len() != expected {
        return Err(KernelError::Shape(format!(
            "{} neighbours and {} distances for {} cells of k = {}",
            knn.indices.len(),
            knn.distances.len(),
            knn.n_obs,
            knn.k
        )));
    }
    if let Some(&bad) = knn.indices.iter().find(|&&r| r as usize >= n_reference) {
        return Err(KernelError::Shape(format!(
            "neighbour {bad} of a reference of {n_reference} cells"
        )));
    }
    Ok(())
}
