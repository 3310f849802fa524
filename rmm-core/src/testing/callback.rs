//! A [`CallbackResource`] whose C callbacks forward to another
//! resource (what a C allocator plugged in through it would do), for the conformance suite. The
//! target must not depend on the stream (e.g. `CudaResource`): the callbacks use the device's
//! default stream whatever C handle they get.

use crate::{CallbackResource, MemoryResource, SharedResource, Stream};
use std::ffi::c_void;

/// What the callbacks' opaque argument points at.
struct Target {
    resource: SharedResource,
    stream: Stream,
}

unsafe extern "C" fn alloc(bytes: usize, _stream: *mut c_void, arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the leaked target of `forwarding_to`.
    let t = unsafe { &*(arg as *const Target) };
    match t.resource.allocate(bytes, &t.stream) {
        Ok(p) => p as *mut c_void,
        Err(_) => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn free(ptr: *mut c_void, bytes: usize, _stream: *mut c_void, arg: *mut c_void) {
    // SAFETY: as above; `ptr` came from `alloc`.
    let t = unsafe { &*(arg as *const Target) };
    let _ = unsafe { t.resource.deallocate(ptr as u64, bytes, &t.stream) };
}

/// The callback resource over `resource` (the target is leaked: it lives as long as the
/// test process, as a C allocator's state would).
pub fn forwarding_to(resource: SharedResource) -> CallbackResource {
    let device = resource.device().clone();
    let target = Box::into_raw(Box::new(Target {
        resource,
        stream: device.default_stream(),
    })) as *mut c_void;
    // SAFETY: the callbacks forward to a thread-safe resource of `device`; the target is
    // never freed.
    unsafe { CallbackResource::new(&device, alloc, target, free, target) }
}
