//! Scrublet's simulated doublets (scanpy's `scrublet_simulate_doublets`): the counts of random
//! pairs of observed cells added together, no pair drawn twice, optionally thinned by binomial
//! sampling of the UMIs.
//!
//! The pairs are scanpy's: drawn as scikit-learn's `sample_without_replacement` draws them from
//! numpy's legacy `RandomState(seed)`, so the same seed gives scanpy's doublets. The thinning
//! (`synthetic_doublet_umi_subsampling < 1`) uses our own counter-based numbers (scanpy's
//! binomial draws continue numpy's stream), so thinned doublets are not scanpy's.

use crate::csr::{build_csr, CsrMatrix};
use crate::error::{KernelError, Result};
use crate::random::{hash3, NumpyRandomState};
use crate::stats::row_sums;
use rayon::prelude::*;

/// The stream of the binomial thinning's numbers (apart from the pairs').
const THINNING_STREAM: u64 = 0x5c_2b1e7;

/// Simulated doublets: their counts and parents.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulated {
    /// `n_sim x n_genes` counts (`adata_sim.X`).
    pub counts: CsrMatrix<f32>,
    /// Each doublet's two parents, rows of the observed matrix (`obsm['doublet_parents']`).
    pub parents: Vec<[u32; 2]>,
    /// Each doublet's total before any thinning's rescale (`obs['n_counts']`): the parents'
    /// totals added, or the thinned counts' total plus the thinned remainder.
    pub totals: Vec<f64>,
}

/// `int(n_obs * ratio)` doublets from `counts` (cells x genes, raw counts), pairs drawn with
/// `seed`; with `umi_subsampling < 1` each summed count is thinned to a binomial draw at that
/// rate, as scanpy's `synthetic_doublet_umi_subsampling`.
pub fn simulate_doublets(
    counts: &CsrMatrix<f32>,
    ratio: f64,
    umi_subsampling: f64,
    seed: u64,
) -> Result<Simulated> {
    if !(umi_subsampling > 0.0 && umi_subsampling <= 1.0) {
        return Err(KernelError::param(
            "synthetic_doublet_umi_subsampling",
            format!("must be in (0, 1], got {umi_subsampling}"),
        ));
    }
    counts.check_counts()?;
    let parents = doublet_pairs(counts.n_rows, ratio, seed)?;
    let totals_obs = row_sums(counts);
    let summed = summed_rows(counts, &parents);
    let totals: Vec<f64> = parents
        .iter()
        .map(|&[a, b]| totals_obs[a as usize] + totals_obs[b as usize])
        .collect();
    if umi_subsampling >= 1.0 {
        return Ok(Simulated {
            counts: summed,
            parents,
            totals,
        });
    }
    Ok(thin(summed, parents, &totals, umi_subsampling, seed))
}

/// The parents of `int(n_obs * ratio)` doublets: distinct pairs of `0..n_obs` (a cell may pair
/// with itself), as scanpy's `sample_comb` draws them from numpy's `RandomState(seed)`: the
/// same pairs, in the same order.
pub fn doublet_pairs(n_obs: usize, ratio: f64, seed: u64) -> Result<Vec<[u32; 2]>> {
    if !(ratio > 0.0 && ratio.is_finite()) {
        return Err(KernelError::param(
            "sim_doublet_ratio",
            format!("must be a number > 0, got {ratio}"),
        ));
    }
    let n_sim = (n_obs as f64 * ratio) as usize;
    let pairs_available = (n_obs as u128) * (n_obs as u128);
    if n_sim == 0 || n_sim as u128 > pairs_available {
        return Err(KernelError::param(
            "sim_doublet_ratio",
            format!(
                "{ratio} asks for {n_sim} doublets from {n_obs} cells, which have \
                 {pairs_available} distinct pairs; at least one is needed"
            ),
        ));
    }
    let seed = u32::try_from(seed).map_err(|_| {
        KernelError::param(
            "random_state",
            format!("numpy's RandomState takes seeds below 2^32, got {seed}"),
        )
    })?;
    Ok(draw_pairs(n_obs, n_sim, seed))
}

