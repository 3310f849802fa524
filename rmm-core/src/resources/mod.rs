//! Resources that take memory straight from the driver.

mod async_pool;
mod callback;
mod cuda;
mod expandable;
mod managed;
mod pinned_host;
mod system;

pub use async_pool::{AsyncResource, AsyncResourceOptions};
pub use callback::{AllocateCallback, CallbackResource, DeallocateCallback};
pub use cuda::CudaResource;
pub use expandable::{ExpandableResource, EXPANDABLE_UNIT};
pub use managed::ManagedResource;
pub use pinned_host::PinnedHostResource;
pub use system::SystemResource;

use crate::error::{MemoryError, OutOfMemory};
use rmm_cuda::{CudaError, Device};

/// Turns a driver error from an allocation call into ours: out-of-memory becomes an
/// [`OutOfMemory`] that says how much was asked and how much the device has free.
pub(crate) fn driver_alloc_error(
    resource: &str,
    device: &Device,
    bytes: usize,
    err: CudaError,
) -> MemoryError {
    if err.is_out_of_memory() {
        let mut oom = OutOfMemory::new(resource, bytes).detail(err.to_string());
        if let Ok(info) = device.memory_info() {
            oom = oom.free(info.free).maximum(info.total);
        }
        MemoryError::OutOfMemory(oom)
    } else {
        MemoryError::Cuda(err)
    }
}
