//! Host <-> device transfers through two pinned staging buffers from a pool over
//! `PinnedHostResource`: while the copy engine moves one chunk, the CPU fills (or empties) the
//! other. Pageable copies run at a fraction of the bus speed and block the host; this keeps
//! the bus busy and lets the producer (a file read, a host array) overlap with the copies.

use crate::error::{KernelError, Result};
use bytemuck::Pod;
use rayon::prelude::*;
use rmm_core::{MemoryResource, PinnedHostResource, PoolOptions, PoolResource};
use rmm_cuda::{Device, Event, Stream};
use std::mem::MaybeUninit;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bytes per staging buffer.
pub const CHUNK_BYTES: usize = 64 << 20;
/// Bytes per parallel piece of a host-side copy: small enough that a download of a megabyte
/// or two spreads the first touch of its new pages (a page fault each 4 KiB, about 2.5 us on
/// the GPU machines) over several threads.
const PIECE_BYTES: usize = 256 << 10;

/// Values of `T` per parallel piece.
fn piece<T>() -> usize {
    (PIECE_BYTES / std::mem::size_of::<T>().max(1)).max(1)
}

/// Two pinned buffers and the events that say when the copy engine is done with each.
pub struct Staging {
    pool: PoolResource<PinnedHostResource>,
    stream: Stream,
    chunk_bytes: usize,
    bufs: [(u64, Event); 2],
}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staging(2 x {} bytes pinned)", self.chunk_bytes)
    }
}

fn cuda(e: rmm_cuda::CudaError) -> KernelError {
    KernelError::Gpu(format!("staged copy: {e}"))
}

