//! The GPU twin of [`super::normalize_total`]: totals and the division on the device, the
//! target (median) and factors by the CPU's code, so both round identically.

use super::{
    check_params, high_across, result, target_and_factors, target_and_factors_across,
    NormalizeParams, NormalizeResult,
};
use crate::comm::{Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::warps_for_rows;
use crate::gpu::streamed::{csr_blocks, for_each_csr_block, update_values_in_place};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "normalize",
    source: include_str!("normalize.cu"),
};

/// Each row's total over the genes `keep` marks (all when `None`); `bad` (when given) is set to
/// 1 when a value is not a count.
fn totals(
    ctx: &GpuContext,
    x: &DeviceCsr,
    keep: Option<&DeviceVec<u8>>,
    bad: Option<&DeviceVec<u32>>,
) -> Result<DeviceVec<f32>> {
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
    match bad {
        Some(b) => l.arg(b),
        None => l.arg(&null),
    };
    ctx.launch(l, warps_for_rows(x.n_rows), "row_totals")?;
    Ok(counts)
}

/// Normalizes a device matrix in place. Values that are not counts (negative, NaN, infinite) are
/// refused before anything is written.
pub fn normalize_total_gpu(
    ctx: &GpuContext,
    x: &mut DeviceCsr,
    params: &NormalizeParams,
) -> Result<NormalizeResult> {
    normalize_total_gpu_across(ctx, x, params, &SingleRank)
}

/// [`normalize_total_gpu`] of one rank's cells (see [`super::normalize_total_across`]).
pub fn normalize_total_gpu_across(
    ctx: &GpuContext,
    x: &mut DeviceCsr,
    params: &NormalizeParams,
    comm: &dyn Communicator,
) -> Result<NormalizeResult> {
    check_params(params)?;
    let n = x.n_rows as u64;
    if let (Some(t), false) = (params.target_sum, params.exclude_highly_expressed) {
        // One fused pass; the factors are then the CPU's own formula on the same totals
        // (which stay on the device when the per-cell arrays are not asked for).
        let mut trace = PhaseTrace::new(ctx, "normalize_total");
        let counts = match params.per_cell {
            true => Some(ctx.alloc::<f32>(x.n_rows)?),
            false => None,
        };
        let target = t as f32;
        let null = 0u64;
        let bad = ctx.zeros::<u32>(1)?;
        let f = ctx.function(SRC, "normalize_rows")?;
        trace.mark("module and memory")?;
        // The fused kernel writes as it reads, so the values are checked in a pass before it;
        // it reads the flag and writes nothing when it is set (no round trip in between).
        flag_not_counts(ctx, x, &bad)?;
        trace.mark("check")?;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr).arg(&x.data).arg(&n).arg(&target);
        match &counts {
            Some(c) => l.arg(c),
            None => l.arg(&null),
        };
        l.arg(&bad);
        ctx.launch(l, warps_for_rows(x.n_rows), "normalize_rows")?;
        trace.mark("kernel")?;
        if ctx.download(&bad)?[0] != 0 {
            return Err(not_counts_error(STEP));
        }
        let counts_h = match &counts {
            Some(c) => ctx.download(c)?,
            None => Vec::new(),
        };
        trace.mark("download")?;
        let (target, factor) = target_and_factors(&counts_h, params);
        let out = result(params, target, &counts_h, &factor, None);
        trace.mark("host")?;
        return Ok(out);
    }
    // The totals' pass also checks that every value is a count: the division (the only write)
    // is refused before it starts, with no pass of its own.
    let bad = ctx.zeros::<u32>(1)?;
    let mut counts = totals(ctx, x, None, Some(&bad))?;
    if ctx.download(&bad)?[0] != 0 {
        return Err(not_counts_error(STEP));
    }
    let mut excluded = None;
    if params.exclude_highly_expressed {
        let high = mark_high(ctx, x, &counts, params.max_fraction)?;
        let mut high_h = ctx.download(&high)?;
        if comm.size() > 1 {
            let mut marks = high_of(&high_h, x.n_cols);
            high_across(&mut marks, comm)?;
            high_h = marks.iter().map(|&h| h as u8).collect();
        }
        let keep = keep_of(&high_h, x.n_cols);
        counts = totals(ctx, x, Some(&ctx.upload(&keep)?), None)?;
        excluded = Some(high_of(&high_h, x.n_cols));
    }
    let counts_h = ctx.download(&counts)?;
    let (target, factor) = target_and_factors_across(&counts_h, params, comm)?;
    divide_rows(ctx, x, &factor)?;
    Ok(result(params, target, &counts_h, &factor, excluded))
}

const STEP: &str = "normalize_total";

/// The refusal of a matrix whose values are not all counts (nothing was written), by `step`.
fn not_counts_error(step: &str) -> KernelError {
    KernelError::Unsupported(format!(
        "X holds negative, NaN or infinite values; {step} needs counts"
    ))
}

/// Sets `bad` to 1 when a stored value of `x` is not a count (queued, not waited for).
fn flag_not_counts(ctx: &GpuContext, x: &DeviceCsr, bad: &DeviceVec<u32>) -> Result<()> {
    let f = ctx.function(SRC, "not_counts")?;
    let nnz = x.nnz() as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.data).arg(&nnz).arg(bad);
    ctx.launch(l, ctx.filling_grid(x.nnz().div_ceil(4)), "not_counts")
}

