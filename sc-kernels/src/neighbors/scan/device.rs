//! The kNN scan on the device (`scan.cu`), shared by the exact kNN, the inverted file and the
//! pruned exact kNN.
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

use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "knn_scan",
    source: include_str!("scan.cu"),
};

// Must match the defines of scan.cu.
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

/// `knn_refine_among`: the exact best `k` of each query's `kc` candidates (the rows `0..q` of
/// `x` against other rows, by (distance, index): bbknn's search in a batch, where a row is not
/// its own neighbour unless it is among the references). `q * k` indices and distances.
pub(crate) fn refine_among(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    cand: &DeviceVec<u32>,
    q: usize,
    d: usize,
    kc: usize,
    k: usize,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>)> {
    let idx = ctx.alloc::<u32>(q.max(1) * k)?;
    let dist = ctx.alloc::<f32>(q.max(1) * k)?;
    let sd = ctx.alloc::<f64>(q.max(1) * kc)?;
    let si = ctx.alloc::<u32>(q.max(1) * kc)?;
    let (q64, d32, kc32, k32) = (q as u64, d as u32, kc as u32, k as u32);
    let f = ctx.function(SRC, "knn_refine_among")?;
    let mut l = ctx.launcher(&f);
    l.arg(x).arg(cand).arg(&q64).arg(&d32).arg(&kc32).arg(&k32);
    l.arg(&sd).arg(&si).arg(&idx).arg(&dist);
    ctx.launch(l, grid_stride(q.max(1)), "knn_refine_among")?;
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
pub(crate) fn f32_scan(
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