impl Staging {
    /// Two buffers of `chunk_bytes` (a multiple of 256) of pinned memory; `stream` is the
    /// stream the copies are queued on.
    pub fn new(device: &Device, stream: &Stream, chunk_bytes: usize) -> Result<Self> {
        assert!(
            chunk_bytes >= 256 && chunk_bytes % 256 == 0,
            "chunk of whole 256-byte units"
        );
        let pool = PoolResource::new(
            PinnedHostResource::new(device),
            PoolOptions::sized(2 * chunk_bytes, None),
        )?;
        let a = pool.allocate(chunk_bytes, stream)?;
        let b = match pool.allocate(chunk_bytes, stream) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: allocated just above, never used.
                let _ = unsafe { pool.deallocate(a, chunk_bytes, stream) };
                return Err(e.into());
            }
        };
        let ev = || device.new_event().map_err(cuda);
        Ok(Staging {
            bufs: [(a, ev()?), (b, ev()?)],
            pool,
            stream: stream.clone(),
            chunk_bytes,
        })
    }

    fn per_chunk<T>(&self) -> usize {
        self.chunk_bytes / std::mem::size_of::<T>().max(1)
    }

    /// Writes `len` values to device address `dst`: `fill(first, chunk)` produces values
    /// `first .. first + chunk.len()` into pinned memory while the previous chunk is copied.
    /// Returns when every copy has been executed (the buffers are free again).
    ///
    /// # Safety
    /// `dst .. dst + len * size_of::<T>()` must be device memory that nothing else uses until
    /// the stream has executed the copies.
    pub unsafe fn upload<T: Pod + Send + Sync>(
        &self,
        dst: u64,
        len: usize,
        mut fill: impl FnMut(usize, &mut [T]) -> Result<()>,
    ) -> Result<()> {
        let per = self.per_chunk::<T>();
        let sz = std::mem::size_of::<T>();
        let result = (|| -> Result<()> {
            for (i, first) in (0..len).step_by(per.max(1)).enumerate() {
                let n = per.min(len - first);
                let (ptr, ev) = &self.bufs[i % 2];
                // The copy that last read this buffer must be done before it is refilled.
                ev.synchronize().map_err(cuda)?;
                // SAFETY: the buffer holds chunk_bytes >= n values of T and is ours alone now.
                let host = unsafe { std::slice::from_raw_parts_mut(*ptr as *mut T, n) };
                fill(first, host)?;
                // SAFETY: caller's contract on dst; the buffer stays untouched until `ev` fires.
                unsafe {
                    self.stream
                        .copy_from_host_async(dst + (first * sz) as u64, bytemuck::cast_slice(host))
                        .map_err(cuda)?
                };
                self.stream.record(ev).map_err(cuda)?;
            }
            Ok(())
        })();
        self.drain()?;
        result
    }

    /// A host copy of the `len` values at device address `src` (queued on the stream after
    /// everything queued before), emptied from one buffer while the next chunk is copied.
    ///
    /// # Safety
    /// `src .. src + len * size_of::<T>()` must be readable device memory of `T` values.
    pub unsafe fn download<T: Pod + Send + Sync>(&self, src: u64, len: usize) -> Result<Vec<T>> {
        let mut out: Vec<T> = Vec::with_capacity(len);
        // SAFETY: the caller's contract on src; the spare capacity holds len values.
        unsafe { self.download_to(src, &mut out.spare_capacity_mut()[..len]) }?;
        // SAFETY: every value 0..len was written.
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// As [`Staging::download`], into `dst` (`dst.len()` values), e.g. a block's rows of a
    /// larger host array; every value of `dst` is written when it returns `Ok`.
    ///
    /// # Safety
    /// As [`Staging::download`] with `len = dst.len()`.
    pub unsafe fn download_to<T: Pod + Send + Sync>(
        &self,
        src: u64,
        dst: &mut [MaybeUninit<T>],
    ) -> Result<()> {
        let len = dst.len();
        let per = self.per_chunk::<T>().max(1);
        let sz = std::mem::size_of::<T>();
        let chunks = len.div_ceil(per);
        let queue = |i: usize| -> Result<()> {
            let first = i * per;
            let n = per.min(len - first);
            let (ptr, ev) = &self.bufs[i % 2];
            // SAFETY: the buffer holds at least n values; nothing reads it until `ev` fires.
            let host = unsafe { std::slice::from_raw_parts_mut(*ptr as *mut u8, n * sz) };
            unsafe {
                self.stream
                    .copy_to_host_async(host, src + (first * sz) as u64)
                    .map_err(cuda)?
            };
            self.stream.record(ev).map_err(cuda)
        };
        let mut times = DownloadTimes::default();
        let result = (|| -> Result<()> {
            for i in 0..chunks.min(2) {
                times.queue(|| queue(i))?;
            }
            let spare = &mut *dst;
            for i in 0..chunks {
                let first = i * per;
                let n = per.min(len - first);
                let (ptr, ev) = &self.bufs[i % 2];
                times.wait(|| ev.synchronize().map_err(cuda))?;
                // SAFETY: the copy into this buffer has completed.
                let host = unsafe { std::slice::from_raw_parts(*ptr as *const T, n) };
                times.copy(|| copy_into(&mut spare[first..first + n], host));
                if i + 2 < chunks {
                    times.queue(|| queue(i + 2))?;
                }
            }
            Ok(())
        })();
        self.drain()?;
        times.report(len * sz);
        result
    }

    /// Waits until neither buffer is in use by a queued copy.
    fn drain(&self) -> Result<()> {
        for (_, ev) in &self.bufs {
            ev.synchronize().map_err(cuda)?;
        }
        Ok(())
    }
}

/// Where a staged download's time went, printed when `SCPIPE_TRACE_TRANSFERS` is set: queuing
/// the copies (driver calls), waiting for the copy engine, and the host-side copy.
#[derive(Default)]
struct DownloadTimes {
    queue: Duration,
    wait: Duration,
    longest_wait: Duration,
    copy: Duration,
}

impl DownloadTimes {
    fn queue<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.queue += t.elapsed();
        r
    }

    fn wait<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        let waited = t.elapsed();
        self.wait += waited;
        self.longest_wait = self.longest_wait.max(waited);
        r
    }

    fn copy(&mut self, f: impl FnOnce()) {
        let t = Instant::now();
        f();
        self.copy += t.elapsed();
    }

    fn report(&self, bytes: usize) {
        static ON: OnceLock<bool> = OnceLock::new();
        if *ON.get_or_init(|| std::env::var_os("SCPIPE_TRACE_TRANSFERS").is_some()) {
            eprintln!(
                "download {bytes} bytes: queue {:.3} s, wait for the copy engine {:.3} s \
                 (longest {:.3} s), host copy {:.3} s",
                self.queue.as_secs_f64(),
                self.wait.as_secs_f64(),
                self.longest_wait.as_secs_f64(),
                self.copy.as_secs_f64()
            );
        }
    }
}

