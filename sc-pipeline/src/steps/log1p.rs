//! `log1p` (scanpy's `pp.log1p`): X = ln(1 + X) (or log base `base`), in place.
//! Writes `uns['log1p']` with `base` when one is given (anndata stores nothing for None).

use super::{kernel_error, x_csr_mut};
use crate::anndata::Value;
use crate::{AnnData, Result};

pub fn log1p(adata: &mut AnnData, base: Option<f64>) -> Result<()> {
    if let Some((ctx, x, block)) = super::streamed_csr_mut(adata) {
        sc_kernels::log1p::log1p_streamed(&ctx, x, base, block)
    } else if let Some((ctx, x)) = super::device_csr_mut(adata) {
        sc_kernels::log1p::log1p_gpu(&ctx, x, base)
    } else {
        sc_kernels::log1p::log1p(x_csr_mut(adata), base)
    }
    .map_err(kernel_error("log1p"))?;
    let entries: Vec<(&str, Value)> = base
        .map(|b| ("base", Value::float(b)))
        .into_iter()
        .collect();
    adata.uns.insert("log1p".to_string(), Value::dict(entries));
    Ok(())
}
