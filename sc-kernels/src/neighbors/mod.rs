//! `neighbors` (scanpy's `pp.neighbors` with `method="umap"`): k nearest neighbours
//! (euclidean, the cell itself included as its first neighbour), exact or, from
//! [`AUTO_IVF_CELLS`] cells or when asked, approximate within an inverted file ([`ivf`]), and
//! UMAP's fuzzy simplicial set as the connectivities, exactly as
//! `umap.umap_.fuzzy_simplicial_set` computes it.
//!
//! kNN: blocks of queries against blocks of references, the inner products by faer matrix
//! products (`|b|^2 - 2 a.b` ranks the references of a query), `k + 8` candidates kept per query,
//! then their distances recomputed exactly in `f64` and the best `k` taken (ties by index, the
//! cell itself first).
//!
//! Laid out by algorithm: [`exact`], [`pruned`] (exact, through the lists' proven bounds),
//! [`ivf`] (approximate, within probed lists) and [`descent`] (its local join) over the shared
//! [`scan`] (host and device, f32 and tensor cores) and [`lists`] (the k-means lists); the
//! [`connectivities`] on their own; [`knn`] and [`result`] the types they share. This file
//! holds the parameters and the dispatch.

pub mod bbknn;
pub mod connectivities;
pub mod descent;
pub mod exact;
pub mod ivf;
pub mod knn;
pub(crate) mod lists;
pub mod pruned;
pub mod result;
pub mod scan;
#[cfg(test)]
mod tests;

pub use connectivities::{distance_matrix, smooth_knn_dist, umap_connectivities};
pub use exact::{knn_exact, knn_exact_gpu, knn_exact_gpu_with, knn_query, knn_rows_gpu, Products};
pub use knn::Knn;
pub use result::{NeighborsResult, Scan};
pub use scan::device::{MAX_DIMS as GPU_MAX_DIMS, MAX_K as GPU_MAX_K};
pub use scan::tensor;

/// The step's kernel modules, for the warm-up ([`crate::warm_up`]): the f32 scan, the
/// tensor-core scan, the exact kNN's list pruning, the connectivities and NN-descent.
pub const KERNELS: [crate::gpu::module_cache::KernelSource; 5] = [
    scan::device::SRC,
    scan::tensor::SRC,
    pruned::SRC,
    connectivities::SRC,
    descent::SRC,
];

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::connectivities::graphs_on_device;
use crate::neighbors::exact::knn_on_device;
use crate::real::Real;
use rayon::prelude::*;

/// Parameters, with scanpy's defaults (and the search chosen by size, as scanpy, which
/// searches approximately from 4,096 cells).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighborsParams {
    /// Neighbours per cell, the cell itself included (scanpy's `n_neighbors`).
    pub n_neighbors: usize,
    pub set_op_mix_ratio: f64,
    pub local_connectivity: f64,
    pub method: KnnMethod,
}

impl Default for NeighborsParams {
    fn default() -> Self {
        NeighborsParams {
            n_neighbors: 15,
            set_op_mix_ratio: 1.0,
            local_connectivity: 1.0,
            method: KnnMethod::Auto(ivf::IvfParams::default()),
        }
    }
}

/// How the kNN is searched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KnnMethod {
    /// Every cell against every cell.
    Exact,
    /// Within the probed lists of an inverted file ([`ivf`]).
    Ivf(ivf::IvfParams),
    /// Exact below [`AUTO_IVF_CELLS`] cells, the inverted file from there.
    Auto(ivf::IvfParams),
}

/// Cells from which [`KnnMethod::Auto`] searches an inverted file. On the H200
/// (`benches/RESULTS.md` (b3), bench-knn) the inverted file took 0.077-0.079 s at 200k cells
/// against the exact tensor-core kNN's 0.109-0.139 s, and 0.33-0.35 s at 1 M against
/// 2.43-2.61 s. Below, the exact kNN's time falls as n^2 (0.032 s at 100k) while the inverted
/// file keeps its fixed costs (training, lists, the recall sample: about 0.06 s). Since the
/// exact kNN prunes its lists ([`pruned`], (b2)), it takes 0.064-0.088 s at 200k and
/// 0.47-1.27 s at 1 M (workload C, the demo's PCs): alike at 200k, still slower at 1 M.
pub const AUTO_IVF_CELLS: usize = 200_000;

impl KnnMethod {
    /// The inverted file's parameters when `n` cells are searched with it; `None`: exactly.
    pub fn ivf_for(self, n: usize) -> Option<ivf::IvfParams> {
        match self {
            KnnMethod::Exact => None,
            KnnMethod::Ivf(p) => Some(p),
            KnnMethod::Auto(p) => (n >= AUTO_IVF_CELLS).then_some(p),
        }
    }
}

