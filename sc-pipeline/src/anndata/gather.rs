//! Blocks of rows on several GPUs gathered into one host matrix: each GPU downloads its rows
//! straight into their place in the result, all GPUs at once.

use super::{DeviceData, DeviceMatrix, Matrix};
use rmm_core::DeviceVec;
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::{CsrMatrix, DenseMatrix, KernelError};

/// A stack's blocks by layout, each with its GPU's context: all dense or all CSR.
pub(crate) enum BlockParts<'a> {
    Dense(Vec<(&'a GpuContext, &'a DeviceVec<f32>)>),
    Csr(Vec<(&'a GpuContext, &'a DeviceCsr)>),
}

/// The blocks' parts, or `None` when they mix layouts or one is not in device memory.
pub(crate) fn block_parts<'a>(blocks: &[&'a DeviceMatrix]) -> Option<BlockParts<'a>> {
    let dense: Option<Vec<_>> = blocks
        .iter()
        .map(|b| match &b.data {
            DeviceData::Dense(m) => Some((&*b.ctx, &m.data)),
            _ => None,
        })
        .collect();
    let csr = || {
        blocks
            .iter()
            .map(|b| match &b.data {
                DeviceData::Csr(m) => Some((&*b.ctx, m)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
    };
    dense
        .map(BlockParts::Dense)
        .or_else(|| csr().map(BlockParts::Csr))
}

/// The blocks (all CSR or all dense, see [`DeviceMatrix::rows`]) stacked into one host matrix.
pub(super) fn gather_blocks(blocks: &[&DeviceMatrix]) -> sc_kernels::Result<Matrix> {
    let n_cols = blocks.first().map_or(0, |b| b.shape().1);
    let n_rows = blocks.iter().map(|b| b.shape().0).sum();
    let parts = block_parts(blocks).ok_or_else(|| {
        KernelError::Shape(
            "only blocks all CSR or all dense, in device memory, can be gathered".into(),
        )
    })?;
    let csr = match parts {
        BlockParts::Dense(dense) => {
            let data = gather_vecs(&dense)?;
            return Ok(Matrix::Dense(DenseMatrix {
                n_rows,
                n_cols,
                data,
            }));
        }
        BlockParts::Csr(csr) => csr,
    };
    let indptr = stacked_indptr(&csr, false)?;
    let indices: Vec<_> = csr.iter().map(|&(ctx, m)| (ctx, &m.indices)).collect();
    let values: Vec<_> = csr.iter().map(|&(ctx, m)| (ctx, &m.data)).collect();
    Ok(Matrix::Sparse(CsrMatrix {
        n_rows,
        n_cols,
        indptr,
        indices: gather_vecs(&indices)?,
        data: gather_vecs(&values)?,
    }))
}

/// CSR blocks of rows on several GPUs stacked into one matrix on `ctx`'s GPU, each block's
/// values and indices copied device to device (`cuMemcpyPeerAsync`: straight between the GPUs
/// where they reach each other), the offsets through the host: no host copy of the matrix. The
/// blocks must be final; returns when the copies are done.
pub(crate) fn stack_csr_on(
    ctx: &GpuContext,
    parts: &[(&GpuContext, &DeviceCsr)],
) -> sc_kernels::Result<DeviceCsr> {
    let n_cols = parts.first().map_or(0, |(_, m)| m.n_cols);
    if let Some((_, m)) = parts.iter().find(|(_, m)| m.n_cols != n_cols) {
        return Err(KernelError::Shape(format!(
            "stacking blocks of {} and {n_cols} columns",
            m.n_cols
        )));
    }
    let nnz = parts.iter().map(|(_, m)| m.data.len()).sum();
    let data = ctx.alloc::<f32>(nnz)?;
    let indices = ctx.alloc::<u32>(nnz)?;
    let peer =
        |e: rmm_cuda::CudaError| KernelError::Gpu(format!("copying a block between GPUs: {e}"));
    let mut at = 0u64;
    for (from, m) in parts {
        let bytes = m.data.len() * 4;
        // SAFETY: each block's `bytes` fit in the new arrays at `at` (they hold every block's
        // values one after the other); the sources are device memory of `from`'s GPU, final,
        // and outlive the copies (waited for below).
        unsafe {
            let s = ctx.stream();
            for (dst, src) in [(data.ptr(), m.data.ptr()), (indices.ptr(), m.indices.ptr())] {
                if from.device() == ctx.device() {
                    s.copy_device(dst + at, src, bytes)
                } else {
                    s.copy_from_peer(dst + at, src, from.device(), bytes)
                }
                .map_err(peer)?;
            }
        }
        at += bytes as u64;
    }
    let indptr = ctx.upload(&stacked_indptr(parts, false)?)?;
    ctx.stream().synchronize().map_err(peer)?;
    Ok(DeviceCsr {
        n_rows: parts.iter().map(|(_, m)| m.n_rows).sum(),
        n_cols,
        indptr,
        indices,
        data,
    })
}

/// The row offsets of CSR blocks stacked in order (each block's offsets downloaded, on its
/// GPU's copy lane when `lane`, and shifted by the values before it).
pub(crate) fn stacked_indptr(
    csr: &[(&GpuContext, &DeviceCsr)],
    lane: bool,
) -> sc_kernels::Result<Vec<u64>> {
    let mut indptr = vec![0u64];
    for (ctx, m) in csr {
        let part = match lane {
            true => ctx.copy_lane()?.download(&m.indptr)?,
            false => ctx.download(&m.indptr)?,
        };
        let base = *indptr.last().expect("starts with 0");
        indptr.extend(part[1..=m.n_rows].iter().map(|&p| p + base));
    }
    Ok(indptr)
}

/// The device vectors one after the other in one new host array, each downloaded into its
/// place by a thread of its own, all GPUs at once. The array is not zeroed first: its pages
/// are touched once, by the copies (zeroing 24 GB first made stacking two GPUs' results take
/// twice as long as one GPU's download).
fn gather_vecs<T: bytemuck::Pod + Send + Sync>(
    vecs: &[(&GpuContext, &DeviceVec<T>)],
) -> sc_kernels::Result<Vec<T>> {
    let total = vecs.iter().map(|(_, v)| v.len()).sum();
    let mut out: Vec<T> = Vec::with_capacity(total);
    let slots = split_lengths(
        &mut out.spare_capacity_mut()[..total],
        vecs.iter().map(|(_, v)| v.len()),
    );
    let jobs = vecs
        .iter()
        .zip(slots)
        .map(|(&(ctx, v), slot)| (ctx, move || ctx.download_uninit(v, slot)));
    on_their_gpus(jobs, None)?;
    // SAFETY: every download returned Ok, so each wrote all of its slots, and the slots cover
    // 0..total.
    unsafe { out.set_len(total) };
    Ok(out)
}

/// The bytes `start..start + dst.len()` of the device vectors laid one after the other, copied
/// into `dst` (e.g. a dataset's place in a memory-mapped file): each vector's share by a thread
/// of its own, all GPUs at once, on each GPU's copy lane, so that the copies overlap the work
/// queued on the vectors' own streams meanwhile (the output is written while neighbors runs).
/// The host side of the copies runs in `pool` (rayon's global pool when `None`), so that it
/// does not queue behind the work other steps give the global pool meanwhile. The vectors must
/// be final: every step ends with its stream idle.
pub(crate) fn gather_bytes<T: bytemuck::Pod + Send + Sync>(
    vecs: &[(&GpuContext, &DeviceVec<T>)],
    start: usize,
    dst: &mut [u8],
    pool: Option<&rayon::ThreadPool>,
) -> sc_kernels::Result<()> {
    let jobs = shares(vecs, start, dst)?
        .into_iter()
        .map(|(ctx, v, at, mine)| {
            (ctx, move || {
                ctx.copy_lane()?.download_bytes_into(v, at, mine)
            })
        });
    on_their_gpus(jobs, pool)
}

/// As [`gather_bytes`], each share copied straight into `dst` by the calling thread
/// ([`GpuContext::download_bytes_direct`] on each GPU's copy lane), without the staging buffers'
/// lock: for several threads gathering at once, each into pinned memory of its own (a chunked
/// write's buffers).
pub(crate) fn gather_bytes_direct<T: bytemuck::Pod + Send + Sync>(
    vecs: &[(&GpuContext, &DeviceVec<T>)],
    start: usize,
    dst: &mut [u8],
) -> sc_kernels::Result<()> {
    shares(vecs, start, dst)?
        .into_iter()
        .try_for_each(|(ctx, v, at, mine)| ctx.copy_lane()?.download_bytes_direct(v, at, mine))
}

/// One device vector's share of a gather: its context, the vector, the byte offset in it and
/// the part of the destination it fills.
type Share<'a, 'd, T> = (&'a GpuContext, &'a DeviceVec<T>, usize, &'d mut [u8]);

/// `dst` cut into the shares of the vectors (laid one after the other) that bytes
/// `start..start + dst.len()` fall in; an error when those bytes run past the vectors' end.
fn shares<'a, 'd, T: bytemuck::Pod>(
    vecs: &[(&'a GpuContext, &'a DeviceVec<T>)],
    start: usize,
    dst: &'d mut [u8],
) -> sc_kernels::Result<Vec<Share<'a, 'd, T>>> {
    let size = std::mem::size_of::<T>();
    let end = start + dst.len();
    let mut rest = dst;
    let mut out = Vec::new();
    let mut first = 0;
    for &(ctx, v) in vecs {
        let (lo, hi) = (first, first + v.len() * size);
        first = hi;
        let (from, to) = (lo.max(start), hi.min(end));
        if from >= to {
            continue;
        }
        let (mine, after) = std::mem::take(&mut rest).split_at_mut(to - from);
        rest = after;
        out.push((ctx, v, from - lo, mine));
    }
    if !rest.is_empty() || first < end {
        return Err(KernelError::Shape(format!(
            "bytes {start}..{end} of device arrays of {first} bytes"
        )));
    }
    Ok(out)
}

/// Runs each job on a thread of its own (inside `pool` when given) with its GPU's context
/// bound; the first error, if any.
fn on_their_gpus<'a, F>(
    jobs: impl IntoIterator<Item = (&'a GpuContext, F)>,
    pool: Option<&rayon::ThreadPool>,
) -> sc_kernels::Result<()>
where
    F: FnOnce() -> sc_kernels::Result<()> + Send,
{
    std::thread::scope(|s| {
        let hs: Vec<_> = jobs
            .into_iter()
            .map(|(ctx, job)| {
                s.spawn(move || {
                    let run = || {
                        ctx.bind_to_thread()?;
                        job()
                    };
                    match pool {
                        Some(p) => p.install(run),
                        None => run(),
                    }
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().expect("a download thread panicked"))
    })
}

/// `v` cut into consecutive slices of the given lengths.
pub(crate) fn split_lengths<T>(
    mut v: &mut [T],
    lens: impl Iterator<Item = usize>,
) -> Vec<&mut [T]> {
    let mut out = Vec::new();
    for l in lens {
        let (a, b) = v.split_at_mut(l);
        out.push(a);
        v = b;
    }
    out
}
