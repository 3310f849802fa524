//! `score_genes` (scanpy's `tl.score_genes`, Satija et al. 2015): each cell's mean over a gene
//! set less its mean over control genes drawn from the same expression bins, as scanpy 1.12
//! computes it:
//! - every pool gene's mean over the cells (NaN values left out; genes whose mean is not finite
//!   dropped), ranked (`min` ties), and cut into bins of `round(n / (n_bins - 1))` ranks;
//! - for each bin of a listed gene (in increasing order), the pool genes of that bin (without
//!   the listed genes unless `ctrl_as_ref`), `ctrl_size` of them drawn when there are more, as
//!   pandas' `sample` draws them from numpy's global `RandomState(random_state)` (a
//!   permutation's first `ctrl_size`, the stream continuing from bin to bin); the listed genes
//!   then removed from the draw;
//! - the score: the mean over the listed genes less the mean over the union of the controls
//!   (NaN values left out), in f64.
//!
//! The same seed gives scanpy's control genes, so scanpy's scores.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{score_genes_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::random::NumpyRandomState;
use rayon::prelude::*;

/// scanpy's parameters, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreGenesParams {
    pub ctrl_as_ref: bool,
    pub ctrl_size: usize,
    pub n_bins: usize,
    pub random_state: u32,
}

impl Default for ScoreGenesParams {
    fn default() -> Self {
        ScoreGenesParams {
            ctrl_as_ref: true,
            ctrl_size: 50,
            n_bins: 25,
            random_state: 0,
        }
    }
}

/// Scores and the control genes used.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneScores {
    pub scores: Vec<f64>,
    /// Columns of the control genes, ascending.
    pub control: Vec<usize>,
}

/// Scores each cell (row) of `x` for the genes (columns) `genes` against controls drawn from
/// `pool` (columns, in the order scanpy's gene pool has them).
pub fn score_genes<T: crate::Real>(
    x: &CsrMatrix<T>,
    genes: &[usize],
    pool: &[usize],
    params: &ScoreGenesParams,
) -> Result<GeneScores> {
    check_params(x.n_cols, genes, pool, params)?;
    let means = nan_col_means(x);
    let control = control_genes(&means, genes, pool, params)?;
    let listed = nan_row_means(x, genes);
    let controls = nan_row_means(x, &control);
    Ok(GeneScores {
        scores: listed.iter().zip(&controls).map(|(a, b)| a - b).collect(),
        control,
    })
}

/// The refusals, before any work.
fn check_params(
    n_cols: usize,
    genes: &[usize],
    pool: &[usize],
    params: &ScoreGenesParams,
) -> Result<()> {
    if genes.is_empty() {
        return Err(KernelError::param(
            "gene_list",
            "no valid genes were passed for scoring",
        ));
    }
    if pool.is_empty() {
        return Err(KernelError::param(
            "gene_pool",
            "no valid genes were passed for the reference set",
        ));
    }
    if params.n_bins < 2 {
        return Err(KernelError::param(
            "n_bins",
            format!("must be at least 2, got {}", params.n_bins),
        ));
    }
    if let Some(&c) = genes.iter().chain(pool).find(|&&c| c >= n_cols) {
        return Err(KernelError::Shape(format!(
            "gene column {c} of {} genes",
            n_cols
        )));
    }
    Ok(())
}