/// Refuses (for `step`) a device matrix with a stored value that is not a count (negative,
/// NaN, infinite), in one pass over its values.
pub fn check_counts_gpu(ctx: &GpuContext, x: &DeviceCsr, step: &str) -> Result<()> {
    let bad = ctx.zeros::<u32>(1)?;
    flag_not_counts(ctx, x, &bad)?;
    if ctx.download(&bad)?[0] != 0 {
        return Err(not_counts_error(step));
    }
    Ok(())
}

/// Whether every one of the device values `data` is a whole number ([`super::all_whole`]).
pub fn all_whole_gpu(ctx: &GpuContext, data: &DeviceVec<f32>) -> Result<bool> {
    let bad = ctx.zeros::<u32>(1)?;
    let f = ctx.function(SRC, "not_whole")?;
    let n = data.len() as u64;
    let mut l = ctx.launcher(&f);
    l.arg(data).arg(&n).arg(&bad);
    ctx.launch(l, ctx.filling_grid(data.len().div_ceil(4)), "not_whole")?;
    Ok(ctx.download(&bad)?[0] == 0)
}

/// Marks (1) the genes that make up more than `max_fraction` of some row's total.
fn mark_high(
    ctx: &GpuContext,
    x: &DeviceCsr,
    counts: &DeviceVec<f32>,
    max_fraction: f64,
) -> Result<DeviceVec<u8>> {
    let high = ctx.zeros::<u8>(x.n_cols.max(1))?;
    let f = ctx.function(SRC, "mark_high")?;
    let n = x.n_rows as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(counts)
        .arg(&max_fraction)
        .arg(&high);
    ctx.launch(l, warps_for_rows(x.n_rows), "mark_high")?;
    Ok(high)
}

/// The genes marked by [`mark_high`] (`marks` has at least `n_cols` entries).
fn high_of(marks: &[u8], n_cols: usize) -> Vec<bool> {
    marks[..n_cols].iter().map(|&h| h != 0).collect()
}

/// The kernel's keep mask (1: counted) of the genes not marked high; never empty.
fn keep_of(marks: &[u8], n_cols: usize) -> Vec<u8> {
    let keep: Vec<u8> = marks[..n_cols].iter().map(|&h| (h == 0) as u8).collect();
    if keep.is_empty() {
        vec![1]
    } else {
        keep
    }
}

/// Divides each row by its factor (a zero factor leaves the row as it is).
fn divide_rows(ctx: &GpuContext, x: &mut DeviceCsr, factor: &[f32]) -> Result<()> {
    let d_factor = ctx.upload(if factor.is_empty() {
        &[1f32][..]
    } else {
        factor
    })?;
    let f = ctx.function(SRC, "divide_rows")?;
    let n = x.n_rows as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&x.data).arg(&n).arg(&d_factor);
    ctx.launch(l, warps_for_rows(x.n_rows), "divide_rows")
}

/// `normalize_total` of a host matrix streamed through the device in row blocks of at most
/// `block_bytes`, the values written back in place. With a target sum and no exclusion each
/// block runs the in-memory kernel (the same values bit for bit); the median target and
/// `exclude_highly_expressed` first take the totals of every row (and the highly expressed
/// genes of every block) in their own passes, then divide. The values must be counts (the
/// pipeline checks them when it reads): a block that is not is refused after the blocks
/// before it were written back.
pub fn normalize_total_streamed(
    ctx: &GpuContext,
    x: &mut CsrMatrix<f32>,
    params: &NormalizeParams,
    block_bytes: usize,
) -> Result<NormalizeResult> {
    check_params(params)?;
    let blocks = csr_blocks(x, block_bytes);
    if let (Some(_), false) = (params.target_sum, params.exclude_highly_expressed) {
        let mut out: Option<NormalizeResult> = None;
        // The fused kernel reads offsets and values, never the column indices.
        update_values_in_place(ctx, x, &blocks, false, |block, _| {
            let r = normalize_total_gpu(ctx, block, params)?;
            match &mut out {
                None => out = Some(r),
                Some(o) => {
                    o.counts_per_cell.extend(r.counts_per_cell);
                    o.norm_factor.extend(r.norm_factor);
                }
            }
            Ok(())
        })?;
        return Ok(out.unwrap_or_else(|| {
            let (target, factor) = target_and_factors::<f32>(&[], params);
            result(params, target, &[], &factor, None)
        }));
    }
    let mut excluded = None;
    let mut keep = None;
    if params.exclude_highly_expressed {
        let mut high = vec![false; x.n_cols];
        for_each_csr_block(ctx, x, &blocks, |block, _| {
            let counts = totals(ctx, &block, None, None)?;
            let marks = ctx.download(&mark_high(ctx, &block, &counts, params.max_fraction)?)?;
            for (h, m) in high.iter_mut().zip(high_of(&marks, block.n_cols)) {
                *h |= m;
            }
            Ok(())
        })?;
        let marks: Vec<u8> = high.iter().map(|&h| h as u8).collect();
        keep = Some(ctx.upload(&keep_of(&marks, x.n_cols))?);
        excluded = Some(high);
    }
    let mut counts_h = Vec::with_capacity(x.n_rows);
    for_each_csr_block(ctx, x, &blocks, |block, _| {
        counts_h.extend(ctx.download(&totals(ctx, &block, keep.as_ref(), None)?)?);
        Ok(())
    })?;
    let (target, factor) = target_and_factors(&counts_h, params);
    update_values_in_place(ctx, x, &blocks, false, |block, rows| {
        divide_rows(ctx, block, &factor[rows])
    })?;
    Ok(result(params, target, &counts_h, &factor, excluded))
}
