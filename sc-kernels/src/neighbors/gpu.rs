//! The GPU twin of [`super::neighbors`]: the same exact kNN and UMAP connectivities, computed
//! on the device.
//!
//! kNN (`knn_scan`): a block holds 64 queries in shared memory and streams every reference past
//! them in tiles of 128 (from a reference-major copy of X, so tile loads are coalesced). Each
//! thread forms 4 x 8 inner products in registers; `|r|^2 - 2 q.r` values that beat a query's
//! current threshold go to a per-query buffer and one thread per query merges them into its
//! sorted list of `k + 8` candidates. Nothing of size `n x n` is ever stored, so the memory is
//! `O(n (d + k))` whatever `n` is, and no tile has to be sized from what the resource can give.
//! `knn_refine` then recomputes the candidates' distances exactly in f64 and keeps the best `k`
//! with the CPU's order (distance, the cell itself first, index): the same neighbours and the
//! same distances, bit for bit, whenever the candidate lists agree.
//!
//! Connectivities: `smooth_knn` runs the CPU's per-cell binary search in the same f32 steps and
//! writes the membership strengths; `union_count` pairs each edge with its reverse (a scan of
//! `k` entries), counts the entries of every row of `A + A^T - A o A^T`, a prefix sum gives the
//! row offsets, `union_fill` writes the entries and `sort_rows` orders each row by column.

use super::{check_k, effective_k, Knn, NeighborsParams, NeighborsResult, Scan, EXTRA};
use super::{pruned, tensor};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::scan::exclusive_scan;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use crate::real::Real;
use rayon::prelude::*;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "neighbors",
    source: include_str!("neighbors.cu"),
};

// Must match the defines of neighbors.cu.
pub(crate) const QT: usize = 64;
pub(crate) const RT: usize = 128;
pub(crate) const DK: usize = 32;
pub(crate) const THREADS: u32 = 256;

/// Largest `k` (with the cell itself) and dimension count the GPU kNN takes (shared memory).
pub const MAX_K: usize = 100;
pub const MAX_DIMS: usize = 256;

/// Shared memory of `knn_scan` for `dpad` padded dimensions and `kc` candidates per query.
fn scan_shared_bytes(dpad: usize, kc: usize) -> usize {
    4 * (dpad * QT + DK * RT + RT + QT + QT + 2 * QT * RT + 2 * QT * kc + QT)
}

/// The kNN of the rows of a device matrix `x` (`n x d`, row-major), self included.
pub fn knn_exact_gpu(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
) -> Result<Knn> {
    Ok(knn_exact_gpu_with(ctx, x, n, d, k, Products::Auto)?.0)
}

/// [`knn_exact_gpu`] with the candidates ranked by `products`, and how they were.
pub fn knn_exact_gpu_with(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    products: Products,
) -> Result<(Knn, Scan)> {
    let (idx, dist, scan) = knn_rows_on_device(ctx, x, n, d, k, 0..n, products)?;
    let knn = Knn {
        n_obs: n,
        k,
        indices: ctx.download(&idx)?,
        distances: ctx.download(&dist)?,
    };
    Ok((knn, scan))
}

/// kNN left on the device: `(indices, distances)`, `n * k` each, and how it was scanned.
fn knn_on_device(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>, Scan)> {
    knn_rows_on_device(ctx, x, n, d, k, 0..n, Products::Auto)
}

/// Which products rank the candidates: tensor cores where the GPU has them and the shape fits
/// (`Auto`, see [`super::tensor`]; for every row of at least
/// [`PRUNED_FROM_CELLS`](super::pruned::PRUNED_FROM_CELLS) cells within the lists the bounds of
/// [`super::pruned`] keep), or, for comparisons: tensor cores over all pairs (`Tensor`), through
/// pruned lists whatever the size (`Pruned`), the CUDA cores' f32 scan everywhere (`F32`, what
/// every GPU ran before the tensor path).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Products {
    Auto,
    Tensor,
    Pruned(super::pruned::PrunedParams),
    F32,
}

