//! The GPU twin of [`super::umap`]: the same start (the spectral start's Lanczos vectors on the
//! device, [`super::spectral_gpu`], for graphs of 50,000 cells or more), schedule and formulas;
//! each epoch one launch of `umap_epoch`, a thread per cell (the cells ordered by their work,
//! [`work_order`]), the layouts of two epochs alternating in device memory. No atomics, and every
//! operation rounded as the CPU's: the layout equals the CPU's bit for bit.

use super::{prepare_on, Layout, UmapParams};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_stride, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "umap",
    source: include_str!("umap.cu"),
};

/// The most layout coordinates the kernel takes (`UMAP_MAX_DIMS`).
pub const MAX_DIMS: usize = 8;

/// Cells per block of `umap_epoch`, a thread each.
const EPOCH_CELLS_PER_BLOCK: usize = 128;

/// Epochs queued on the GPU at most. A step beside UMAP that takes memory UMAP freed waits, on
/// the device, for all the work UMAP has queued by then (the pool orders a steal by an event
/// recorded at the steal, `rmm_core`'s `stream_ordered`): with the 200 epochs queued at once,
/// Leiden's aggregation waited 9.7 s at the atlas. A few epochs keep the GPU as busy.
const EPOCHS_QUEUED: usize = 4;

/// The most work levels [`work_order`] tells apart.
const WORK_LEVELS: usize = 4096;

/// The cells in the order `umap_epoch`'s threads take them: by the moves expected of them an
/// epoch, most first (an edge of weight w is sampled in w / max of the epochs, with two pulls and
/// `rate` pushes), in index order among equals. A warp's 32 cells then end their epoch together,
/// where in index order a cell of many edges holds 31 idle threads. A counting sort
/// ([`crate::group_by::group_by_key`]): O(cells + edges).
fn work_order(graph: &CsrMatrix<f32>, max_weight: f32, rate: usize) -> Vec<u32> {
    use rayon::prelude::*;
    let per_weight = (2 + rate) as f64 / max_weight as f64;
    // Keyed by the levels from the top, so that the stable grouping puts the busiest first.
    let keys: Vec<u32> = (0..graph.n_rows)
        .into_par_iter()
        .map(|j| {
            let w: f64 = graph.row(j).1.iter().map(|&w| w as f64).sum();
            let level = ((w * per_weight).round() as usize).min(WORK_LEVELS - 1);
            (WORK_LEVELS - 1 - level) as u32
        })
        .collect();
    crate::group_by::group_by_key(&keys, WORK_LEVELS).0
}

/// [`super::umap`] with the epochs on the GPU.
pub fn umap_gpu(ctx: &GpuContext, graph: &CsrMatrix<f32>, params: &UmapParams) -> Result<Layout> {
    let make = |g: &CsrMatrix<f32>, sqrt_d: Vec<f64>, m: usize| {
        super::spectral_gpu::gpu_space(ctx, g, sqrt_d, m)
    };
    let (s, g, start) = prepare_on(graph, params, &make)?;
    let t = std::time::Instant::now();
    let mut trace = crate::gpu::trace::PhaseTrace::new(ctx, "umap epochs");
    let n = graph.n_rows as u64;
    let dim = params.n_components as i32;
    let indptr = ctx.upload(&s.graph.indptr)?;
    let indices = ctx.upload(&s.graph.indices)?;
    // The periods formed on the device from the weights (a fifth of the bytes to move).
    let nnz = s.graph.data.len();
    let eps = ctx.alloc::<f64>(nnz.max(1))?;
    let eps_neg = ctx.alloc::<f64>(nnz.max(1))?;
    let mut next_sample = ctx.alloc::<f64>(nnz.max(1))?;
    let mut next_negative = ctx.alloc::<f64>(nnz.max(1))?;
    {
        let weights = ctx.upload(&s.graph.data)?;
        let (nnz64, epochs) = (nnz as u64, s.n_epochs as f64);
        let rate = s.negative_sample_rate.max(1) as f64;
        let f = ctx.function(SRC, "umap_periods")?;
        let mut l = ctx.launcher(&f);
        l.arg(&weights)
            .arg(&nnz64)
            .arg(&epochs)
            .arg(&s.max_weight)
            .arg(&rate)
            .arg(&eps)
            .arg(&eps_neg)
            .arg(&next_sample)
            .arg(&next_negative);
        ctx.launch(l, grid_stride(nnz), "umap_periods")?;
    }
    let order = ctx.upload(&work_order(&s.graph, s.max_weight, s.negative_sample_rate))?;
    let mut y = ctx.upload(&start.embedding.data)?;
    let mut out = ctx.alloc::<f32>(start.embedding.data.len())?;
    trace.mark("schedule to the device")?;
    let f = ctx.function(SRC, "umap_epoch")?;
    let cfg = LaunchConfig {
        grid_dim: ((n as usize).div_ceil(EPOCH_CELLS_PER_BLOCK) as u32, 1, 1),
        block_dim: (EPOCH_CELLS_PER_BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let negative = g.negative_samples as i32;
    let gpu = |e: rmm_cuda::CudaError| crate::error::KernelError::Gpu(format!("umap epochs: {e}"));
    let marks = (0..EPOCHS_QUEUED)
        .map(|_| ctx.device().new_event().map_err(gpu))
        .collect::<Result<Vec<_>>>()?;
    for epoch in 0..s.n_epochs {
        let mark = &marks[epoch % EPOCHS_QUEUED];
        if epoch >= EPOCHS_QUEUED {
            mark.synchronize().map_err(gpu)?;
        }
        let alpha = (params.learning_rate * (1.0 - epoch as f64 / s.n_epochs as f64)) as f32;
        let epoch = epoch as u64;
        let mut l = ctx.launcher(&f);
        l.arg(&indptr)
            .arg(&indices)
            .arg(&eps)
            .arg(&eps_neg)
            .arg(&mut next_sample)
            .arg(&mut next_negative)
            .arg(&y)
            .arg(&mut out)
            .arg(&order)
            .arg(&n)
            .arg(&dim)
            .arg(&epoch)
            .arg(&alpha)
            .arg(&g.a)
            .arg(&g.b)
            .arg(&g.gamma)
            .arg(&negative)
            .arg(&g.seed);
        ctx.launch(l, cfg, "umap_epoch")?;
        ctx.stream().record(mark).map_err(gpu)?;
        std::mem::swap(&mut y, &mut out);
    }
    trace.mark("epochs")?;
    let data = ctx.download(&y)?;
    Ok(Layout {
        epochs_seconds: t.elapsed().as_secs_f64(),
        embedding: DenseMatrix {
            n_rows: graph.n_rows,
            n_cols: params.n_components,
            data,
        },
        ..start
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_order_puts_the_busiest_cells_first_and_keeps_index_order_among_equals() {
        // Rows' weight sums 0.5, 3.0, 0.5, 1.0 (max weight 1, rate 5: 3.5, 21, 3.5, 7 moves).
        let graph = CsrMatrix {
            n_rows: 4,
            n_cols: 4,
            indptr: vec![0, 1, 4, 5, 7],
            indices: vec![1, 0, 2, 3, 1, 0, 1],
            data: vec![0.5, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5],
        };
        assert_eq!(work_order(&graph, 1.0, 5), vec![1, 3, 0, 2]);
        let mut all = work_order(&graph, 0.25, 0);
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3]);
    }
}
