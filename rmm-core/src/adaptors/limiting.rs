//! Limiting (RMM's `limiting_resource_adaptor`): refuses allocations that would take the bytes
//! handed out past a limit.

use crate::error::{human_bytes, OutOfMemory, Result};
use crate::resource::{aligned_size, MemoryResource, SharedResource};
use rmm_cuda::Stream;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Caps the bytes outstanding through it (counted rounded up to 256, as the upstream hands them
/// out) at `limit`.
///
/// ```
/// use rmm_core::{CudaResource, Device, LimitingAdaptor, MemoryError, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let limited = LimitingAdaptor::new(CudaResource::new(&device), 1 << 20);
/// let stream = device.new_stream()?;
/// let ptr = limited.allocate(512 << 10, &stream)?;
/// assert!(matches!(limited.allocate(768 << 10, &stream), Err(MemoryError::OutOfMemory(_))));
/// // SAFETY: allocated above with this size, unused.
/// unsafe { limited.deallocate(ptr, 512 << 10, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LimitingAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
    limit: usize,
    allocated: AtomicUsize,
}

impl<U: MemoryResource> LimitingAdaptor<U> {
    pub fn new(upstream: U, limit: usize) -> Self {
        LimitingAdaptor {
            upstream,
            limit,
            allocated: AtomicUsize::new(0),
        }
    }

    /// Bytes outstanding (rounded up to 256 each).
    pub fn allocated_bytes(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn allocation_limit(&self) -> usize {
        self.limit
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U: MemoryResource> MemoryResource for LimitingAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let size = aligned_size(bytes.min(usize::MAX - 255));
        // Reserve first, so that concurrent callers cannot pass the limit together.
        let before = self.allocated.fetch_add(size, Ordering::AcqRel);
        if before.saturating_add(size) > self.limit {
            self.allocated.fetch_sub(size, Ordering::AcqRel);
            return Err(OutOfMemory::new("limiting", bytes)
                .held(before)
                .free(self.limit.saturating_sub(before))
                .maximum(self.limit)
                .detail(format!(
                    "the byte limit of {} would be exceeded",
                    human_bytes(self.limit)
                ))
                .into());
        }
        self.upstream.allocate(bytes, stream).inspect_err(|_| {
            self.allocated.fetch_sub(size, Ordering::AcqRel);
        })
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        self.upstream.deallocate(ptr, bytes, stream)?;
        self.allocated
            .fetch_sub(aligned_size(bytes), Ordering::AcqRel);
        Ok(())
    }

    pass_through!(device, kind, name = "limiting");
}
