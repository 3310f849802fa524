//! Page-locked host memory: fast, asynchronous host <-> device copies.

use super::driver_alloc_error;
use crate::error::Result;
use crate::identity::ResourceIdentity;
use crate::resource::{check_stream, MemoryKind, MemoryResource};
use rmm_cuda::{Device, Stream};

/// Pinned host memory (RMM's `pinned_host_memory_resource`), for staging buffers: copies from it
/// run at full PCIe/NVLink speed and truly asynchronously.
///
/// ```
/// use rmm_core::{Device, MemoryResource, PinnedHostResource, PoolOptions, PoolResource};
/// let device = Device::simulated(1 << 30);
/// // A stream-ordered pool of pinned host memory.
/// let pool = PoolResource::new(PinnedHostResource::new(&device), PoolOptions::sized(8 << 20, None))?;
/// let stream = device.new_stream()?;
/// let ptr = pool.allocate(1000, &stream)?;
/// assert!(pool.kind().host_accessible());
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { pool.deallocate(ptr, 1000, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PinnedHostResource {
    device: Device,
}

impl PinnedHostResource {
    /// Pinned host memory, allocated through `device`'s context (portable to every device).
    pub fn new(device: &Device) -> Self {
        PinnedHostResource {
            device: device.clone(),
        }
    }
}

impl MemoryResource for PinnedHostResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        self.device
            .alloc_pinned(bytes)
            .map_err(|e| driver_alloc_error("pinned_host", &self.device, bytes, e))
    }

    unsafe fn deallocate(&self, ptr: u64, _bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        // The host memory may still be read by copies queued on `stream`.
        stream.synchronize()?;
        Ok(self.device.free_pinned(ptr)?)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn kind(&self) -> MemoryKind {
        MemoryKind::PinnedHost
    }

    fn name(&self) -> String {
        "pinned_host".into()
    }

    /// Any `PinnedHostResource` of the same device frees this one's memory (each
    /// allocation is its own driver allocation).
    fn identity(&self) -> ResourceIdentity {
        ResourceIdentity::Driver {
            device: self.device.id(),
            kind: MemoryKind::PinnedHost,
        }
    }
}
