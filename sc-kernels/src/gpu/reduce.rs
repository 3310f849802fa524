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
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnMoments {
    pub sums: Vec<f64>,
    pub sq: Vec<f64>,
    pub positive: Vec<i64>,
}

impl ColumnMoments {
    /// The moments of no row, over `n_cols` columns.
    pub fn zeros(n_cols: usize) -> Self {
        ColumnMoments {
            sums: vec![0.0; n_cols],
            sq: vec![0.0; n_cols],
            positive: vec![0; n_cols],
        }
    }

    /// Adds the moments of more rows (of the same columns).
    pub fn add(&mut self, more: &ColumnMoments) {
        crate::stats::add_into(&mut self.sums, &more.sums);
        crate::stats::add_into(&mut self.sq, &more.sq);
        crate::stats::add_into(&mut self.positive, &more.positive);
    }

    /// The moments of the columns `keep` marks.
    pub fn select(&self, keep: &[bool]) -> ColumnMoments {
        fn pick<T: Copy>(v: &[T], keep: &[bool]) -> Vec<T> {
            v.iter().zip(keep).filter(|p| *p.1).map(|p| *p.0).collect()
        }
        ColumnMoments {
            sums: pick(&self.sums, keep),
            sq: pick(&self.sq, keep),
            positive: pick(&self.positive, keep),
        }
    }
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
    let download = |sums, sq, pos: DeviceVec<u64>| -> Result<ColumnMoments> {
        Ok(ColumnMoments {
            sums: ctx.download(&sums)?,
            sq: ctx.download(&sq)?,
            positive: ctx.download(&pos)?.into_iter().map(|c| c as i64).collect(),
        })
    };
    if let (None, Some(plan)) = (batches, TiledPlan::for_matrix(ctx, x)) {
        let f = ctx.function_with_shared(SRC, "col_moments_tiled", plan.shared_bytes)?;
        let (n, g, tile) = (x.n_rows as u64, x.n_cols as u64, plan.tile as u64);
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr)
            .arg(&x.indices)
            .arg(&x.data)
            .arg(&n)
            .arg(&g)
            .arg(&mode)
            .arg(&ln_base)
            .arg(&tile)
            .arg(&sums)
            .arg(&sq)
            .arg(&pos);
        ctx.launch(l, plan.launch(), "col_moments_tiled")?;
        return download(sums, sq, pos);
    }
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
    download(sums, sq, pos)
}

/// The shape of `col_moments_tiled`'s launch: one 1,024-thread block per multiprocessor, the
/// columns cut into the fewest tiles of equal width that a block's shared memory holds (20 bytes
/// a column).
struct TiledPlan {
    tile: usize,
    shared_bytes: usize,
    blocks: u32,
}

impl TiledPlan {
    const THREADS: u32 = 1024;
    const BYTES_PER_COLUMN: usize = 2 * 8 + 4;
    /// Every block reads its share of the values once per tile. Two tiles (20,000 genes on an
    /// H200) measured 3x faster than the global atomics of `col_moments`; past four tiles the
    /// re-reads are left untried, and the per-row kernel runs.
    const MAX_TILES: usize = 4;

    /// The plan for `x` on `ctx`'s device.
    fn for_matrix(ctx: &GpuContext, x: &DeviceCsr) -> Option<TiledPlan> {
        Self::new(
            x.n_cols,
            x.data.len(),
            ctx.multiprocessors(),
            ctx.max_shared_per_block(),
        )
    }

    /// The plan for `nnz` stored values in `n_cols` columns on `blocks` multiprocessors with
    /// `max_shared` bytes of shared memory a block, or `None` where the per-row kernel is the
    /// better one: fewer stored values than the blocks' shared columns to clear and add, or
    /// too many tiles.
    fn new(n_cols: usize, nnz: usize, blocks: u32, max_shared: usize) -> Option<TiledPlan> {
        let blocks = blocks.max(1);
        let fits = (max_shared / Self::BYTES_PER_COLUMN) / 32 * 32;
        if fits == 0 || n_cols == 0 || nnz < 4 * n_cols * blocks as usize {
            return None;
        }
        let tiles = n_cols.div_ceil(fits);
        // A block's count of one column is a u32: its share must stay below 2^32 values.
        if tiles > Self::MAX_TILES || nnz.div_ceil(blocks as usize) >= u32::MAX as usize {
            return None;
        }
        let tile = n_cols.div_ceil(tiles).next_multiple_of(32).min(fits);
        Some(TiledPlan {
            tile,
            shared_bytes: tile * Self::BYTES_PER_COLUMN,
            blocks,
        })
    }

    fn launch(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (Self::THREADS, 1, 1),
            shared_mem_bytes: self.shared_bytes as u32,
        }
    }
}

/// Per column: the sum of the values and the number of values above zero.
pub fn col_stats(ctx: &GpuContext, x: &DeviceCsr) -> Result<(Vec<f64>, Vec<i64>)> {
    let m = col_moments(ctx, x, Transform::Identity, None)?;
    Ok((m.sums, m.positive))
}

#[cfg(test)]
mod tests {
    use super::TiledPlan;

    /// An H200: 132 multiprocessors, 232,448 bytes of shared memory a block.
    const SMS: u32 = 132;
    const SHARED: usize = 232_448;

    #[test]
    fn twenty_thousand_genes_take_two_even_tiles_on_an_h200() {
        let p = TiledPlan::new(20_000, 2_000_000_000, SMS, SHARED).unwrap();
        assert_eq!((p.tile, p.blocks), (10_016, SMS));
        assert!(p.shared_bytes <= SHARED && 2 * p.tile >= 20_000);
        // The 2,000 highly variable genes fit one tile.
        let p = TiledPlan::new(2_000, 200_000_000, SMS, SHARED).unwrap();
        assert_eq!(p.tile, 2_016);
        assert_eq!(p.shared_bytes, 2_016 * 20);
    }

    #[test]
    fn sparse_wide_or_huge_matrices_keep_the_per_row_kernel() {
        // Fewer values than four per shared column per block.
        assert!(TiledPlan::new(20_000, 4 * 20_000 * 132 - 1, SMS, SHARED).is_none());
        assert!(TiledPlan::new(20_000, 4 * 20_000 * 132, SMS, SHARED).is_some());
        // More than four tiles: 60,000 genes on a GPU with 48 KiB a block.
        assert!(TiledPlan::new(60_000, 1 << 34, SMS, 49_152).is_none());
        // A block's share past 2^32 values would overflow its u32 counts.
        assert!(TiledPlan::new(2_000, 132 * (u32::MAX as usize) + 1, SMS, SHARED).is_none());
        assert!(TiledPlan::new(0, 1000, SMS, SHARED).is_none());
        assert!(TiledPlan::new(100, 1 << 30, SMS, 0).is_none());
    }
}
