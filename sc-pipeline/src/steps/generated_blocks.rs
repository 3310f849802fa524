//! The matrix of a run whose X is never held, as the steps so far have made it, one row block
//! at a time: a block's counts come from its [`CellSource`] (generated on the GPU by
//! [`sc_kernels::synth`], or read from the input file), then what the steps already run
//! decided is applied to it as it is made (cells and genes that failed the filters dropped,
//! normalize_total with a fixed target, log1p, the highly variable genes kept). Each step's
//! generated function (its row's [`super::step::OnGenerated`]) reads these blocks and adds to
//! the [`Chain`].

use crate::anndata::DataFrame;
use sc_kernels::gpu::compact::{select_cols, select_rows};
use sc_kernels::gpu::streamed::RowBlocks;
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::normalize::NormalizeParams;
use sc_kernels::scale::DenseScaler;
use sc_kernels::synth::gpu::DeviceCountModel;
use std::ops::Range;
use std::sync::Arc;

/// What every block goes through after it is generated, in this order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chain {
    /// Over all generated cells.
    pub keep_cells: Option<Vec<bool>>,
    /// Over all genes.
    pub keep_genes: Option<Vec<bool>>,
    pub normalize: Option<NormalizeParams>,
    pub log1p: bool,
    /// Over the genes kept by `keep_genes`.
    pub keep_hvg: Option<Vec<bool>>,
}

impl Chain {
    /// Whether the blocks are the source's counts as they are.
    pub fn is_identity(&self) -> bool {
        self.keep_cells.is_none()
            && self.keep_genes.is_none()
            && self.normalize.is_none()
            && !self.log1p
            && self.keep_hvg.is_none()
    }

    /// The block `x` of the cells `keep_cells` kept, through the rest of the chain.
    pub fn of_kept_cells(&self, lane: &GpuContext, x: DeviceCsr) -> sc_kernels::Result<DeviceCsr> {
        let mut x = x;
        if let Some(keep) = &self.keep_genes {
            x = select_cols(lane, &x, keep)?;
        }
        if let Some(p) = &self.normalize {
            sc_kernels::normalize::normalize_total_gpu(lane, &mut x, p)?;
        }
        if self.log1p {
            sc_kernels::log1p::log1p_gpu(lane, &mut x, None)?;
        }
        if let Some(keep) = &self.keep_hvg {
            x = select_cols(lane, &x, keep)?;
        }
        Ok(x)
    }
}

/// Where a run made block by block gets its cells' counts, for every pass over them.
pub trait CellSource: Sync {
    fn n_genes(&self) -> usize;

    /// The stored values of `cells` (at most), which size the blocks.
    fn stored_values(&self, cells: Range<usize>) -> u64;

    /// The counts of `cells` (all genes) on `lane`'s device.
    fn block(&self, lane: &GpuContext, cells: Range<usize>) -> sc_kernels::Result<DeviceCsr>;

    /// What the blocks made since the last call read, for the end of a step's note ("": none).
    fn reads_note(&self) -> String {
        String::new()
    }

    /// The counts of the cells of `cells` that `pick` marks (a flag per cell), in order: by
    /// default the cells made whole and the rows picked.
    fn picked(
        &self,
        lane: &GpuContext,
        cells: Range<usize>,
        pick: &[bool],
    ) -> sc_kernels::Result<DeviceCsr> {
        select_rows(lane, &self.block(lane, cells)?, pick)
    }

    /// How a block is made again, for the markers' note.
    fn again(&self) -> &'static str;

    /// Whether every count is at least zero, so that a cell's stored non-zero values are its
    /// genes with a positive count (filter_cells then reads QC's `n_genes_by_counts`).
    fn non_negative(&self) -> bool {
        false
    }
}

/// The demo's cells generated on the GPU, each holding at most `per_cell` values.
pub struct DemoCells {
    pub model: DeviceCountModel,
    pub per_cell: u64,
}

impl CellSource for DemoCells {
    fn n_genes(&self) -> usize {
        self.model.model().n_genes
    }

    fn stored_values(&self, cells: Range<usize>) -> u64 {
        self.per_cell * cells.len() as u64
    }

    fn block(&self, lane: &GpuContext, cells: Range<usize>) -> sc_kernels::Result<DeviceCsr> {
        self.model
            .generate(lane, cells.start as u64..cells.end as u64)
    }

    /// Only the cells picked are generated (each cell's counts come from its own index).
    fn picked(
        &self,
        lane: &GpuContext,
        cells: Range<usize>,
        pick: &[bool],
    ) -> sc_kernels::Result<DeviceCsr> {
        let list: Vec<u64> = (cells.zip(pick))
            .filter(|p| *p.1)
            .map(|p| p.0 as u64)
            .collect();
        self.model.generate_cells(lane, &list)
    }

    fn again(&self) -> &'static str {
        "generated again"
    }

    /// The demo's counts are drawn, never negative.
    fn non_negative(&self) -> bool {
        true
    }
}

/// The source's `n_cells` cut into blocks of consecutive cells holding at most `max_values`
/// stored values each (at least one cell a block).
pub fn blocks_of_values(
    source: &dyn CellSource,
    n_cells: usize,
    max_values: u64,
) -> Vec<Range<usize>> {
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < n_cells {
        let mut end = start + 1;
        while end < n_cells && source.stored_values(start..end + 1) <= max_values {
            end += 1;
        }
        blocks.push(start..end);
        start = end;
    }
    blocks
}

