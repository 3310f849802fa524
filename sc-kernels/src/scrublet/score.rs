//! Scrublet's doublet scores from the kNN of observed and simulated cells, and the call.
//!
//! Each cell's score is the Bayesian estimate of the chance it is a doublet, from `nd`, the
//! simulated doublets among its neighbours. scanpy 1.12 counts them among the cell itself and
//! its `k_adj - 1` nearest other cells, except when two points coincide (a pair and its
//! reverse make the same doublet; about 2 such pairs are expected at any size, so most runs
//! have one): its kNN then drops the cell itself for every cell, leaving the `k_adj - 1` others.
//! We count as scanpy does in both cases (the original scrublet counts `k_adj` other cells).
//! With `q = (nd + 1) / (k_adj + 2)`, `rho` the expected doublet rate and `r`
//! the simulated-to-observed ratio, `L = q rho / r / (1 - rho - q (1 - rho - rho / r))`; its
//! standard error follows scrublet's propagation of the errors of `q` and `rho`.

/// Scores of every cell of the manifold, observed first.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub obs: Vec<f64>,
    pub sim: Vec<f64>,
    pub errors_obs: Vec<f64>,
    pub errors_sim: Vec<f64>,
}

/// Scores from each cell's count of simulated neighbours (`sim_neighbors`, observed cells
/// first, then the `n_sim` doublets) among `k_adj`.
pub fn scores_from_counts(
    sim_neighbors: &[u32],
    n_obs: usize,
    k_adj: usize,
    expected_rate: f64,
    stdev_rate: f64,
) -> Scores {
    let n_sim = sim_neighbors.len() - n_obs;
    let rho = expected_rate;
    let r = n_sim as f64 / n_obs as f64;
    let n = k_adj as f64;
    let (mut score, mut error) = (Vec::new(), Vec::new());
    for &c in sim_neighbors {
        let q = (c as f64 + 1.0) / (n + 2.0);
        let denom = 1.0 - rho - q * (1.0 - rho - rho / r);
        score.push(q * rho / r / denom);
        let se_q = (q * (1.0 - q) / (n + 3.0)).sqrt();
        let a = se_q / q * (1.0 - rho);
        let b = stdev_rate / rho * (1.0 - q);
        error.push(q * rho / r / denom.powi(2) * (a * a + b * b).sqrt());
    }
    let errors_sim = error.split_off(n_obs);
    let sim = score.split_off(n_obs);
    Scores {
        obs: score,
        sim,
        errors_obs: error,
        errors_sim,
    }
}

/// The call at `threshold`: scrublet's `call_doublets`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub threshold: f64,
    /// Observed cells scored above the threshold.
    pub predicted: Vec<bool>,
    /// `(score - threshold) / error` of each observed cell.
    pub z_scores: Vec<f64>,
    /// The share of observed cells called doublets.
    pub detected_doublet_rate: f64,
    /// The share of simulated doublets above the threshold.
    pub detectable_doublet_fraction: f64,
    /// Their ratio: the doublet rate the call implies.
    pub overall_doublet_rate: f64,
}

/// Calls the observed cells scored above `threshold` doublets.
pub fn call_at(scores: &Scores, threshold: f64) -> Call {
    let predicted: Vec<bool> = scores.obs.iter().map(|&s| s > threshold).collect();
    let z_scores = scores
        .obs
        .iter()
        .zip(&scores.errors_obs)
        .map(|(s, e)| (s - threshold) / e)
        .collect();
    let detected = predicted.iter().filter(|&&p| p).count() as f64 / scores.obs.len() as f64;
    let detectable =
        scores.sim.iter().filter(|&&s| s > threshold).count() as f64 / scores.sim.len() as f64;
    Call {
        threshold,
        predicted,
        z_scores,
        detected_doublet_rate: detected,
        detectable_doublet_fraction: detectable,
        overall_doublet_rate: detected / detectable,
    }
}
