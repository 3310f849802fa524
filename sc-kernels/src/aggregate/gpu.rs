//! The GPU twin of [`super::aggregate`] on a device CSR X (every function but the median): the
//! same blocks of each group's rows, gathered densely a wave at a time, each block's numbers per
//! column over its stored values (`aggregate.cu`), added to their groups' in block order, so the
//! results are the host's bits.

use super::{AggFuncs, Aggregates, Plan, Running};
use crate::error::{KernelError, Result};
use crate::gpu::dense_reduce::{PARTIAL_BYTES, WAVE_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_for, DeviceCsr, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "aggregate",
    source: include_str!("aggregate.cu"),
};

/// The module [`aggregate_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::aggregate`] of the rows of `x` on `ctx`'s GPU, bit for bit, for every function but
/// the median (refused: the host computes it). Should a stored value have the bits that mark a
/// value not stored in the gathered rows (a particular NaN), the host aggregates a copy instead.
pub fn aggregate_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    groups: &[u32],
    n_groups: usize,
    funcs: AggFuncs,
    dof: u32,
) -> Result<Aggregates> {
    if funcs.median {
        return Err(KernelError::Unsupported(
            "the median of groups on the GPU (the host computes it)".into(),
        ));
    }
    let mut trace = PhaseTrace::new(ctx, "aggregate");
    let plan = Plan::new(x.n_rows, x.n_cols, groups, n_groups, funcs)?;
    trace.mark("groups (host)")?;
    let size = n_groups * x.n_cols;
    let run = [
        ctx.zeros::<f64>(size)?,
        ctx.zeros::<f64>(size)?,
        ctx.zeros::<f64>(size)?,
    ];
    let run_nonzero = ctx.zeros::<u64>(size)?;
    let clash = ctx.zeros::<u32>(1)?;
    let blocks = plan.blocks();
    if x.n_cols > 0 && !blocks.is_empty() {
        let g = x.n_cols;
        let tile_rows = (WAVE_BYTES / (4 * g)).max(super::BLOCK_ROWS);
        let max_blocks = (PARTIAL_BYTES / (32 * g)).max(1);
        let kept = plan.starts[n_groups];
        let order = ctx.upload(&plan.order[..kept])?;
        let tile = ctx.alloc::<f32>(tile_rows.min(kept) * g)?;
        let part = [
            ctx.alloc::<f64>(max_blocks.min(blocks.len()) * g)?,
            ctx.alloc::<f64>(max_blocks.min(blocks.len()) * g)?,
            ctx.alloc::<f64>(max_blocks.min(blocks.len()) * g)?,
        ];
        let part_nonzero = ctx.alloc::<u64>(max_blocks.min(blocks.len()) * g)?;
        let (gather, of_blocks, combine) = (
            ctx.function(SRC, "aggregate_gather")?,
            ctx.function(SRC, "aggregate_blocks")?,
            ctx.function(SRC, "aggregate_combine")?,
        );
        let mut seen_rows = vec![0u64; n_groups];
        let mut next = 0;
        while next < blocks.len() {
            // A wave: the following blocks while their rows fit the tile and their numbers the
            // partials (at least one block).
            let p0 = blocks[next].rows.start;
            let mut end = next + 1;
            while end < blocks.len()
                && end - next < max_blocks
                && blocks[end].rows.end - p0 <= tile_rows
            {
                end += 1;
            }
            let wave = &blocks[next..end];
            let rows = wave[wave.len() - 1].rows.end - p0;
            let first: Vec<u64> = std::iter::once(0)
                .chain(wave.iter().map(|b| (b.rows.end - p0) as u64))
                .collect();
            let group: Vec<u32> = wave.iter().map(|b| b.group as u32).collect();
            let counted: Vec<u64> = wave.iter().map(|b| b.rows.len() as u64).collect();
            let before: Vec<u64> = wave
                .iter()
                .map(|b| {
                    let r = seen_rows[b.group];
                    seen_rows[b.group] += b.rows.len() as u64;
                    r
                })
                .collect();
            let (first, group) = (ctx.upload(&first)?, ctx.upload(&group)?);
            let (counted, before) = (ctx.upload(&counted)?, ctx.upload(&before)?);
            let (n_rows, n_cols, n_blocks) = (rows as u64, g as u64, wave.len() as u64);

            let mut l = ctx.launcher(&gather);
            let start = p0 as u64;
            l.arg(&x.indptr)
                .arg(&x.indices)
                .arg(&x.data)
                .arg(&order)
                .arg(&start);
            l.arg(&n_rows).arg(&n_cols).arg(&tile).arg(&clash);
            ctx.launch(l, ctx.filling_rows(rows), "aggregate_gather")?;

            let mut l = ctx.launcher(&of_blocks);
            l.arg(&tile).arg(&n_cols).arg(&first).arg(&n_blocks);
            l.arg(&part[0])
                .arg(&part_nonzero)
                .arg(&part[1])
                .arg(&part[2]);
            ctx.launch(l, grid_for(wave.len() * g), "aggregate_blocks")?;

            let mut l = ctx.launcher(&combine);
            l.arg(&part[0])
                .arg(&part_nonzero)
                .arg(&part[1])
                .arg(&part[2]);
            l.arg(&n_blocks)
                .arg(&n_cols)
                .arg(&group)
                .arg(&before)
                .arg(&counted);
            l.arg(&run[0]).arg(&run_nonzero).arg(&run[1]).arg(&run[2]);
            ctx.launch(l, grid_for(g), "aggregate_combine")?;
            next = end;
        }
    }
    trace.mark("blocks")?;
    if ctx.download(&clash)?[0] != 0 {
        let host = x.download(ctx)?;
        return super::aggregate(&host, groups, n_groups, funcs, dof);
    }
    let m = plan.moments;
    let take = |on: bool, v: &_| if on { ctx.download(v) } else { Ok(Vec::new()) };
    let running = Running {
        sum: take(m.sum, &run[0])?,
        nonzero: if m.nonzero {
            ctx.download(&run_nonzero)?
        } else {
            Vec::new()
        },
        mean: take(m.welford, &run[1])?,
        m2: take(m.welford, &run[2])?,
    };
    trace.mark("download")?;
    Ok(plan.finish(dof, running))
}