/// scanpy's control genes: see the module's documentation.
fn control_genes(
    means: &[f64],
    genes: &[usize],
    pool: &[usize],
    p: &ScoreGenesParams,
) -> Result<Vec<usize>> {
    // The pool genes with a finite mean, in the pool's order, and their `min` ranks.
    let kept: Vec<usize> = pool
        .iter()
        .copied()
        .filter(|&g| means[g].is_finite())
        .collect();
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by(|&a, &b| means[kept[a]].total_cmp(&means[kept[b]]));
    let mut rank = vec![0f64; kept.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && means[kept[order[j + 1]]] == means[kept[order[i]]] {
            j += 1;
        }
        for &o in &order[i..=j] {
            rank[o] = (i + 1) as f64;
        }
        i = j + 1;
    }
    let n_items = (kept.len() as f64 / (p.n_bins - 1) as f64).round_ties_even();
    if n_items < 1.0 {
        return Err(KernelError::param(
            "n_bins",
            format!(
                "{} bins for {} pool genes leave bins without genes; use fewer bins",
                p.n_bins,
                kept.len()
            ),
        ));
    }
    let cut: Vec<f64> = rank.iter().map(|r| (r / n_items).floor()).collect();
    let position: std::collections::HashMap<usize, usize> =
        kept.iter().enumerate().map(|(k, &g)| (g, k)).collect();
    let mut cuts = Vec::with_capacity(genes.len());
    for &g in genes {
        match position.get(&g) {
            Some(&k) => cuts.push(cut[k]),
            None => {
                return Err(KernelError::param(
                    "gene_list",
                    format!("gene column {g} is not in the gene pool (or its mean is not finite)"),
                ))
            }
        }
    }
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    let listed: std::collections::HashSet<usize> = genes.iter().copied().collect();
    let mut rng = NumpyRandomState::new(p.random_state);
    let mut control = std::collections::BTreeSet::new();
    for c in cuts {
        let in_bin: Vec<usize> = kept
            .iter()
            .zip(&cut)
            .filter(|&(g, &k)| k == c && (p.ctrl_as_ref || !listed.contains(g)))
            .map(|(&g, _)| g)
            .collect();
        let drawn: Vec<usize> = if p.ctrl_size < in_bin.len() {
            rng.permutation(in_bin.len() as u64)[..p.ctrl_size]
                .iter()
                .map(|&i| in_bin[i as usize])
                .collect()
        } else {
            in_bin
        };
        control.extend(drawn.into_iter().filter(|g| !listed.contains(g)));
    }
    if control.is_empty() {
        return Err(KernelError::param(
            "ctrl_size",
            format!(
                "no control genes found in any bin{}",
                if p.ctrl_as_ref {
                    " (try ctrl_as_ref=False)"
                } else {
                    ""
                }
            ),
        ));
    }
    Ok(control.into_iter().collect())
}

/// Each column's mean over the rows, NaN values left out (a column of NaN only: NaN).
fn nan_col_means<T: crate::Real>(x: &CsrMatrix<T>) -> Vec<f64> {
    // Sums and NaN counts side by side, over fixed chunks of rows added in order: the same
    // bits on any number of threads.
    let g = x.n_cols;
    let t = crate::stats::chunked_sum(
        x.n_rows,
        crate::stats::DENSE_CHUNK_ROWS,
        2 * g,
        |rows, acc| {
            let (sums, nans) = acc.split_at_mut(g);
            for i in rows {
                let (c, v) = x.row(i);
                for (&c, v) in c.iter().zip(v) {
                    let v = v.to_f64();
                    if v.is_nan() {
                        nans[c as usize] += 1.0;
                    } else {
                        sums[c as usize] += v;
                    }
                }
            }
        },
    );
    let (sums, nans) = t.split_at(g);
    sums.iter()
        .zip(nans)
        .map(|(s, &n)| s / (x.n_rows as f64 - n))
        .collect()
}

/// Each row's mean over the columns `cols`, NaN values left out.
fn nan_row_means<T: crate::Real>(x: &CsrMatrix<T>, cols: &[usize]) -> Vec<f64> {
    let mut wanted = vec![false; x.n_cols];
    cols.iter().for_each(|&c| wanted[c] = true);
    (0..x.n_rows)
        .into_par_iter()
        .map(|i| {
            let (c, v) = x.row(i);
            let (mut s, mut nan) = (0f64, 0usize);
            for (&cc, vv) in c.iter().zip(v) {
                if wanted[cc as usize] {
                    let f = vv.to_f64();
                    if f.is_nan() {
                        nan += 1;
                    } else {
                        s += f;
                    }
                }
            }
            s / (cols.len() - nan) as f64
        })
        .collect()
}