/// The kNN of the rows `rows` of `x` among all its `n` rows, left on the device:
/// `(indices, distances)`, `rows.len() * k` each.
fn knn_rows_on_device(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    products: Products,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>, Scan)> {
    check_k(n, k)?;
    if rows.end > n || rows.start > rows.end {
        return Err(KernelError::param(
            "rows",
            format!("{rows:?} is not within the {n} rows"),
        ));
    }
    let q = rows.len();
    if d == 0 || d > MAX_DIMS || k > MAX_K {
        return Err(KernelError::Unsupported(format!(
            "the GPU kNN takes 1 to {MAX_DIMS} dimensions and k up to {MAX_K} (got {d} and {k})"
        )));
    }
    if x.len() != n * d {
        return Err(KernelError::param(
            "x",
            format!("holds {} values, not {n} x {d}", x.len()),
        ));
    }
    let plan = match products {
        Products::F32 => None,
        _ if q == 0 => None,
        _ => tensor::plan(ctx.arch(), n, d, k),
    };
    let pruned = match products {
        Products::Auto if n >= pruned::PRUNED_FROM_CELLS => Some(Default::default()),
        Products::Pruned(p) => Some(p),
        _ => None,
    };
    // Pass 1's bound from the pruned lists, when they kept too much to scan only them.
    let (mut tau, mut pruned_stats) = (None, None);
    if let (Some(plan), Some(params), true) = (plan, pruned, rows == (0..n)) {
        match pruned::knn_pruned(ctx, x, (n, d, k), plan, params)? {
            pruned::Pruned::Done(idx, dist, stats) => return Ok((idx, dist, Scan::Pruned(stats))),
            pruned::Pruned::AllPairs(t, stats) => (tau, pruned_stats) = (Some(t), Some(stats)),
        }
    }
    // Candidates: `kc` slots per query (`counts` of them filled, when given).
    let (cand, counts, kc, scan) = match plan {
        Some(plan) => {
            let c = tensor::candidates(ctx, x, n, d, k, rows.clone(), plan, tau)?;
            if !c.uncertain.is_empty() {
                // Their counts already say `width`: the f32 scan fills every slot.
                let list = ctx.upload(&c.uncertain)?;
                f32_scan(ctx, x, n, d, c.width, rows.clone(), Some(&list), &c.cand)?;
            }
            let f32_queries = c.uncertain.len();
            let scan = match pruned_stats {
                Some(s) => Scan::Pruned(pruned::PrunedStats { f32_queries, ..s }),
                None => Scan::Tensor { f32_queries },
            };
            (c.cand, Some(c.counts), c.width, scan)
        }
        None => {
            let kc = (k + EXTRA).min(n);
            let cand = ctx.alloc::<u32>(q.max(1) * kc)?;
            f32_scan(ctx, x, n, d, kc, rows.clone(), None, &cand)?;
            (cand, None, kc, Scan::F32)
        }
    };

    let (idx, dist) = refine(ctx, x, &cand, counts.as_ref(), None, rows, d, kc, k)?;
    Ok((idx, dist, scan))
}

/// `knn_refine`: the exact best `k` of each query's `kc` candidates (`counts[r]` of them when
/// given). The queries are the rows `rows` of `x`, or, with `qmap`, the rows `qmap[p]` for the
/// positions `p` in `rows` (~0: none). Output rows follow `rows`: `rows.len() * k` each.
#[allow(clippy::too_many_arguments)]
pub(crate) fn refine(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    cand: &DeviceVec<u32>,
    counts: Option<&DeviceVec<u32>>,
    qmap: Option<&DeviceVec<u32>>,
    rows: std::ops::Range<usize>,
    d: usize,
    kc: usize,
    k: usize,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>)> {
    let q = rows.len();
    let (kc32, k32, d32, q_start) = (kc as u32, k as u32, d as u32, rows.start as u64);
    let idx = ctx.alloc::<u32>(q.max(1) * k)?;
    let dist = ctx.alloc::<f32>(q.max(1) * k)?;
    let sd = ctx.alloc::<f64>(q.max(1) * (kc + 1))?;
    let si = ctx.alloc::<u32>(q.max(1) * (kc + 1))?;
    let q64 = q as u64;
    let f = ctx.function(SRC, "knn_refine")?;
    let null = 0u64;
    let mut l = ctx.launcher(&f);
    l.arg(x).arg(cand);
    match counts {
        Some(c) => l.arg(c),
        None => l.arg(&null),
    };
    match qmap {
        Some(m) => l.arg(m),
        None => l.arg(&null),
    };
    l.arg(&q_start)
        .arg(&q64)
        .arg(&d32)
        .arg(&kc32)
        .arg(&k32)
        .arg(&sd)
        .arg(&si)
        .arg(&idx)
        .arg(&dist);
    ctx.launch(l, grid_stride(q.max(1)), "knn_refine")?;
    Ok((idx, dist))
}

