//! Reductions over a dense row-major device matrix with the host's bits: sums over fixed chunks
//! of [`DENSE_CHUNK_ROWS`] rows added in chunk order, as [`crate::stats`] adds them on the host
//! whatever the number of threads (also over a CSR matrix's rows densified a wave at a time);
//! and the finiteness check that names the first bad value.

use super::module_cache::KernelSource;
use super::{grid_for, DeviceCsr, DeviceDense, DeviceVec, GpuContext};
use crate::error::{KernelError, Result};
use crate::stats::DENSE_CHUNK_ROWS;
use bytemuck::Pod;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "dense_reduce",
    source: include_str!("dense_reduce.cu"),
};

/// Device bytes the chunks' partial sums take at most at once (more chunks go in later waves).
pub const PARTIAL_BYTES: usize = 256 << 20;

/// Columns up to which the chunks' sums are added by a warp a column (`add_chunks_warp`), past
/// which by a thread a column (`add_chunks`); the same bits. On an H100 (session 46, 245-1,953
/// chunks) the warps took 0.35-0.8x the threads' time up to 2,000 columns, 1.2-2.8x from 8,192.
const WARP_ADD_COLUMNS: usize = 4096;

/// Device bytes a wave of densified CSR rows takes at most ([`csr_chunked_sums`]; at least one
/// chunk's).
pub const WAVE_BYTES: usize = 1 << 30;

/// `len` sums over `n_rows` rows, each over chunks of [`DENSE_CHUNK_ROWS`] rows added in chunk
/// order (0 + chunk 0 + chunk 1 + ...): `partials(first, count, out)` queues the writing of the
/// sums of chunks `first .. first + count` into `out` (`count x len`), a wave of chunks taking
/// at most `partial_bytes` at a time.
pub fn chunked_sums(
    ctx: &GpuContext,
    n_rows: usize,
    len: usize,
    partial_bytes: usize,
    partials: impl FnMut(u64, u64, &DeviceVec<f64>) -> Result<()>,
) -> Result<Vec<f64>> {
    let total = ctx.zeros::<f64>(len)?;
    let shape = (n_rows, DENSE_CHUNK_ROWS, len);
    chunked_sums_into(ctx, shape, partial_bytes, total.ptr(), partials)?;
    ctx.download(&total)
}

/// [`chunked_sums`] over chunks of `chunk_rows` rows (`shape`: `(n_rows, chunk_rows, len)`),
/// queued into the `len` zeros at device address `total` and left on the device (nothing waited
/// for): sums a later kernel reads, or several downloaded at once.
pub fn chunked_sums_into(
    ctx: &GpuContext,
    (n_rows, chunk_rows, len): (usize, usize, usize),
    partial_bytes: usize,
    total: u64,
    mut partials: impl FnMut(u64, u64, &DeviceVec<f64>) -> Result<()>,
) -> Result<()> {
    let n_chunks = n_rows.div_ceil(chunk_rows);
    // At most 65,535 chunks a wave: kernels may lay a wave's chunks along the grid's y.
    let wave = (partial_bytes / (len.max(1) * 8)).clamp(1, n_chunks.clamp(1, 65_535));
    let partial = ctx.alloc::<f64>(wave * len)?;
    let by_warp = len <= WARP_ADD_COLUMNS;
    let name = if by_warp {
        "add_chunks_warp"
    } else {
        "add_chunks"
    };
    let add = ctx.function(SRC, name)?;
    let len64 = len as u64;
    for first in (0..n_chunks).step_by(wave) {
        let count = wave.min(n_chunks - first) as u64;
        partials(first as u64, count, &partial)?;
        let mut l = ctx.launcher(&add);
        l.arg(&partial).arg(&count).arg(&len64).arg(&total);
        let threads = if by_warp { len * 32 } else { len };
        ctx.launch(l, ctx.filling_grid(threads), name)?;
    }
    Ok(())
}

/// [`chunked_sums`] over the rows of the CSR `x`, densified a wave of chunks at a time (at most
/// [`WAVE_BYTES`]): `partials(wave, row0, first, count, out)` queues the sums of chunks
/// `first .. first + count`, whose rows (from row `row0` on) `wave` holds dense, row-major.
pub fn csr_chunked_sums(
    ctx: &GpuContext,
    x: &DeviceCsr,
    len: usize,
    partials: impl FnMut(&DeviceVec<f32>, usize, u64, u64, &DeviceVec<f64>) -> Result<()>,
) -> Result<Vec<f64>> {
    csr_chunked_sums_in_waves(ctx, x, len, WAVE_BYTES, partials)
}

