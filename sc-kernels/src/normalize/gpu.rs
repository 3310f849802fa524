//! The GPU twin of [`super::normalize_total`]: totals and the division on the device, the
//! target (median) and factors by the CPU's code, so both round identically.

use super::{check_params, result, target_and_factors, NormalizeParams, NormalizeResult};
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::warps_for_rows;
use crate::gpu::{DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "normalize",
    source: include_str!("normalize.cu"),
};

fn totals(ctx: &GpuContext, x: &DeviceCsr, keep: Option<&DeviceVec<u8>>) -> Result<DeviceVec<f32>> {
    let counts = ctx.alloc::<f32>(x.n_rows)?;
    let f = ctx.function(SRC, "row_totals")?;
    let n = x.n_rows as u64;
    let null = 0u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&x.indices).arg(&x.data).arg(&n);
    match keep {
        Some(k) => l.arg(k),
        None => l.arg(&null),
    };
    l.arg(&counts);
    ctx.launch(l, warps_for_rows(x.n_rows), "row_totals")?;
    Ok(counts)
}

/// Normalizes a device matrix in place (finite values, as the pipeline checks before upload).
pub fn normalize_total_gpu(
    ctx: &GpuContext,
    x: &mut DeviceCsr,
    params: &NormalizeParams,
) -> Result<NormalizeResult> {
    check_params(params)?;
    let n = x.n_rows as u64;
    if let (Some(t), false) = (params.target_sum, params.exclude_highly_expressed) {
        // One fused pass; the factors are then the CPU's own formula on the same totals.
        let counts = ctx.alloc::<f32>(x.n_rows)?;
        let target = t as f32;
        let f = ctx.function(SRC, "normalize_rows")?;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr)
            .arg(&x.data)
            .arg(&n)
            .arg(&target)
            .arg(&counts);
        ctx.launch(l, warps_for_rows(x.n_rows), "normalize_rows")?;
        let counts_h = ctx.download(&counts)?;
        let (target, factor) = target_and_factors(&counts_h, params);
        return Ok(result(target, &counts_h, &factor, None));
    }
    let mut counts = totals(ctx, x, None)?;
    let mut excluded = None;
    if params.exclude_highly_expressed {
        let high = ctx.zeros::<u8>(x.n_cols.max(1))?;
        let f = ctx.function(SRC, "mark_high")?;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr)
            .arg(&x.indices)
            .arg(&x.data)
            .arg(&n)
            .arg(&counts)
            .arg(&params.max_fraction)
            .arg(&high);
        ctx.launch(l, warps_for_rows(x.n_rows), "mark_high")?;
        let high_h: Vec<bool> = ctx.download(&high)?[..x.n_cols]
            .iter()
            .map(|&h| h != 0)
            .collect();
        let keep: Vec<u8> = high_h.iter().map(|&h| (!h) as u8).collect();
        let keep = ctx.upload(if keep.is_empty() { &[1u8][..] } else { &keep })?;
        counts = totals(ctx, x, Some(&keep))?;
        excluded = Some(high_h);
    }
    let counts_h = ctx.download(&counts)?;
    let (target, factor) = target_and_factors(&counts_h, params);
    let d_factor = ctx.upload(if factor.is_empty() {
        &[1f32][..]
    } else {
        &factor
    })?;
    let f = ctx.function(SRC, "divide_rows")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&x.data).arg(&n).arg(&d_factor);
    ctx.launch(l, warps_for_rows(x.n_rows), "divide_rows")?;
    Ok(result(target, &counts_h, &factor, excluded))
}