/// References laid out for the scans: reference-major (`ld` values per dimension, zero past
/// the `n` references and in `dpad` beyond `d`), and their squared norms.
pub(crate) struct RefTable {
    pub(crate) xt: DeviceVec<f32>,
    pub(crate) norms: DeviceVec<f32>,
    pub(crate) n: usize,
    pub(crate) d: usize,
    pub(crate) dpad: usize,
    pub(crate) ld: usize,
}

impl RefTable {
    /// The table of the `n` rows of `x` (`n x d`), `ld` at least `n` rounded up to a chunk
    /// (more where scans start chunks anywhere, as the inverted file's lists).
    pub(crate) fn new(
        ctx: &GpuContext,
        x: &DeviceVec<f32>,
        n: usize,
        d: usize,
        ld: usize,
    ) -> Result<Self> {
        let ld = ld.max(n.div_ceil(RT) * RT);
        let dpad = d.div_ceil(DK) * DK;
        let (n64, d32, ld64) = (n as u64, d as u32, ld as u64);
        let xt = ctx.alloc::<f32>(dpad.max(d) * ld)?;
        let f = ctx.function(SRC, "transpose_pad")?;
        let mut l = ctx.launcher(&f);
        l.arg(x).arg(&n64).arg(&d32).arg(&ld64).arg(&xt);
        ctx.launch(l, grid_stride(d * ld), "transpose_pad")?;
        let norms = ctx.alloc::<f32>(n.max(1))?;
        let f = ctx.function(SRC, "row_norms")?;
        let mut l = ctx.launcher(&f);
        l.arg(x).arg(&n64).arg(&d32).arg(&norms);
        ctx.launch(l, grid_stride(n), "row_norms")?;
        Ok(RefTable {
            xt,
            norms,
            n,
            d,
            dpad,
            ld,
        })
    }

    /// Shared memory of a scan block keeping `kc` candidates per query.
    pub(crate) fn shared_bytes(&self, kc: usize) -> usize {
        scan_shared_bytes(self.dpad, kc)
    }
}

