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
use crate::pca::{pca_sparse, transform_sparse, PcaParams};
use crate::stats::col_mean_var;

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
    if n_comps == 0 {
        return Err(KernelError::param("n_prin_comps", "must be at least 1"));
    }
    let largest = obs.n_rows.min(obs.n_cols).saturating_sub(1);
    if n_comps > largest {
        return Err(KernelError::param(
            "n_prin_comps",
            format!(
                "{n_comps} components need more than {n_comps} observed cells and genes; \
                 there are {} cells and {} genes (at most {largest})",
                obs.n_rows, obs.n_cols
            ),
        ));
    }
    let scale: Vec<f64> = if prep.normalize_variance {
        let (_, var) = col_mean_var(obs, None);
        var.iter()
            .map(|&v| match v.sqrt() {
                // A gene equal in every cell: its z-score is 0 wherever scanpy's is NaN.
                s if s > 0.0 && s.is_finite() => 1.0 / s,
                _ => 0.0,
            })
            .collect()
    } else {
        vec![1.0; obs.n_cols]
    };
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