/// A parallel copy into uninitialised memory.
fn copy_into<T: Pod + Send + Sync>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    dst.par_chunks_mut(piece::<T>())
        .zip(src.par_chunks(piece::<T>()))
        .for_each(|(d, s)| {
            assert_eq!(d.len(), s.len());
            // SAFETY: both pieces hold s.len() values of T and do not overlap (one is pinned
            // staging memory, the other the caller's); a memcpy whatever T is (a loop over
            // single bytes need not become one).
            unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr() as *mut T, s.len()) };
        });
}

/// A parallel copy of `src[first..first + dst.len()]` into `dst` (an upload's `fill` from a
/// host array).
pub fn fill_from<T: Pod + Send + Sync>(
    src: &[T],
) -> impl FnMut(usize, &mut [T]) -> Result<()> + '_ {
    move |first, dst| {
        let n = dst.len();
        dst.par_chunks_mut(piece::<T>())
            .zip(src[first..first + n].par_chunks(piece::<T>()))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.drain();
        for (ptr, _) in &self.bufs {
            // SAFETY: allocated in `new` with this size and stream; no copy uses them (drained).
            let _ = unsafe { self.pool.deallocate(*ptr, self.chunk_bytes, &self.stream) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmm_core::{CudaResource, DeviceVec, SharedResource};
    use std::sync::Arc;

    /// The chunk logic on the simulated device: odd lengths, several chunks, both directions.
    #[test]
    fn round_trips_through_small_chunks() {
        let device = Device::simulated(64 << 20);
        let stream = device.new_stream().unwrap();
        let staging = Staging::new(&device, &stream, 1024).unwrap();
        let r: SharedResource = Arc::new(CudaResource::new(&device));
        for len in [0usize, 1, 255, 256, 257, 1000, 4096 + 3] {
            let src: Vec<u32> = (0..len as u32)
                .map(|i| i.wrapping_mul(2654435761))
                .collect();
            let dst = DeviceVec::<u32>::with_resource(len, &stream, r.clone()).unwrap();
            unsafe { staging.upload(dst.ptr(), len, fill_from(&src)) }.unwrap();
            assert_eq!(dst.to_host().unwrap(), src, "upload of {len}");
            let back: Vec<u32> = unsafe { staging.download(dst.ptr(), len) }.unwrap();
            assert_eq!(back, src, "download of {len}");
        }
    }

    /// Chunks of several host-copy pieces each, the last piece and the last chunk partial.
    #[test]
    fn chunks_of_several_pieces_round_trip() {
        let device = Device::simulated(64 << 20);
        let stream = device.new_stream().unwrap();
        let staging = Staging::new(&device, &stream, 4 * PIECE_BYTES).unwrap();
        let r: SharedResource = Arc::new(CudaResource::new(&device));
        let len = 3 * piece::<u64>() * 4 + piece::<u64>() / 2 + 7;
        let src: Vec<u64> = (0..len as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let dst = DeviceVec::<u64>::with_resource(len, &stream, r).unwrap();
        unsafe { staging.upload(dst.ptr(), len, fill_from(&src)) }.unwrap();
        assert_eq!(dst.to_host().unwrap(), src);
        let back: Vec<u64> = unsafe { staging.download(dst.ptr(), len) }.unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn a_failing_producer_stops_the_upload_cleanly() {
        let device = Device::simulated(1 << 20);
        let stream = device.new_stream().unwrap();
        let staging = Staging::new(&device, &stream, 256).unwrap();
        let r: SharedResource = Arc::new(CudaResource::new(&device));
        let dst = DeviceVec::<u8>::with_resource(1000, &stream, r).unwrap();
        let e = unsafe {
            staging.upload(dst.ptr(), 1000, |first, _: &mut [u8]| {
                if first >= 512 {
                    Err(KernelError::Unsupported("read failed".into()))
                } else {
                    Ok(())
                }
            })
        }
        .unwrap_err();
        assert!(e.to_string().contains("read failed"));
    }
}
