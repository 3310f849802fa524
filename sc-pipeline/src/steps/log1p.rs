//! `log1p` (scanpy's `pp.log1p`): X = ln(1 + X) (or log base `base`), in place.
//! Writes `uns['log1p']` with `base` when one is given (anndata stores nothing for None).

use super::step::{
    no_budget_check, no_device_bytes, no_input_check, OnGenerated, Phase, Step, StepEnv,
};
use super::{kernel_error, x_csr_mut};
use crate::anndata::Value;
use crate::steps::GeneratedPass;
use crate::{AnnData, Result};

/// The pipeline's row: natural logarithm.
pub(crate) const ROW: Step = Step {
    name: "log1p",
    phase: Phase::PerCell,
    enabled: |c| c.log1p,
    run: |a, _| log1p(a, None).map(|()| String::new()),
    generated: Some(OnGenerated {
        name: "log1p",
        run: run_generated,
    }),
    device_bytes: no_device_bytes,
    kernels: &[sc_kernels::log1p::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// Lazy: each block is transformed as it is generated.
fn run_generated(a: &mut AnnData, _: &StepEnv<'_>, pass: &mut GeneratedPass<'_>) -> Result<String> {
    a.uns
        .insert("log1p".into(), Value::dict(Vec::<(&str, _)>::new()));
    pass.chain.log1p = true;
    Ok("lazy, applied to each block as it is generated".into())
}

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
