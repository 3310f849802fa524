//! `score_genes` (scanpy's `tl.score_genes`): each cell's mean over a gene set less its mean
//! over control genes of the same expression bins, into `obs[score_name]` (float64), with
//! scanpy's control genes for the same seed (`sc_kernels::score_genes`). The Python front end
//! resolves the names (and picks `.raw`, a layer or X); not a row of the command's step table.
//! A CSR X on the GPU is scored there (the host's control genes and bits); another GPU X is
//! read back.

use super::kernel_error;
use crate::anndata::ArrayData;
use crate::{AnnData, Result};
use sc_kernels::score_genes::{score_genes as scores, score_genes_gpu, ScoreGenesParams};

/// Writes `obs[score_name]` for the genes (columns of X) `genes` against controls from `pool`;
/// returns how many control genes were used. X is only read.
pub fn score_genes(
    adata: &mut AnnData,
    genes: &[usize],
    pool: &[usize],
    params: &ScoreGenesParams,
    score_name: &str,
) -> Result<usize> {
    let found = match super::device_csr(adata) {
        Some((ctx, x)) => score_genes_gpu(&ctx, x, genes, pool, params),
        None => scores(&*adata.x.to_csr()?, genes, pool, params),
    }
    .map_err(kernel_error("score_genes"))?;
    adata
        .obs
        .set_values(score_name, ArrayData::F64(found.scores))?;
    Ok(found.control.len())
}
