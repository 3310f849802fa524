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

/// The statistics a filter reads (sums, values above zero), gathered one row block at a time:
/// per row (the blocks' rows follow one another) or per column (added up over the blocks).
#[derive(Debug, Clone)]
pub struct FilterStats {
    columns: bool,
    sums: Vec<f64>,
    positive: Vec<i64>,
}

impl FilterStats {
    /// For a cell filter: the rows' statistics.
    pub fn of_rows() -> Self {
        FilterStats {
            columns: false,
            sums: Vec::new(),
            positive: Vec::new(),
        }
    }

    /// For a cell filter: rows' statistics already counted (each row's sum and values above
    /// zero).
    pub fn of_counted_rows(sums: Vec<f64>, positive: Vec<i64>) -> Self {
        FilterStats {
            columns: false,
            sums,
            positive,
        }
    }

    /// For a gene filter: the statistics of `n_cols` columns.
    pub fn of_columns(n_cols: usize) -> Self {
        FilterStats {
            columns: true,
            sums: vec![0.0; n_cols],
            positive: vec![0; n_cols],
        }
    }

    /// Takes the statistics of the rows after those so far.
    pub fn add(&mut self, ctx: &GpuContext, block: &DeviceCsr) -> Result<()> {
        if self.columns {
            let (s, p) = reduce::col_stats(ctx, block)?;
            crate::stats::add_into(&mut self.sums, &s);
            crate::stats::add_into(&mut self.positive, &p);
        } else {
            let (s, p) = reduce::row_stats(ctx, block)?;
            self.sums.extend(s);
            self.positive.extend(p);
        }
        Ok(())
    }

    /// The statistics with those of every block of `src` taken.
    pub fn over_blocks(mut self, ctx: &GpuContext, src: &dyn RowBlocks) -> Result<Self> {
        for_each_row_block(ctx, src, |block, _| self.add(ctx, &block))?;
        Ok(self)
    }

    /// Which rows pass `filter`.
    pub fn cells(self, filter: CellFilter) -> Result<FilterResult> {
        self.result(filter.rule())
    }

    /// Which of the rows from `start` on (the last blocks added) pass `filter`.
    pub fn cells_from(&self, filter: CellFilter, start: usize) -> Result<Vec<bool>> {
        let part = FilterStats {
            columns: false,
            sums: self.sums[start..].to_vec(),
            positive: self.positive[start..].to_vec(),
        };
        Ok(part.cells(filter)?.keep)
    }

    /// Which columns pass `filter`.
    pub fn genes(self, filter: GeneFilter) -> Result<FilterResult> {
        self.result(filter.rule())
    }

    fn result(self, rule: super::Rule) -> Result<FilterResult> {
        let FilterStats { sums, positive, .. } = self;
        from_stats::<f32, _, _>(
            rule,
            Stats {
                sums: || Ok(sums),
                positive: || Ok(positive),
            },
        )
    }
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
    FilterStats::of_rows().over_blocks(ctx, src)?.cells(filter)
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
    FilterStats::of_columns(src.n_cols())
        .over_blocks(ctx, src)?
        .genes(filter)
}