/// The state of a generated run between its steps.
pub struct GeneratedPass<'a> {
    pub ctx: Arc<GpuContext>,
    pub source: &'a dyn CellSource,
    /// Every gene of the source (the input's `var` before filter_genes), of which `.raw` holds
    /// those filter_genes keeps.
    pub genes: &'a DataFrame,
    /// The generated cells of each block.
    pub cells: &'a [Range<usize>],
    pub chain: Chain,
    /// scale's statistics, which PCA applies to each block as it is generated.
    pub scaler: Option<DenseScaler>,
    /// The genes with a positive count in each cell, as calculate_qc_metrics counted them on
    /// the source's counts (when they are never negative), for filter_cells to read instead of
    /// a pass of its own.
    pub genes_per_cell: Option<Vec<i32>>,
    /// The statistics of filter_genes, HVG and scale, taken in calculate_qc_metrics' pass.
    pub ahead: Option<super::generated_ahead::Ahead>,
}

impl GeneratedPass<'_> {
    /// The blocks as the chain makes them now.
    pub fn rows(&self) -> GeneratedRows<'_> {
        GeneratedRows::new(self.source, self.cells, &self.chain)
    }
}

/// The generated matrix through a [`Chain`], one row block at a time.
pub struct GeneratedRows<'a> {
    source: &'a dyn CellSource,
    cells: &'a [Range<usize>],
    /// Each block's rows in this matrix (the kept cells).
    ranges: Vec<Range<usize>>,
    n_cols: usize,
    chain: &'a Chain,
}

impl<'a> GeneratedRows<'a> {
    fn new(source: &'a dyn CellSource, cells: &'a [Range<usize>], chain: &'a Chain) -> Self {
        let mut ranges = Vec::with_capacity(cells.len());
        let mut row = 0;
        for c in cells {
            let n = match &chain.keep_cells {
                Some(k) => k[c.clone()].iter().filter(|&&b| b).count(),
                None => c.len(),
            };
            ranges.push(row..row + n);
            row += n;
        }
        let kept = |k: &Option<Vec<bool>>, all: usize| {
            k.as_ref().map_or(all, |k| k.iter().filter(|&&b| b).count())
        };
        let genes = kept(&chain.keep_genes, source.n_genes());
        GeneratedRows {
            source,
            cells,
            ranges,
            n_cols: kept(&chain.keep_hvg, genes),
            chain,
        }
    }

    /// The rows of block `k` that `pick` marks (a flag per row [`RowBlocks::make`] gives),
    /// without making the others where the source can ([`CellSource::picked`]): every step of
    /// the chain after the cell filter works row by row.
    pub fn make_picked(
        &self,
        lane: &GpuContext,
        k: usize,
        pick: &[bool],
    ) -> sc_kernels::Result<DeviceCsr> {
        if pick.len() != self.ranges[k].len() {
            return Err(sc_kernels::KernelError::Shape(format!(
                "{} flags for a block of {} rows",
                pick.len(),
                self.ranges[k].len()
            )));
        }
        let cells = self.cells[k].clone();
        let wanted: Vec<bool> = match &self.chain.keep_cells {
            // A cell the filter removed takes no flag.
            Some(keep) => {
                let mut flags = pick.iter();
                (keep[cells.clone()].iter())
                    .map(|&kept| kept && *flags.next().expect("a flag per kept cell"))
                    .collect()
            }
            None => pick.to_vec(),
        };
        let x = self.source.picked(lane, cells, &wanted)?;
        self.chain.of_kept_cells(lane, x)
    }
}

impl RowBlocks for GeneratedRows<'_> {
    fn n_rows(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.end)
    }

    fn n_cols(&self) -> usize {
        self.n_cols
    }

    fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    fn make(&self, lane: &GpuContext, k: usize) -> sc_kernels::Result<DeviceCsr> {
        let cells = self.cells[k].clone();
        let c = self.chain;
        let mut x = self.source.block(lane, cells.clone())?;
        if let Some(keep) = &c.keep_cells {
            x = select_rows(lane, &x, &keep[cells])?;
        }
        c.of_kept_cells(lane, x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells of the given stored values (only sizes: no block is made).
    struct Sizes(Vec<u64>);

    impl CellSource for Sizes {
        fn n_genes(&self) -> usize {
            1
        }

        fn stored_values(&self, cells: Range<usize>) -> u64 {
            self.0[cells].iter().sum()
        }

        fn block(&self, _: &GpuContext, _: Range<usize>) -> sc_kernels::Result<DeviceCsr> {
            unreachable!("only the sizes are asked for")
        }

        fn again(&self) -> &'static str {
            "made again"
        }
    }

    #[test]
    fn blocks_hold_at_most_their_values_and_every_cell_once() {
        let cells = Sizes(vec![3, 3, 3, 9, 1, 1, 1, 1, 20, 2]);
        let blocks = blocks_of_values(&cells, 10, 6);
        assert_eq!(blocks, vec![0..2, 2..3, 3..4, 4..8, 8..9, 9..10]);
        // A cell over the limit is a block of its own; uniform cells make equal blocks.
        let uniform = Sizes(vec![5; 10]);
        assert_eq!(blocks_of_values(&uniform, 10, 20), vec![0..4, 4..8, 8..10]);
        assert!(blocks_of_values(&uniform, 0, 20).is_empty());
    }
}
