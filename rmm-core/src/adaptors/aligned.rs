//! Aligned (RMM's `aligned_resource_adaptor`): alignments above the resources' 256 bytes, by
//! over-allocating and handing out an aligned address inside the block.

use crate::error::{MemoryError, OutOfMemory, Result};
use crate::resource::{align_up, MemoryResource, SharedResource};
use parking_lot::Mutex;
use rmm_cuda::{Stream, ALIGNMENT};
use std::collections::HashMap;

/// Hands out addresses aligned to `alignment` for requests of `threshold` bytes or more (smaller
/// requests pass through with the upstream's 256-byte alignment).
///
/// ```
/// use rmm_core::{AlignedAdaptor, CudaResource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// // Requests of 64 KiB or more get 4 KiB-aligned addresses.
/// let aligned = AlignedAdaptor::new(CudaResource::new(&device), 4096, 64 << 10)?;
/// let stream = device.new_stream()?;
/// let ptr = aligned.allocate(100 << 10, &stream)?;
/// assert_eq!(ptr % 4096, 0);
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { aligned.deallocate(ptr, 100 << 10, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AlignedAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
    alignment: usize,
    threshold: usize,
    /// Aligned address handed out -> the upstream's address, where they differ.
    moved: Mutex<HashMap<u64, u64>>,
}

impl<U: MemoryResource> AlignedAdaptor<U> {
    /// `alignment` must be a power of two (values below 256 mean 256).
    pub fn new(upstream: U, alignment: usize, threshold: usize) -> Result<Self> {
        if !alignment.is_power_of_two() {
            return Err(MemoryError::InvalidArgument(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        Ok(AlignedAdaptor {
            upstream,
            alignment: alignment.max(ALIGNMENT),
            threshold,
            moved: Mutex::new(HashMap::new()),
        })
    }

    pub fn alignment(&self) -> usize {
        self.alignment
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    fn passes_through(&self, bytes: usize) -> bool {
        bytes == 0 || self.alignment == ALIGNMENT || bytes < self.threshold
    }

    /// The upstream block: room for `bytes` after any shift up to the next aligned address.
    fn upstream_size(&self, bytes: usize) -> Option<usize> {
        bytes
            .checked_add(self.alignment - 1)
            .map(|b| b & !(self.alignment - 1))
            .and_then(|b| b.checked_add(self.alignment - ALIGNMENT))
    }
}

impl<U: MemoryResource> MemoryResource for AlignedAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if self.passes_through(bytes) {
            return self.upstream.allocate(bytes, stream);
        }
        let Some(size) = self.upstream_size(bytes) else {
            return Err(OutOfMemory::new("aligned", bytes)
                .detail("larger than any address space")
                .into());
        };
        let ptr = self.upstream.allocate(size, stream).map_err(|e| match e {
            MemoryError::OutOfMemory(mut oom) => {
                oom.detail = Some(format!(
                    "{} bytes asked of {} to align to {}{}",
                    size,
                    self.upstream.name(),
                    self.alignment,
                    oom.detail.map(|d| format!("; {d}")).unwrap_or_default()
                ));
                oom.requested = bytes;
                MemoryError::OutOfMemory(oom)
            }
            other => other,
        })?;
        let aligned = align_up(ptr as usize, self.alignment) as u64;
        if aligned != ptr {
            self.moved.lock().insert(aligned, ptr);
        }
        Ok(aligned)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if self.passes_through(bytes) {
            return self.upstream.deallocate(ptr, bytes, stream);
        }
        let size = self.upstream_size(bytes).ok_or_else(|| {
            MemoryError::InvalidDeallocation(format!("{bytes} bytes cannot have been allocated"))
        })?;
        let original = self.moved.lock().remove(&ptr).unwrap_or(ptr);
        self.upstream.deallocate(original, size, stream)
    }

    pass_through!(device, kind);

    fn name(&self) -> String {
        format!("aligned({}, {})", self.alignment, self.upstream.name())
    }
}
