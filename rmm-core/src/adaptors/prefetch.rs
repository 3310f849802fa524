//! Prefetch (RMM's `prefetch_resource_adaptor`): migrates each new allocation of managed memory to
//! the device on its stream, so kernels do not fault the pages in one by one.

use crate::error::Result;
use crate::resource::{MemoryResource, SharedResource};
use rmm_cuda::Stream;

/// `CUDA_ERROR_INVALID_VALUE`: what the driver answers when asked to prefetch memory that is not
/// managed. As in RMM, that makes the prefetch a no-op rather than a failed allocation.
const CUDA_ERROR_INVALID_VALUE: u32 = 1;

/// Prefetches every allocation of its upstream to the device, on the allocation's stream.
///
/// ```
/// use rmm_core::{Device, ManagedResource, MemoryResource, PrefetchAdaptor};
/// let device = Device::simulated(1 << 30);
/// // Managed memory prefetched to the device on the allocating stream.
/// let prefetched = PrefetchAdaptor::new(ManagedResource::new(&device));
/// let stream = device.new_stream()?;
/// let ptr = prefetched.allocate(1 << 20, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { prefetched.deallocate(ptr, 1 << 20, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PrefetchAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
}

impl<U: MemoryResource> PrefetchAdaptor<U> {
    /// Prefetches what `upstream` hands out.
    pub fn new(upstream: U) -> Self {
        PrefetchAdaptor { upstream }
    }

    /// The resource the allocations come from.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U: MemoryResource> MemoryResource for PrefetchAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let ptr = self.upstream.allocate(bytes, stream)?;
        if bytes == 0 {
            return Ok(ptr);
        }
        match self.upstream.device().prefetch(ptr, bytes, stream) {
            Ok(()) => Ok(ptr),
            Err(rmm_cuda::CudaError::Driver { code, .. }) if code == CUDA_ERROR_INVALID_VALUE => {
                Ok(ptr)
            }
            Err(e) => {
                // SAFETY: just allocated on this stream and not handed out.
                let _ = unsafe { self.upstream.deallocate(ptr, bytes, stream) };
                Err(e.into())
            }
        }
    }

    pass_through!(deallocate, device, kind, name = "prefetch", identity);
}
