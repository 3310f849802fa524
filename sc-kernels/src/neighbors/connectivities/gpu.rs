//! The connectivities and distances on the device, the CPU's results bit for bit.
//!
//!
//! Connectivities: `smooth_knn` runs the CPU's per-cell binary search in the same f32 steps and
//! writes the membership strengths; `union_count` pairs each edge with its reverse (a scan of
//! `k` entries), counts the entries of every row of `A + A^T - A o A^T`, a prefix sum gives the
//! row offsets, `union_fill` writes the entries and `sort_rows` orders each row by column.

pub(crate) const SRC: KernelSource = KernelSource {
    name: "connectivities",
    source: include_str!("connectivities.cu"),
};

use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::scan::exclusive_scan;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

/// A CSR matrix left on the device.
struct DeviceGraph {
    indptr: DeviceVec<u64>,
    indices: DeviceVec<u32>,
    data: DeviceVec<f32>,
}

impl DeviceGraph {
    fn sort_rows(&self, ctx: &GpuContext, n: usize) -> Result<()> {
        let n64 = n as u64;
        let f = ctx.function(SRC, "sort_rows")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.indptr)
            .arg(&n64)
            .arg(&self.indices)
            .arg(&self.data);
        ctx.launch(l, grid_stride(n), "sort_rows")
    }

    pub(crate) fn download(&self, ctx: &GpuContext, n: usize) -> Result<CsrMatrix<f32>> {
        Ok(CsrMatrix {
            n_rows: n,
            n_cols: n,
            indptr: ctx.download(&self.indptr)?,
            indices: ctx.download(&self.indices)?,
            data: ctx.download(&self.data)?,
        })
    }
}

/// Sum of `v` in f64 (block partial sums on the device, added on the host).
fn sum_f64(ctx: &GpuContext, v: &DeviceVec<f32>) -> Result<f64> {
    let cfg = grid_stride(v.len());
    let cfg = LaunchConfig {
        grid_dim: (cfg.grid_dim.0.min(1024), 1, 1),
        ..cfg
    };
    let partial = ctx.zeros::<f64>(cfg.grid_dim.0 as usize)?;
    let len = v.len() as u64;
    let f = ctx.function(SRC, "sum_f32_as_f64")?;
    let mut l = ctx.launcher(&f);
    l.arg(v).arg(&len).arg(&partial);
    ctx.launch(l, cfg, "sum_f32_as_f64")?;
    Ok(ctx.download(&partial)?.iter().sum())
}

/// UMAP connectivities of a device kNN (the CPU's [`super::umap_connectivities`]).
fn connectivities_on_device(
    ctx: &GpuContext,
    idx: &DeviceVec<u32>,
    dist: &DeviceVec<f32>,
    n: usize,
    k: usize,
    set_op_mix_ratio: f64,
    local_connectivity: f64,
) -> Result<DeviceGraph> {
    super::check_union_params(set_op_mix_ratio, local_connectivity)?;
    let (n64, k32) = (n as u64, k as u32);
    let mean_all = (sum_f64(ctx, dist)? / (n * k).max(1) as f64) as f32;
    let target = (k as f64).log2();
    let sigmas = ctx.alloc::<f32>(n)?;
    let rhos = ctx.alloc::<f32>(n)?;
    let w = ctx.alloc::<f32>(n * k)?;
    let f = ctx.function(SRC, "smooth_knn")?;
    let mut l = ctx.launcher(&f);
    l.arg(idx)
        .arg(dist)
        .arg(&n64)
        .arg(&k32)
        .arg(&local_connectivity)
        .arg(&target)
        .arg(&mean_all)
        .arg(&sigmas)
        .arg(&rhos)
        .arg(&w);
    ctx.launch(l, grid_stride(n), "smooth_knn")?;

    let mix = set_op_mix_ratio as f32;
    let val = ctx.alloc::<f32>(n * k)?;
    let rev_only = ctx.alloc::<u8>(n * k)?;
    let counts = ctx.zeros::<u64>(n)?;
    let f = ctx.function(SRC, "union_count")?;
    let mut l = ctx.launcher(&f);
    l.arg(idx)
        .arg(&w)
        .arg(&n64)
        .arg(&k32)
        .arg(&mix)
        .arg(&val)
        .arg(&rev_only)
        .arg(&counts);
    ctx.launch(l, grid_stride(n * k), "union_count")?;
    let (indptr, nnz) = exclusive_scan(ctx, &counts)?;
    drop(counts);

    let graph = DeviceGraph {
        indptr,
        indices: ctx.alloc::<u32>(nnz as usize)?,
        data: ctx.alloc::<f32>(nnz as usize)?,
    };
    let cursor = ctx.zeros::<u32>(n)?;
    let f = ctx.function(SRC, "union_fill")?;
    let mut l = ctx.launcher(&f);
    l.arg(idx)
        .arg(&val)
        .arg(&rev_only)
        .arg(&n64)
        .arg(&k32)
        .arg(&graph.indptr)
        .arg(&cursor)
        .arg(&graph.indices)
        .arg(&graph.data);
    ctx.launch(l, grid_stride(n * k), "union_fill")?;
    graph.sort_rows(ctx, n)?;
    Ok(graph)
}

/// scanpy's `obsp['distances']` on the device (the CPU's [`super::distance_matrix`]).
fn distances_on_device(
    ctx: &GpuContext,
    idx: &DeviceVec<u32>,
    dist: &DeviceVec<f32>,
    n: usize,
    k: usize,
) -> Result<DeviceGraph> {
    let per_row = k - 1;
    let offsets: Vec<u64> = (0..=n as u64).map(|i| i * per_row as u64).collect();
    let graph = DeviceGraph {
        indptr: ctx.upload(&offsets)?,
        indices: ctx.alloc::<u32>(n * per_row)?,
        data: ctx.alloc::<f32>(n * per_row)?,
    };
    let (n64, k32) = (n as u64, k as u32);
    let f = ctx.function(SRC, "distance_rows")?;
    let mut l = ctx.launcher(&f);
    l.arg(idx)
        .arg(dist)
        .arg(&n64)
        .arg(&k32)
        .arg(&graph.indices)
        .arg(&graph.data);
    ctx.launch(l, grid_stride(n * per_row), "distance_rows")?;
    graph.sort_rows(ctx, n)?;
    Ok(graph)
}

/// scanpy's `obsp['distances']` and `obsp['connectivities']` of a kNN on the device, downloaded.
pub(crate) fn graphs_on_device(
    ctx: &GpuContext,
    idx: &DeviceVec<u32>,
    dist: &DeviceVec<f32>,
    n: usize,
    k: usize,
    set_op_mix_ratio: f64,
    local_connectivity: f64,
) -> Result<(CsrMatrix<f32>, CsrMatrix<f32>)> {
    let conn =
        connectivities_on_device(ctx, idx, dist, n, k, set_op_mix_ratio, local_connectivity)?;
    let distances = distances_on_device(ctx, idx, dist, n, k)?;
    Ok((distances.download(ctx, n)?, conn.download(ctx, n)?))
}
