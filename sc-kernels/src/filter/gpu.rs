//! GPU twins of the filters: the statistics on the device ([`crate::gpu::reduce`]), the
//! thresholds by the CPU's code. The compaction itself is [`crate::gpu::compact`].

use super::{from_stats, CellFilter, FilterResult, GeneFilter, Stats};
use crate::comm::{Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::streamed::{for_each_row_block, HostRows, RowBlocks};
use crate::gpu::{reduce, DeviceCsr, GpuContext};

/// Which cells of a device matrix pass `filter`.
pub fn filter_cells_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    filter: CellFilter,
) -> Result<FilterResult> {
    from_stats::<f32, _, _>(
        filter.rule(),
        Stats {
            sums: || Ok(reduce::row_stats(ctx, x)?.0),
            positive: || Ok(reduce::row_stats(ctx, x)?.1),
        },
    )
}

/// Which genes of a device matrix pass `filter`.
pub fn filter_genes_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    filter: GeneFilter,
) -> Result<FilterResult> {
    filter_genes_gpu_across(ctx, x, filter, &SingleRank)
}

/// [`filter_genes_gpu`] of one rank's cells, the genes' statistics over all ranks of `comm`.
pub fn filter_genes_gpu_across(
    ctx: &GpuContext,
    x: &DeviceCsr,
    filter: GeneFilter,
    comm: &dyn Communicator,
) -> Result<FilterResult> {
    from_stats::<f32, _, _>(
        filter.rule(),
        Stats {
            sums: || Ok(reduce::col_stats(ctx, x)?.0),
            positive: || Ok(reduce::col_stats(ctx, x)?.1),
        }
        .across(comm),
    )
}

/// Row statistics (sums, values above zero) of a matrix made on the device block by block, or
/// column statistics (`columns`).
fn block_stats(
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    columns: bool,
) -> Result<(Vec<f64>, Vec<i64>)> {
    let (mut sums, mut positive) = if columns {
        (vec![0.0; src.n_cols()], vec![0; src.n_cols()])
    } else {
        (
            Vec::with_capacity(src.n_rows()),
            Vec::with_capacity(src.n_rows()),
        )
    };
    for_each_row_block(ctx, src, |block, _| {
        if columns {
            let (s, p) = reduce::col_stats(ctx, &block)?;
            crate::stats::add_into(&mut sums, &s);
            crate::stats::add_into(&mut positive, &p);
        } else {
            let (s, p) = reduce::row_stats(ctx, &block)?;
            sums.extend(s);
            positive.extend(p);
        }
        Ok(())
    })?;
    Ok((sums, positive))
}

fn from_block_stats(
    rule: super::Rule,
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    columns: bool,
) -> Result<FilterResult> {
    // The rule reads one of the two statistics.
    let stats = || block_stats(ctx, src, columns);
    from_stats::<f32, _, _>(
        rule,
        Stats {
            sums: || Ok(stats()?.0),
            positive: || Ok(stats()?.1),
        },
    )
}

/// Which cells of a host matrix pass `filter`, its statistics streamed through the device in
/// row blocks of at most `block_bytes`.
pub fn filter_cells_streamed(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    filter: CellFilter,
    block_bytes: usize,
) -> Result<FilterResult> {
    let src = HostRows::new(x, block_bytes);
    filter_cells_blocks(ctx, &src, filter)
}

/// Which cells of a matrix made on the device block by block pass `filter`.
pub fn filter_cells_blocks(
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    filter: CellFilter,
) -> Result<FilterResult> {
    from_block_stats(filter.rule(), ctx, src, false)
}

/// Which genes of a host matrix pass `filter`, as [`filter_cells_streamed`].
pub fn filter_genes_streamed(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    filter: GeneFilter,
    block_bytes: usize,
) -> Result<FilterResult> {
    let src = HostRows::new(x, block_bytes);
    filter_genes_blocks(ctx, &src, filter)
}

/// Which genes of a matrix made on the device block by block pass `filter`.
pub fn filter_genes_blocks(
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    filter: GeneFilter,
) -> Result<FilterResult> {
    from_block_stats(filter.rule(), ctx, src, true)
}
