//! Scrublet's embedding: the observed cells' normalized counts, z-scored (or only centred, or
//! only scaled) with the observed cells' gene means and standard deviations (ddof 1), a PCA
//! (TruncatedSVD without centring) fitted on the observed cells, and both the observed cells
//! and the simulated doublets projected on it.
//!
//! The scaled matrices stay sparse: dividing each gene by its standard deviation and letting
//! the PCA centre gives the covariance of the z-scores, and the projection subtracts the
//! observed cells' means, as sklearn's `transform` does.

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::pca::{pca_sparse, transform_sparse, PcaParams, PcaResult};
use crate::stats::col_mean_var;
use rayon::prelude::*;

/// The observed cells' and the doublets' coordinates (`n_comps` columns each).
#[derive(Debug, Clone, PartialEq)]
pub struct Manifold {
    pub obs: DenseMatrix<f32>,
    pub sim: DenseMatrix<f32>,
}

/// How the counts are prepared before the PCA (scanpy's `mean_center`, `normalize_variance`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preparation {
    pub mean_center: bool,
    pub normalize_variance: bool,
}

/// Embeds `obs` and `sim` (normalized counts over the same genes) with `n_comps` components.
pub fn embed(
    obs: &CsrMatrix<f32>,
    sim: &CsrMatrix<f32>,
    n_comps: usize,
    prep: Preparation,
) -> Result<Manifold> {
    if obs.n_cols != sim.n_cols {
        return Err(KernelError::Shape(format!(
            "the simulated doublets have {} genes, the observed cells {}",
            sim.n_cols, obs.n_cols
        )));
    }
    check_components(n_comps, obs.n_rows, obs.n_cols)?;
    let scale = gene_factors(&col_mean_var(obs, None).1, prep);
    let (obs_s, sim_s) = (scaled(obs, &scale), scaled(sim, &scale));
    let fit = pca_sparse(
        &obs_s,
        &PcaParams {
            n_comps,
            zero_center: prep.mean_center,
        },
    )?;
    let sim_scores = transform_sparse(&sim_s, &fit)?;
    Ok(Manifold {
        obs: fit.x_pca,
        sim: sim_scores,
    })
}

/// [`embed`] of observed cells whose doublets are the sums of two cells' raw counts
/// (`parents`), without making the doublets: `obs` are the observed cells' per-million counts
/// and `totals` their raw totals over the same genes. A doublet's scaled row is its parents' raw
/// rows added, times 1e6 over their totals added, times the genes' factors, so its projection
/// is a mean of its parents' ([`doublets_from_parents`]); the same embedding up to rounding.
pub fn embed_linear(
    obs: &CsrMatrix<f32>,
    totals: &[f64],
    parents: &[[u32; 2]],
    n_comps: usize,
    prep: Preparation,
) -> Result<Manifold> {
    check_components(n_comps, obs.n_rows, obs.n_cols)?;
    let scale = gene_factors(&col_mean_var(obs, None).1, prep);
    let fit = pca_sparse(
        &scaled(obs, &scale),
        &PcaParams {
            n_comps,
            zero_center: prep.mean_center,
        },
    )?;
    let sim = doublets_from_parents(&fit, totals, parents);
    Ok(Manifold {
        obs: fit.x_pca,
        sim,
    })
}

/// The doublets' coordinates from the fit of their parents (`totals`: the observed cells' raw
/// totals): with `q_i` a cell's uncentred scores (its scores plus the mean's), a doublet of `a`
/// and `b` has `(q_a t_a + q_b t_b) / (t_a + t_b)` less the mean's; a doublet of two empty cells
/// has the scores of zero counts.
pub fn doublets_from_parents(
    fit: &PcaResult,
    totals: &[f64],
    parents: &[[u32; 2]],
) -> DenseMatrix<f32> {
    let k = fit.x_pca.n_cols;
    let mean_v: Vec<f64> = (0..k)
        .map(|c| {
            let axis = fit.components.row(c);
            fit.mean.iter().zip(axis).map(|(m, v)| m * v).sum()
        })
        .collect();
    let mut out = DenseMatrix::zeros(parents.len(), k);
    out.data
        .par_chunks_mut(k.max(1))
        .zip(parents)
        .for_each(|(row, &[a, b])| {
            let (ta, tb) = (totals[a as usize], totals[b as usize]);
            let (qa, qb) = (fit.x_pca.row(a as usize), fit.x_pca.row(b as usize));
            for c in 0..k {
                let sum = ta + tb;
                let uncentred = if sum > 0.0 {
                    ((qa[c] as f64 + mean_v[c]) * ta + (qb[c] as f64 + mean_v[c]) * tb) / sum
                } else {
                    0.0
                };
                row[c] = (uncentred - mean_v[c]) as f32;
            }
        });
    out
}

/// Refuses `n_comps` outside 1..min(cells, genes) (sklearn's TruncatedSVD's limit).
pub(super) fn check_components(n_comps: usize, n_obs: usize, n_genes: usize) -> Result<()> {
    if n_comps == 0 {
        return Err(KernelError::param("n_prin_comps", "must be at least 1"));
    }
    let largest = n_obs.min(n_genes).saturating_sub(1);
    if n_comps > largest {
        return Err(KernelError::param(
            "n_prin_comps",
            format!(
                "{n_comps} components need more than {n_comps} observed cells and genes; \
                 there are {n_obs} cells and {n_genes} genes (at most {largest})"
            ),
        ));
    }
    Ok(())
}

/// Each gene's factor from its variance among the observed cells (ddof 1): one over its
/// standard deviation with `normalize_variance`, else 1.
pub(super) fn gene_factors(var: &[f64], prep: Preparation) -> Vec<f64> {
    if !prep.normalize_variance {
        return vec![1.0; var.len()];
    }
    var.iter()
        .map(|&v| match v.sqrt() {
            // A gene equal in every cell: its z-score is 0 wherever scanpy's is NaN.
            s if s > 0.0 && s.is_finite() => 1.0 / s,
            _ => 0.0,
        })
        .collect()
}

/// `x` with each gene multiplied by its factor, in f64 (scanpy's z-scores are f64).
fn scaled(x: &CsrMatrix<f32>, factor: &[f64]) -> CsrMatrix<f64> {
    CsrMatrix {
        n_rows: x.n_rows,
        n_cols: x.n_cols,
        indptr: x.indptr.clone(),
        indices: x.indices.clone(),
        data: x
            .indices
            .iter()
            .zip(&x.data)
            .map(|(&c, &v)| v as f64 * factor[c as usize])
            .collect(),
    }
}
