//! `normalize_total` (scanpy's `pp.normalize_total`): scales each cell to the same total.
//! Changes X in place; like scanpy with `key_added=None`, writes nothing else.

use super::step::{
    no_budget_check, no_device_bytes, no_input_check, OnGenerated, Phase, Step, StepEnv,
};
use super::{kernel_error, x_csr_mut};
use crate::steps::{GeneratedPass, PipelineConfig};
use crate::{AnnData, Result};
use sc_kernels::normalize::{NormalizeParams, NormalizeResult};

/// The pipeline's row: `normalize_total(target_sum=...)`, the median of the totals when the
/// target is `None`.
pub(crate) const ROW: Step = Step {
    name: "normalize_total",
    phase: Phase::PerCell,
    enabled: |c| c.target_sum.is_some(),
    run: run_step,
    generated: Some(OnGenerated {
        name: "normalize_total",
        run: run_generated,
    }),
    device_bytes: no_device_bytes,
    kernels: &[sc_kernels::normalize::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

fn target_sum(env: &StepEnv<'_>) -> Option<f64> {
    env.config
        .target_sum
        .expect("the row runs only with a target")
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let used = normalize_total(
        a,
        &NormalizeParams {
            target_sum: target_sum(env),
            // The pipeline stores no per-cell arrays (scanpy's default, key_added=None).
            per_cell: false,
            ..Default::default()
        },
    )?;
    Ok(format!("target_sum={}", used.target_sum))
}

/// Lazy: each block is normalized as it is generated, to a fixed target (the generated run
/// refuses the median, which would need every cell first).
fn run_generated(
    _: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let target = target_sum(env).expect("the generated run refuses the median target");
    pass.chain.normalize = generated_params(env.config);
    Ok(format!(
        "target_sum={target}: lazy, applied to each block as it is generated"
    ))
}

/// What normalize_total applies to each block on a run whose X is never held (`None`: the
/// step does not run, or would take the median, which such a run refuses).
pub(crate) fn generated_params(config: &PipelineConfig) -> Option<NormalizeParams> {
    Some(NormalizeParams {
        target_sum: Some(config.target_sum??),
        per_cell: false,
        ..Default::default()
    })
}

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