fn draw_pairs(n_obs: usize, n_sim: usize, seed: u32) -> Vec<[u32; 2]> {
    let n = n_obs as u64;
    NumpyRandomState::new(seed)
        .sample_without_replacement(n * n, n_sim)
        .into_iter()
        .map(|v| [(v / n) as u32, (v % n) as u32])
        .collect()
}

/// Doublets merged on every core a block at a time (each row merged once; the block's rows are
/// all that is held beside the result), appended in order.
fn summed_rows(counts: &CsrMatrix<f32>, parents: &[[u32; 2]]) -> CsrMatrix<f32> {
    const BLOCK: usize = 1 << 16;
    let mut indptr = Vec::with_capacity(parents.len() + 1);
    indptr.push(0u64);
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for block in parents.chunks(BLOCK) {
        let rows: Vec<Vec<(u32, f32)>> = block.par_iter().map(|&p| merged_row(counts, p)).collect();
        for row in rows {
            for (c, v) in row {
                indices.push(c);
                data.push(v);
            }
            indptr.push(indices.len() as u64);
        }
    }
    CsrMatrix {
        n_rows: parents.len(),
        n_cols: counts.n_cols,
        indptr,
        indices,
        data,
    }
}

/// The sum of rows `a` and `b`, by column (f32 sums, as scipy adds float32 matrices).
fn merged_row(counts: &CsrMatrix<f32>, [a, b]: [u32; 2]) -> Vec<(u32, f32)> {
    let (ca, va) = counts.row(a as usize);
    let (cb, vb) = counts.row(b as usize);
    let mut all: Vec<(u32, f32)> = ca
        .iter()
        .copied()
        .zip(va.iter().copied())
        .chain(cb.iter().copied().zip(vb.iter().copied()))
        .collect();
    all.sort_unstable_by_key(|e| e.0);
    let mut out: Vec<(u32, f32)> = Vec::with_capacity(all.len());
    for (c, v) in all {
        match out.last_mut() {
            Some(last) if last.0 == c => last.1 += v,
            _ => out.push((c, v)),
        }
    }
    out
}

/// Binomial thinning of every stored count at `rate` (each UMI kept with probability `rate`,
/// from counter-based numbers keyed by the value's position), zeros dropped. The totals are
/// scanpy's: the kept counts plus a binomial draw, at the same rate, of the total less them.
fn thin(
    summed: CsrMatrix<f32>,
    parents: Vec<[u32; 2]>,
    totals: &[f64],
    rate: f64,
    seed: u64,
) -> Simulated {
    let binomial = |n: u64, key: u64| -> u64 {
        (0..n)
            .filter(|&u| {
                let h = hash3(
                    seed,
                    THINNING_STREAM,
                    key.wrapping_mul(0x1_0000_0001).wrapping_add(u),
                );
                ((h >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < rate
            })
            .count() as u64
    };
    let kept: Vec<f32> = summed
        .data
        .iter()
        .enumerate()
        .map(|(p, &v)| binomial(v.round().max(0.0) as u64, p as u64) as f32)
        .collect();
    let thinned = build_csr(
        summed.n_rows,
        summed.n_cols,
        |i| {
            kept[summed.row_range(i)]
                .iter()
                .filter(|&&v| v > 0.0)
                .count()
        },
        |i, idx, dat| {
            let r = summed.row_range(i);
            let mut k = 0;
            for (&c, &v) in summed.indices[r.clone()].iter().zip(&kept[r]) {
                if v > 0.0 {
                    idx[k] = c;
                    dat[k] = v;
                    k += 1;
                }
            }
        },
    );
    let totals = row_sums(&thinned)
        .into_iter()
        .enumerate()
        .map(|(i, current)| {
            let rest = (totals[i] - current).round().max(0.0) as u64;
            current + binomial(rest, (summed.data.len() + i) as u64) as f64
        })
        .collect();
    Simulated {
        counts: thinned,
        parents,
        totals,
    }
}
