//! `normalize_total` (scanpy's `pp.normalize_total`): scales each cell to the same total.
//! Changes X in place; like scanpy with `key_added=None`, writes nothing else.

use super::{kernel_error, x_csr_mut};
use crate::{AnnData, Result};
use sc_kernels::normalize::{NormalizeParams, NormalizeResult};

/// Normalizes X; returns what the kernel used (the target sum and per-cell totals).
pub fn normalize_total(adata: &mut AnnData, params: &NormalizeParams) -> Result<NormalizeResult> {
    let comm = super::comm_of(adata);
    if let Some((ctx, x, block)) = super::streamed_csr_mut(adata) {
        sc_kernels::normalize::normalize_total_streamed(&ctx, x, params, block)
    } else if let Some((ctx, x)) = super::device_csr_mut(adata) {
        sc_kernels::normalize::normalize_total_gpu_across(&ctx, x, params, &*comm)
    } else {
        sc_kernels::normalize::normalize_total_across(x_csr_mut(adata), params, &*comm)
    }
    .map_err(kernel_error("normalize_total"))
}