/// [`csr_chunked_sums`] with waves of at most `wave_bytes` (at least one chunk's rows).
pub fn csr_chunked_sums_in_waves(
    ctx: &GpuContext,
    x: &DeviceCsr,
    len: usize,
    wave_bytes: usize,
    mut partials: impl FnMut(&DeviceVec<f32>, usize, u64, u64, &DeviceVec<f64>) -> Result<()>,
) -> Result<Vec<f64>> {
    let (n, g) = (x.n_rows, x.n_cols);
    let wave_chunks = (wave_bytes / (DENSE_CHUNK_ROWS * g.max(1) * 4)).max(1);
    let mut wave = ctx.alloc::<f32>((wave_chunks * DENSE_CHUNK_ROWS).min(n) * g)?;
    chunked_sums(ctx, n, len, wave_chunks * len * 8, |first, count, out| {
        let row0 = first as usize * DENSE_CHUNK_ROWS;
        let rows = (count as usize * DENSE_CHUNK_ROWS).min(n - row0);
        x.rows_to_dense_into(ctx, row0, rows, &mut wave)?;
        partials(&wave, row0, first, count, out)
    })
}

/// The columns' sums and sums of squares, as [`crate::stats::dense_col_moments`] has them.
pub fn dense_col_moments(ctx: &GpuContext, x: &DeviceDense) -> Result<(Vec<f64>, Vec<f64>)> {
    let g = x.n_cols;
    let f = ctx.function(SRC, "dense_chunk_moments")?;
    let (n, g64, rows) = (x.n_rows as u64, g as u64, DENSE_CHUNK_ROWS as u64);
    let mut t = chunked_sums(ctx, x.n_rows, 2 * g, PARTIAL_BYTES, |first, count, out| {
        let mut l = ctx.launcher(&f);
        l.arg(&x.data).arg(&n).arg(&g64).arg(&rows);
        l.arg(&first).arg(&count).arg(out);
        ctx.launch(l, grid_for(count as usize * g), "dense_chunk_moments")
    })?;
    let sq = t.split_off(g);
    Ok((t, sq))
}

/// Fails as [`check_finite_dense`] does when `plain_sums` (sums of X's values with weight 1,
/// each value in one of them) are not all finite: an f64 sum of f32 values cannot overflow, so
/// it is finite exactly when its values are, and the pass that names the bad value runs only
/// then (the sums' own pass is the check).
pub fn finite_by_sums(ctx: &GpuContext, x: &DeviceDense, plain_sums: &[f64]) -> Result<()> {
    if plain_sums.iter().all(|s| s.is_finite()) {
        return Ok(());
    }
    check_finite_dense(ctx, x)?;
    Err(KernelError::Gpu(
        "a column sum is not finite though every value is".into(),
    ))
}

/// The position of `x`'s first zero, if any: a check of sums (a cell without counts) that
/// downloads one number, not the sums.
pub fn first_zero(ctx: &GpuContext, x: &DeviceVec<f64>) -> Result<Option<usize>> {
    first_where(ctx, "first_zero_f64", x)
}

/// The first position of `x` that `kernel` (`(x, n, first)`: `atomicMin(first, i)` where the
/// value fails) reports, if any.
fn first_where<T: Pod>(ctx: &GpuContext, kernel: &str, x: &DeviceVec<T>) -> Result<Option<usize>> {
    let first = ctx.upload(&[u64::MAX])?;
    if !x.is_empty() {
        let f = ctx.function(SRC, kernel)?;
        let n = x.len() as u64;
        let mut l = ctx.launcher(&f);
        l.arg(x).arg(&n).arg(&first);
        ctx.launch(l, ctx.filling_grid(x.len()), kernel)?;
    }
    let p = ctx.download(&first)?[0];
    Ok((p != u64::MAX).then_some(p as usize))
}

/// Fails on the first NaN or infinite value (in row order), as
/// [`crate::dense::DenseMatrix::check_finite`] names it.
pub fn check_finite_dense(ctx: &GpuContext, x: &DeviceDense) -> Result<()> {
    let Some(p) = first_where(ctx, "dense_first_nonfinite", &x.data)? else {
        return Ok(());
    };
    let d = x.n_cols.max(1);
    Err(KernelError::NonFinite {
        row: p / d,
        col: p % d,
        value: ctx.download_range(&x.data, p..p + 1)?[0] as f64,
    })
}
