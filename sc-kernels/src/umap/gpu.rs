//! The GPU twin of [`super::umap`]: the same start (the spectral start's Lanczos vectors on the
//! device, [`super::spectral_gpu`], for graphs of 50,000 cells or more), schedule and formulas;
//! each epoch one launch of `umap_epoch`, a thread per cell, the layouts of two epochs
//! alternating in device memory. No atomics, and every operation rounded as the CPU's: the
//! layout equals the CPU's bit for bit.

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
    for epoch in 0..s.n_epochs {
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
