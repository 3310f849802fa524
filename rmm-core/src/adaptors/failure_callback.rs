//! Failure callback (RMM's `failure_callback_resource_adaptor`): on out-of-memory, calls a
//! callback that may free memory (drop caches, spill, synchronise) and retries while it says so.

use crate::error::{MemoryError, OutOfMemory, Result};
use crate::resource::MemoryResource;
use rmm_cuda::Stream;
use std::fmt;

/// Calls `callback(bytes, &error)` when the upstream runs out of memory; `true` retries the
/// allocation, `false` returns the error. Other errors pass through untouched.
///
/// ```
/// use rmm_core::{Device, FailureCallbackAdaptor, LimitingAdaptor, CudaResource, MemoryResource};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// let device = Device::simulated(1 << 30);
/// let failures = AtomicUsize::new(0);
/// let limited = LimitingAdaptor::new(CudaResource::new(&device), 1 << 20);
/// // Called on out-of-memory; returning true would retry (after freeing something).
/// let guarded = FailureCallbackAdaptor::new(limited, |_bytes, _oom| {
///     failures.fetch_add(1, Ordering::Relaxed);
///     false
/// });
/// let stream = device.new_stream()?;
/// assert!(guarded.allocate(2 << 20, &stream).is_err());
/// assert_eq!(failures.load(Ordering::Relaxed), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FailureCallbackAdaptor<U, F>
where
    U: MemoryResource,
    F: Fn(usize, &OutOfMemory) -> bool + Send + Sync,
{
    upstream: U,
    callback: F,
}

impl<U, F> FailureCallbackAdaptor<U, F>
where
    U: MemoryResource,
    F: Fn(usize, &OutOfMemory) -> bool + Send + Sync,
{
    /// Calls `callback` when `upstream` runs out of memory.
    pub fn new(upstream: U, callback: F) -> Self {
        FailureCallbackAdaptor { upstream, callback }
    }

    /// The resource the allocations come from.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U, F> fmt::Debug for FailureCallbackAdaptor<U, F>
where
    U: MemoryResource,
    F: Fn(usize, &OutOfMemory) -> bool + Send + Sync,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureCallbackAdaptor")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl<U, F> MemoryResource for FailureCallbackAdaptor<U, F>
where
    U: MemoryResource,
    F: Fn(usize, &OutOfMemory) -> bool + Send + Sync,
{
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        loop {
            match self.upstream.allocate(bytes, stream) {
                Err(MemoryError::OutOfMemory(oom)) => {
                    if !(self.callback)(bytes, &oom) {
                        return Err(MemoryError::OutOfMemory(oom));
                    }
                }
                other => return other,
            }
        }
    }

    pass_through!(
        deallocate,
        device,
        kind,
        name = "failure_callback",
        identity
    );
}
