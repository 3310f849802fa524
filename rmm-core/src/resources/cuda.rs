//! Plain device memory: every allocation is a `cuMemAlloc`, every free a `cuMemFree`.

use super::driver_alloc_error;
use crate::error::Result;
use crate::identity::ResourceIdentity;
use crate::resource::{check_stream, MemoryKind, MemoryResource};
use rmm_cuda::{Device, Stream};

/// Device memory straight from the driver (RMM's `cuda_memory_resource`). Slow (the driver call
/// synchronises the device on free) but the simplest upstream.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let cuda = CudaResource::new(&device);
/// let stream = device.new_stream()?;
/// let ptr = cuda.allocate(4096, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { cuda.deallocate(ptr, 4096, &stream)? };
/// assert!(cuda.is_equal(&CudaResource::new(&device)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct CudaResource {
    device: Device,
}

impl CudaResource {
    /// Device memory of `device`.
    pub fn new(device: &Device) -> Self {
        CudaResource {
            device: device.clone(),
        }
    }
}

impl MemoryResource for CudaResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        self.device
            .alloc(bytes)
            .map_err(|e| driver_alloc_error("cuda", &self.device, bytes, e))
    }

    unsafe fn deallocate(&self, ptr: u64, _bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        Ok(self.device.free(ptr)?)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn name(&self) -> String {
        "cuda".into()
    }

    /// Any `CudaResource` of the same device frees this one's memory (each
    /// allocation is its own driver allocation).
    fn identity(&self) -> ResourceIdentity {
        ResourceIdentity::Driver {
            device: self.device.id(),
            kind: MemoryKind::Device,
        }
    }
}