/// kNN graph and UMAP connectivities of the rows of `x` (e.g. `X_pca`). As scanpy, when
/// `n_neighbors` exceeds the number of cells it becomes `1 + n_obs / 2`.
pub fn neighbors<T: Real>(x: &DenseMatrix<T>, params: &NeighborsParams) -> Result<NeighborsResult> {
    let k = effective_k(x.n_rows, params)?;
    let (knn, scan) = match params.method.ivf_for(x.n_rows) {
        None => (knn_exact(x, k)?, Scan::Cpu),
        Some(p) => {
            let (knn, stats) = ivf::knn_ivf(x, k, &p)?;
            (knn, Scan::Ivf(stats))
        }
    };
    let connectivities =
        umap_connectivities(&knn, params.set_op_mix_ratio, params.local_connectivity)?;
    let distances = distance_matrix(&knn);
    Ok(NeighborsResult {
        n_neighbors: k,
        knn,
        distances,
        connectivities,
        scan,
    })
}

/// The `k` scanpy uses for `n` cells (`1 + n / 2` when `n_neighbors` exceeds `n`).
pub fn effective_k(n: usize, params: &NeighborsParams) -> Result<usize> {
    if params.n_neighbors < 2 {
        return Err(KernelError::param(
            "n_neighbors",
            "must be at least 2 (the cell itself and one other)",
        ));
    }
    if n < 2 {
        return Err(KernelError::Unsupported(format!(
            "neighbors needs at least 2 cells, got {n}"
        )));
    }
    Ok(if params.n_neighbors > n {
        1 + n / 2
    } else {
        params.n_neighbors
    })
}

/// [`super::neighbors`] on the GPU: the same parameters, checks and result.
pub fn neighbors_gpu<T: Real>(
    ctx: &GpuContext,
    x: &DenseMatrix<T>,
    params: &NeighborsParams,
) -> Result<NeighborsResult> {
    let k = effective_k(x.n_rows, params)?;
    x.check_finite()?;
    let values: Vec<f32> = x.data.par_iter().map(|v| v.to_f64() as f32).collect();
    let xd = ctx.upload(&values)?;
    let Some(ivf) = params.method.ivf_for(x.n_rows) else {
        return neighbors_on_device(ctx, &xd, x.n_rows, x.n_cols, k, params);
    };
    let xf = DenseMatrix::new(x.n_rows, x.n_cols, values)?;
    let rows = ivf::knn_ivf_gpu(ctx, &xf, &xd, k, &ivf, (0, 1))?;
    let (knn, stats) = ivf::finish_gpu(ctx, &xd, x.n_cols, k, &ivf, vec![rows])?;
    drop(xd);
    neighbors_from_knn_gpu(ctx, knn, Scan::Ivf(stats), params)
}

/// Neighbors of a device matrix (`n x d` row-major, finite values) with `k` already settled,
/// from the exact kNN (whatever `params.method` says).
pub fn neighbors_on_device(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    params: &NeighborsParams,
) -> Result<NeighborsResult> {
    let (idx, dist, scan) = knn_on_device(ctx, x, n, d, k)?;
    let (distances, connectivities) = graphs_on_device(
        ctx,
        &idx,
        &dist,
        n,
        k,
        params.set_op_mix_ratio,
        params.local_connectivity,
    )?;
    Ok(NeighborsResult {
        n_neighbors: k,
        knn: Knn {
            n_obs: n,
            k,
            indices: ctx.download(&idx)?,
            distances: ctx.download(&dist)?,
        },
        distances,
        connectivities,
        scan,
    })
}

/// The neighbors result (connectivities and distances on the device) of a complete kNN, e.g.
/// one whose rows came from [`knn_rows_gpu`] on several GPUs (`scan`: how they were scanned).
pub fn neighbors_from_knn_gpu(
    ctx: &GpuContext,
    knn: Knn,
    scan: Scan,
    params: &NeighborsParams,
) -> Result<NeighborsResult> {
    let (n, k) = (knn.n_obs, knn.k);
    if knn.indices.len() != n * k || knn.distances.len() != n * k {
        return Err(KernelError::Shape(format!(
            "a kNN of {n} cells x {k} holds {} indices and {} distances",
            knn.indices.len(),
            knn.distances.len()
        )));
    }
    ctx.bind_to_thread()?;
    let idx = ctx.upload(&knn.indices)?;
    let dist = ctx.upload(&knn.distances)?;
    let (distances, connectivities) = graphs_on_device(
        ctx,
        &idx,
        &dist,
        n,
        k,
        params.set_op_mix_ratio,
        params.local_connectivity,
    )?;
    Ok(NeighborsResult {
        n_neighbors: k,
        distances,
        connectivities,
        knn,
        scan,
    })
}
