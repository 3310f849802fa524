//! GPU twins of the filters: the statistics on the device ([`crate::gpu::reduce`]), the
//! thresholds by the CPU's code. The compaction itself is [`crate::gpu::compact`].

use super::{from_stats, CellFilter, FilterResult, GeneFilter, Stats};
use crate::error::Result;
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
    from_stats::<f32, _, _>(
        filter.rule(),
        Stats {
            sums: || Ok(reduce::col_stats(ctx, x)?.0),
            positive: || Ok(reduce::col_stats(ctx, x)?.1),
        },
    )
}
