//! `filter_cells` and `filter_genes` (scanpy's `pp.filter_cells` / `pp.filter_genes`).
//!
//! `filter_cells` writes `obs['n_genes']` (or `obs['n_counts']`) and keeps the passing cells;
//! `filter_genes` writes `var['n_cells']` (or `var['n_counts']`) and keeps the passing genes.

use super::kernel_error;
use crate::{AnnData, Result};
use sc_kernels::filter::{CellFilter, FilterResult, GeneFilter};

/// Keeps the cells that pass `filter`; returns how many were removed.
pub fn filter_cells(adata: &mut AnnData, filter: CellFilter) -> Result<usize> {
    let result = if let Some((ctx, x, block)) = super::streamed_csr(adata) {
        sc_kernels::filter::filter_cells_streamed(&ctx, x, filter, block)
    } else if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::filter::filter_cells_gpu(&ctx, x, filter)
    } else {
        sc_kernels::filter::filter_cells(adata.x.to_csr()?.as_ref(), filter)
    }
    .map_err(kernel_error("filter_cells"))?;
    keep_cells(adata, result)
}

/// Writes the filter's column into `obs` and keeps the passing cells; returns how many were
/// removed.
pub(crate) fn keep_cells(adata: &mut AnnData, result: FilterResult) -> Result<usize> {
    let removed = result.keep.len() - result.n_kept();
    adata.obs.set_values(result.name, result.values.into())?;
    adata.select_obs(&result.keep)?;
    Ok(removed)
}

/// Keeps the genes that pass `filter`; returns how many were removed.
pub fn filter_genes(adata: &mut AnnData, filter: GeneFilter) -> Result<usize> {
    let result = if let Some((ctx, x, block)) = super::streamed_csr(adata) {
        sc_kernels::filter::filter_genes_streamed(&ctx, x, filter, block)
    } else if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::filter::filter_genes_gpu_across(&ctx, x, filter, adata.comm())
    } else {
        sc_kernels::filter::filter_genes_across(adata.x.to_csr()?.as_ref(), filter, adata.comm())
    }
    .map_err(kernel_error("filter_genes"))?;
    keep_genes(adata, result)
}

/// Writes the filter's column into `var` and keeps the passing genes; returns how many were
/// removed.
pub(crate) fn keep_genes(adata: &mut AnnData, result: FilterResult) -> Result<usize> {
    let removed = result.keep.len() - result.n_kept();
    adata.var.set_values(result.name, result.values.into())?;
    adata.select_var(&result.keep)?;
    Ok(removed)
}
