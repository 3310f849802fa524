//! The matrix of a run whose X is never held, as the steps so far have made it, one row block
//! at a time: a block's counts come from its [`CellSource`] (generated on the GPU by
//! [`sc_kernels::synth`], or read from the input file), then what the steps already run
//! decided is applied to it as it is made (cells and genes that failed the filters dropped,
//! normalize_total with a fixed target, log1p, the highly variable genes kept). Each step's
//! generated function (its row's [`super::step::OnGenerated`]) reads these blocks and adds to
//! the [`Chain`].

use sc_kernels::gpu::compact::{select_cols, select_rows};
use sc_kernels::gpu::streamed::RowBlocks;
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::normalize::NormalizeParams;
use sc_kernels::scale::DenseScaler;
use sc_kernels::synth::gpu::DeviceCountModel;
use std::ops::Range;
use std::sync::Arc;

/// What every block goes through after it is generated, in this order.
#[derive(Debug, Clone, Default)]
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

/// Where a run made block by block gets its cells' counts, for every pass over them.
pub trait CellSource: Sync {
    fn n_genes(&self) -> usize;

    /// The counts of `cells` (all genes) on `lane`'s device.
    fn block(&self, lane: &GpuContext, cells: Range<usize>) -> sc_kernels::Result<DeviceCsr>;
}

impl CellSource for DeviceCountModel {
    fn n_genes(&self) -> usize {
        self.model().n_genes
    }

    fn block(&self, lane: &GpuContext, cells: Range<usize>) -> sc_kernels::Result<DeviceCsr> {
        self.generate(lane, cells.start as u64..cells.end as u64)
    }
}

/// The state of a generated run between its steps.
pub struct GeneratedPass<'a> {
    pub ctx: Arc<GpuContext>,
    pub source: &'a dyn CellSource,
    /// The generated cells of each block.
    pub cells: &'a [Range<usize>],
    pub chain: Chain,
    /// scale's statistics, which PCA applies to each block as it is generated.
    pub scaler: Option<DenseScaler>,
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
        if let Some(keep) = &c.keep_genes {
            x = select_cols(lane, &x, keep)?;
        }
        if let Some(p) = &c.normalize {
            sc_kernels::normalize::normalize_total_gpu(lane, &mut x, p)?;
        }
        if c.log1p {
            sc_kernels::log1p::log1p_gpu(lane, &mut x, None)?;
        }
        if let Some(keep) = &c.keep_hvg {
            x = select_cols(lane, &x, keep)?;
        }
        Ok(x)
    }
}
