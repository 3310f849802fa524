//! Managed (unified) memory, optionally prefetched to the device on allocation.

use super::driver_alloc_error;
use crate::error::Result;
use crate::identity::ResourceIdentity;
use crate::resource::{check_stream, MemoryKind, MemoryResource};
use rmm_cuda::{Device, Stream};

/// Managed memory (RMM's `managed_memory_resource`): lets data exceed the GPU's memory, at the
/// cost of page migration. With `prefetch`, each allocation is migrated to the device on its
/// stream right away, so first-touch faults are avoided.
///
/// ```
/// use rmm_core::{Device, ManagedResource, MemoryKind, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let managed = ManagedResource::with_prefetch(&device);
/// assert_eq!(managed.kind(), MemoryKind::Managed);
/// let stream = device.new_stream()?;
/// let ptr = managed.allocate(1 << 20, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { managed.deallocate(ptr, 1 << 20, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ManagedResource {
    device: Device,
    prefetch: bool,
}

impl ManagedResource {
    /// Managed memory, attached globally, for `device`; not prefetched.
    pub fn new(device: &Device) -> Self {
        ManagedResource {
            device: device.clone(),
            prefetch: false,
        }
    }

    /// Prefetches every allocation to the device on its stream.
    pub fn with_prefetch(device: &Device) -> Self {
        ManagedResource {
            device: device.clone(),
            prefetch: true,
        }
    }
}

impl MemoryResource for ManagedResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        let ptr = self
            .device
            .alloc_managed(bytes)
            .map_err(|e| driver_alloc_error("managed", &self.device, bytes, e))?;
        if self.prefetch && bytes > 0 {
            if let Err(e) = self.device.prefetch(ptr, bytes, stream) {
                // SAFETY: just allocated, unused.
                let _ = unsafe { self.device.free(ptr) };
                return Err(e.into());
            }
        }
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: u64, _bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        Ok(self.device.free(ptr)?)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn kind(&self) -> MemoryKind {
        MemoryKind::Managed
    }

    fn name(&self) -> String {
        if self.prefetch {
            "managed(prefetch)".into()
        } else {
            "managed".into()
        }
    }

    /// Any `ManagedResource` (with or without prefetch) of the same device frees this one's
    /// memory (each allocation is its own driver allocation).
    fn identity(&self) -> ResourceIdentity {
        ResourceIdentity::Driver {
            device: self.device.id(),
            kind: MemoryKind::Managed,
        }
    }
}