/// `knn_scan`: the `kc` best candidates among the table's references (named by `ids` when
/// given) of the queries `rows` of `x` (or of the rows `rows.start + list[e]`), into their rows
/// of `cand` (`kc` per query, from `rows.start`). With `spans` above 1 the references are split
/// in `spans` (a grid of `spans` rows of blocks, for few queries): span `y`'s candidates of
/// query row `r` at `cand[(y * rows + r) * kc ..]`, `~0` where a span holds fewer than `kc`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_table(
    ctx: &GpuContext,
    table: &RefTable,
    ids: Option<&DeviceVec<u32>>,
    x: &DeviceVec<f32>,
    kc: usize,
    rows: std::ops::Range<usize>,
    list: Option<&DeviceVec<u32>>,
    spans: usize,
    cand: &DeviceVec<u32>,
) -> Result<()> {
    let (n64, d32, ld64, dpad32, kc32) = (
        table.n as u64,
        table.d as u32,
        table.ld as u64,
        table.dpad as u32,
        kc as u32,
    );
    let smem = table.shared_bytes(kc);
    let f = ctx.function_with_shared(SRC, "knn_scan", smem)?;
    let (q_start, q_end) = (rows.start as u64, rows.end as u64);
    let null = 0u64;
    let (queries, n_list) = match list {
        Some(l) => (l.len(), l.len() as u64),
        None => (rows.len(), 0),
    };
    let mut l = ctx.launcher(&f);
    l.arg(x).arg(&table.xt).arg(&table.norms);
    match ids {
        Some(ids) => l.arg(ids),
        None => l.arg(&null),
    };
    l.arg(&n64)
        .arg(&d32)
        .arg(&dpad32)
        .arg(&ld64)
        .arg(&kc32)
        .arg(&q_start)
        .arg(&q_end);
    match list {
        Some(list) => l.arg(list),
        None => l.arg(&null),
    };
    let cand_rows = rows.len() as u64;
    l.arg(&n_list).arg(&cand_rows).arg(cand);
    let cfg = LaunchConfig {
        grid_dim: (queries.div_ceil(QT).max(1) as u32, spans.max(1) as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    ctx.launch(l, cfg, "knn_scan")
}

/// The f32 scan (`knn_scan`): the `kc` best candidates of the queries `rows` (or of the rows
/// `rows.start + list[e]`) into their rows of `cand` (`kc` per query, from `rows.start`).
#[allow(clippy::too_many_arguments)]
fn f32_scan(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    kc: usize,
    rows: std::ops::Range<usize>,
    list: Option<&DeviceVec<u32>>,
    cand: &DeviceVec<u32>,
) -> Result<()> {
    let table = RefTable::new(ctx, x, n, d, 0)?;
    scan_table(ctx, &table, None, x, kc, rows, list, 1, cand)
}

/// The kNN (self included) of the rows `rows` of `x` (`n x d` row-major, finite values) among
/// all its rows: `rows.len() * k` indices and distances, the rows of [`knn_exact_gpu`]'s result,
/// and how they were scanned. Several GPUs each take a range of rows and
/// [`neighbors_from_knn_gpu`] joins them.
pub fn knn_rows_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    k: usize,
    rows: std::ops::Range<usize>,
) -> Result<(Vec<u32>, Vec<f32>, Scan)> {
    super::check_finite(x)?;
    ctx.bind_to_thread()?;
    let xd = ctx.upload(&x.data)?;
    let q = rows.len();
    let (idx, dist, scan) =
        knn_rows_on_device(ctx, &xd, x.n_rows, x.n_cols, k, rows, Products::Auto)?;
    let (mut i, mut d) = (ctx.download(&idx)?, ctx.download(&dist)?);
    i.truncate(q * k);
    d.truncate(q * k);
    Ok((i, d, scan))
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
    let conn = connectivities_on_device(ctx, &idx, &dist, n, k, params)?;
    let distances = distances_on_device(ctx, &idx, &dist, n, k)?;
    Ok(NeighborsResult {
        n_neighbors: k,
        distances: distances.download(ctx, n)?,
        connectivities: conn.download(ctx, n)?,
        knn,
        scan,
    })
}

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

    fn download(&self, ctx: &GpuContext, n: usize) -> Result<CsrMatrix<f32>> {
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
    params: &NeighborsParams,
) -> Result<DeviceGraph> {
    super::check_union_params(params.set_op_mix_ratio, params.local_connectivity)?;
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
        .arg(&params.local_connectivity)
        .arg(&target)
        .arg(&mean_all)
        .arg(&sigmas)
        .arg(&rhos)
        .arg(&w);
    ctx.launch(l, grid_stride(n), "smooth_knn")?;

    let mix = params.set_op_mix_ratio as f32;
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

/// [`super::neighbors`] on the GPU: the same parameters, checks and result.
pub fn neighbors_gpu<T: Real>(
    ctx: &GpuContext,
    x: &DenseMatrix<T>,
    params: &NeighborsParams,
) -> Result<NeighborsResult> {
    let k = effective_k(x.n_rows, params)?;
    super::check_finite(x)?;
    let values: Vec<f32> = x.data.par_iter().map(|v| v.to_f64() as f32).collect();
    let xd = ctx.upload(&values)?;
    let Some(ivf) = params.method.ivf_for(x.n_rows) else {
        return neighbors_on_device(ctx, &xd, x.n_rows, x.n_cols, k, params);
    };
    let xf = DenseMatrix::new(x.n_rows, x.n_cols, values)?;
    let rows = super::ivf::knn_ivf_gpu(ctx, &xf, &xd, k, &ivf, (0, 1))?;
    let (knn, stats) = super::ivf::finish_gpu(ctx, &xd, x.n_cols, k, &ivf, vec![rows])?;
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
    let conn = connectivities_on_device(ctx, &idx, &dist, n, k, params)?;
    let distances = distances_on_device(ctx, &idx, &dist, n, k)?;
    Ok(NeighborsResult {
        n_neighbors: k,
        knn: Knn {
            n_obs: n,
            k,
            indices: ctx.download(&idx)?,
            distances: ctx.download(&dist)?,
        },
        distances: distances.download(ctx, n)?,
        connectivities: conn.download(ctx, n)?,
        scan,
    })
}
