//! The device twin of [`CountModel::generate`] (`synth.cu`): a block of cells made in device
//! memory, one thread block per cell, in two launches (row lengths, then the rows at their
//! scanned offsets), so a streamed run regenerates X for each pass instead of holding it.

use super::CountModel;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{scan, DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use std::ops::Range;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "synth",
    source: include_str!("synth.cu"),
};

const THREADS: u32 = 256;

/// Which cells a launch makes: consecutive ones from a first, or those of a list on the device.
enum Cells<'a> {
    From(u64),
    Listed(&'a DeviceVec<u64>),
}

/// A [`CountModel`] with its tables in device memory.
pub struct DeviceCountModel {
    model: CountModel,
    prob: DeviceVec<f32>,
    alias: DeviceVec<u32>,
    relative: DeviceVec<f64>,
}

impl DeviceCountModel {
    /// Uploads the tables (and waits, so any stream may read them).
    pub fn upload(ctx: &GpuContext, model: &CountModel) -> Result<Self> {
        model.check()?;
        let prob: Vec<f32> = model.tables.iter().flat_map(|t| t.prob.clone()).collect();
        let alias: Vec<u32> = model.tables.iter().flat_map(|t| t.alias.clone()).collect();
        let m = DeviceCountModel {
            model: model.clone(),
            prob: ctx.upload(&prob)?,
            alias: ctx.upload(&alias)?,
            relative: ctx.upload(&model.relative)?,
        };
        ctx.synchronize()?;
        Ok(m)
    }

    pub fn model(&self) -> &CountModel {
        &self.model
    }

    /// Cells `cells` on `ctx`'s stream: the same gene sets as [`CountModel::generate`] (and the
    /// same counts up to the last bit of the device's `log`/`exp`/`cos`); each cell's batch and
    /// type are [`CountModel::cell`]'s.
    pub fn generate(&self, ctx: &GpuContext, cells: Range<u64>) -> Result<DeviceCsr> {
        let n = (cells.end - cells.start) as usize;
        self.generate_rows(ctx, Cells::From(cells.start), n)
    }

    /// The cells `cells` names (in that order), each the same row as [`Self::generate`] makes
    /// of it: a subset of cells without making the cells between them.
    pub fn generate_cells(&self, ctx: &GpuContext, cells: &[u64]) -> Result<DeviceCsr> {
        let list = ctx.upload(if cells.is_empty() { &[0u64][..] } else { cells })?;
        self.generate_rows(ctx, Cells::Listed(&list), cells.len())
    }

    fn generate_rows(&self, ctx: &GpuContext, cells: Cells<'_>, n: usize) -> Result<DeviceCsr> {
        if n > i32::MAX as usize {
            return Err(KernelError::Unsupported(format!(
                "{n} cells in one generated block (at most 2^31 - 1)"
            )));
        }
        let mut lengths = ctx.alloc::<u64>(n.max(1))?;
        self.launch(ctx, &cells, n, &lengths, None)?;
        lengths.resize(n)?;
        let (indptr, nnz) = scan::exclusive_scan(ctx, &lengths)?;
        drop(lengths);
        let x = DeviceCsr {
            n_rows: n,
            n_cols: self.model.n_genes,
            indptr,
            indices: ctx.alloc::<u32>(nnz as usize)?,
            data: ctx.alloc::<f32>(nnz as usize)?,
        };
        self.launch(ctx, &cells, n, &x.indptr, Some(&x))?;
        Ok(x)
    }

    /// One launch over `n` cells: row lengths into `target` when `fill` is `None`, else the
    /// rows at the offsets `target` into `fill`'s matrix.
    fn launch(
        &self,
        ctx: &GpuContext,
        cells: &Cells<'_>,
        n: usize,
        target: &DeviceVec<u64>,
        fill: Option<&DeviceCsr>,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let m = &self.model;
        let u = |v: usize| v as u32;
        let (seed, n64, g) = (m.seed, n as u64, u(m.n_genes));
        let (nb, nt) = (u(m.n_batches), u(m.n_cell_types));
        let (glo, ghi) = (u(m.genes_per_cell.0), u(m.genes_per_cell.1));
        let (llo, lhi) = (u(m.low_quality_genes.0), u(m.low_quality_genes.1));
        let null: u64 = 0;
        let first = match cells {
            Cells::From(first) => *first,
            Cells::Listed(_) => 0,
        };
        let f = ctx.function(SRC, "synth_cells")?;
        let mut l = ctx.launcher(&f);
        l.arg(&seed)
            .arg(&first)
            .arg(&n64)
            .arg(&g)
            .arg(&nb)
            .arg(&nt)
            .arg(&glo)
            .arg(&ghi)
            .arg(&llo)
            .arg(&lhi)
            .arg(&m.nb_shape)
            .arg(&m.low_quality_fraction)
            .arg(&m.density)
            .arg(&m.library_sigma)
            .arg(&m.mean_extra_count)
            .arg(&self.prob)
            .arg(&self.alias)
            .arg(&self.relative);
        match cells {
            Cells::From(_) => l.arg(&null),
            Cells::Listed(list) => l.arg(*list),
        };
        match fill {
            None => l.arg(target).arg(&null).arg(&null).arg(&null),
            Some(x) => l.arg(&null).arg(target).arg(&x.indices).arg(&x.data),
        };
        let cfg = LaunchConfig {
            grid_dim: (n as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: (m.n_genes.div_ceil(32) * 4) as u32,
        };
        ctx.launch(l, cfg, "synth_cells")
    }
}
