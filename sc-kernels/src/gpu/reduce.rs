//! Per-row and per-column statistics of a device CSR matrix (`reduce.cu`), returned to the host:
//! they are per-cell or per-gene vectors that the steps' host code thresholds, bins or stores.

use super::module_cache::KernelSource;
use super::{DeviceCsr, DeviceVec, GpuContext};
use crate::error::Result;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "reduce",
    source: include_str!("reduce.cu"),
};

/// A grid of warps, one per row (folded by the kernels' grid-stride loops).
pub(crate) fn warps_for_rows(rows: usize) -> LaunchConfig {
    let warps_per_block = (super::BLOCK / 32) as usize;
    LaunchConfig {
        grid_dim: (
            rows.div_ceil(warps_per_block).clamp(1, 1 << 20) as u32,
            1,
            1,
        ),
        block_dim: (super::BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Per row: the sum of the values and the number of values above zero.
pub fn row_stats(ctx: &GpuContext, x: &DeviceCsr) -> Result<(Vec<f64>, Vec<i64>)> {
    let sums = ctx.alloc::<f64>(x.n_rows)?;
    let pos = ctx.alloc::<i64>(x.n_rows)?;
    let f = ctx.function(SRC, "row_stats")?;
    let n = x.n_rows as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&x.data).arg(&n).arg(&sums).arg(&pos);
    ctx.launch(l, warps_for_rows(x.n_rows), "row_stats")?;
    Ok((ctx.download(&sums)?, ctx.download(&pos)?))
}

/// What the column moments are taken of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transform {
    /// The values.
    Identity,
    /// `expm1(x)` in f32 (seurat's HVG after a natural-log `log1p`).
    Expm1,
    /// `expm1(x ln(base))` in f64 (after `log1p` with another base).
    Expm1Base(f64),
}

/// Column sums, sums of squares and counts of values above zero, each `n_batches x n_cols`
/// (row-major) when `batches` gives each row's batch code, else `n_cols`.
pub struct ColumnMoments {
    pub sums: Vec<f64>,
    pub sq: Vec<f64>,
    pub positive: Vec<i64>,
}

/// The moments of `transform(x)`'s columns, optionally per batch (`(codes, n_batches)`, codes
/// already on the device, one per row and below `n_batches`).
pub fn col_moments(
    ctx: &GpuContext,
    x: &DeviceCsr,
    transform: Transform,
    batches: Option<(&DeviceVec<u32>, usize)>,
) -> Result<ColumnMoments> {
    let nb = batches.map_or(1, |b| b.1);
    let len = nb * x.n_cols;
    let sums = ctx.zeros::<f64>(len)?;
    let sq = ctx.zeros::<f64>(len)?;
    let pos = ctx.zeros::<u64>(len)?;
    let (mode, ln_base) = match transform {
        Transform::Identity => (0i32, 0.0f64),
        Transform::Expm1 => (1, 0.0),
        Transform::Expm1Base(b) => (2, b.ln()),
    };
    let f = ctx.function(SRC, "col_moments")?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let null: u64 = 0;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&g);
    match batches {
        Some((codes, _)) => l.arg(codes),
        None => l.arg(&null),
    };
    l.arg(&mode).arg(&ln_base).arg(&sums).arg(&sq).arg(&pos);
    ctx.launch(l, warps_for_rows(x.n_rows), "col_moments")?;
    Ok(ColumnMoments {
        sums: ctx.download(&sums)?,
        sq: ctx.download(&sq)?,
        positive: ctx.download(&pos)?.into_iter().map(|c| c as i64).collect(),
    })
}

/// Per column: the sum of the values and the number of values above zero.
pub fn col_stats(ctx: &GpuContext, x: &DeviceCsr) -> Result<(Vec<f64>, Vec<i64>)> {
    let m = col_moments(ctx, x, Transform::Identity, None)?;
    Ok((m.sums, m.positive))
}
