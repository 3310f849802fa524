//! Page-locked buffers lent to threads that each download into a buffer of their own, several at
//! once: a chunked write's threads, each copying a chunk from the GPU, then encoding and writing
//! it while the others copy theirs. The staging buffers serve one transfer at a time (behind a
//! lock, with a host-side copy out of them); these are the destination itself, so the copy
//! engine writes straight into the memory the file is written from.
//!
//! They are made all at once, ahead of the write: pinning host memory waits for every kernel
//! queued on the device (see [`super::GpuContext::prepare_transfers`]), so lending one never
//! pins. The memory is portable: any GPU's copies into it run at the bus's speed.

use crate::error::Result;
use rmm_core::{MemoryResource, PinnedHostResource, PoolOptions, PoolResource};
use rmm_cuda::{Device, Stream};
use std::sync::Arc;

/// `count` buffers of `bytes` each, lent one per thread.
pub struct PinnedBuffers {
    pool: Arc<PoolResource<PinnedHostResource>>,
    stream: Stream,
    count: usize,
    bytes: usize,
}

impl std::fmt::Debug for PinnedBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBuffers({} x {} bytes)", self.count, self.bytes)
    }
}

/// Bytes each buffer is rounded up to, so `count` of them fill the pool exactly.
const ALIGN: usize = 256;

impl PinnedBuffers {
    /// `count` buffers of `bytes` (rounded up to 256) of pinned memory, in one pool that never
    /// grows; `stream` is the stream they are allocated and freed on.
    pub fn new(device: &Device, stream: &Stream, count: usize, bytes: usize) -> Result<Self> {
        let bytes = bytes.max(1).next_multiple_of(ALIGN);
        let total = count.max(1) * bytes;
        let pool = PoolResource::new(
            PinnedHostResource::new(device),
            PoolOptions::sized(total, Some(total)),
        )?;
        Ok(PinnedBuffers {
            pool: Arc::new(pool),
            stream: stream.clone(),
            count,
            bytes,
        })
    }

    /// Bytes per buffer.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.count
    }

    /// A buffer of its own for the caller until it drops; `None` when every one is lent.
    pub fn lend(&self) -> Option<PinnedBuffer> {
        let ptr = self.pool.allocate(self.bytes, &self.stream).ok()?;
        Some(PinnedBuffer {
            pool: self.pool.clone(),
            stream: self.stream.clone(),
            ptr,
            bytes: self.bytes,
        })
    }
}

/// One lent buffer: `bytes` of pinned host memory, given back when dropped.
pub struct PinnedBuffer {
    pool: Arc<PoolResource<PinnedHostResource>>,
    stream: Stream,
    ptr: u64,
    bytes: usize,
}

impl PinnedBuffer {
    /// The buffer's bytes. Only the holder writes them: copies into it are waited for by
    /// whoever queued them ([`super::GpuContext::download_bytes_direct`] returns when its copy
    /// is done).
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        // SAFETY: `bytes` bytes of pinned memory from the pool, lent to this value alone, and
        // page-aligned pool memory is aligned for any element a caller casts it to.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.bytes) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated from this pool with this size and stream; no copy into it is
        // pending (every copy into it was waited for before its writer let go of it).
        let _ = unsafe { self.pool.deallocate(self.ptr, self.bytes, &self.stream) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every buffer is lent once, the next ask finds none, and a returned one is lent again;
    /// buffers are distinct and writable.
    #[test]
    fn lends_each_buffer_once_until_returned() {
        let device = Device::simulated(1 << 20);
        let stream = device.new_stream().unwrap();
        let buffers = PinnedBuffers::new(&device, &stream, 3, 1000).unwrap();
        assert_eq!(buffers.bytes(), 1024, "rounded up to 256");
        let mut lent: Vec<_> = (0..3).map(|_| buffers.lend().expect("a buffer")).collect();
        assert!(buffers.lend().is_none(), "all three are lent");
        for (i, b) in lent.iter_mut().enumerate() {
            b.as_mut_bytes().fill(i as u8);
        }
        for (i, b) in lent.iter_mut().enumerate() {
            assert!(
                b.as_mut_bytes().iter().all(|&x| x == i as u8),
                "buffers overlap"
            );
        }
        lent.pop();
        assert!(buffers.lend().is_some(), "a returned buffer is lent again");
    }
}
