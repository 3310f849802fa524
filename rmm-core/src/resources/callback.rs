//! Allocation by C callbacks (RMM's `callback_memory_resource`): the plug-in point for an
//! allocator written in C, C++ or any language with a C ABI.

use crate::error::{MemoryError, OutOfMemory, Result};
use crate::resource::{check_stream, MemoryResource};
use rmm_cuda::{Device, Stream};
use std::ffi::c_void;

/// `void* allocate(size_t bytes, cudaStream_t stream, void* arg)`: the memory, or null when
/// none can be had.
///
/// ```
/// use std::ffi::c_void;
/// // The C signature: void* allocate(size_t bytes, cudaStream_t stream, void* arg).
/// extern "C" fn refuse(_bytes: usize, _stream: *mut c_void, _arg: *mut c_void) -> *mut c_void {
///     std::ptr::null_mut() // null: out of memory
/// }
/// let _callback: rmm_core::AllocateCallback = refuse;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type AllocateCallback =
    unsafe extern "C" fn(bytes: usize, stream: *mut c_void, arg: *mut c_void) -> *mut c_void;

/// `void deallocate(void* ptr, size_t bytes, cudaStream_t stream, void* arg)`.
///
/// ```
/// use std::ffi::c_void;
/// // The C signature: void deallocate(void* ptr, size_t bytes, cudaStream_t stream, void* arg).
/// extern "C" fn ignore(_ptr: *mut c_void, _bytes: usize, _stream: *mut c_void, _arg: *mut c_void) {}
/// let _callback: rmm_core::DeallocateCallback = ignore;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type DeallocateCallback =
    unsafe extern "C" fn(ptr: *mut c_void, bytes: usize, stream: *mut c_void, arg: *mut c_void);

/// Device memory from a pair of C callbacks, each with the opaque argument it was registered
/// with. The stream is passed as the raw `cudaStream_t` ([`Stream::as_raw`]).
///
/// ```
/// use rmm_core::testing::callback::forwarding_to;
/// use rmm_core::{CudaResource, Device, MemoryResource, SharedResource};
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 30);
/// // C callbacks that forward to another resource (any allocator with a C ABI plugs in the same way).
/// let callbacks = forwarding_to(Arc::new(CudaResource::new(&device)) as SharedResource);
/// let stream = device.new_stream()?;
/// let ptr = callbacks.allocate(256, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { callbacks.deallocate(ptr, 256, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct CallbackResource {
    device: Device,
    allocate: AllocateCallback,
    allocate_arg: *mut c_void,
    deallocate: DeallocateCallback,
    deallocate_arg: *mut c_void,
}

// SAFETY: the callbacks and their arguments are called from any thread; `new`'s contract says
// they must allow that.
unsafe impl Send for CallbackResource {}
unsafe impl Sync for CallbackResource {}

impl CallbackResource {
    /// A resource of `device` whose allocations are `allocate(bytes, stream, allocate_arg)` and
    /// whose frees are `deallocate(ptr, bytes, stream, deallocate_arg)`.
    ///
    /// # Safety
    /// The callbacks must behave as a memory resource of `device`: `allocate` returns null or
    /// `bytes` of device memory aligned to 256 bytes, usable in stream order on `stream`;
    /// `deallocate` takes back what `allocate` gave. Both may be called from any thread at
    /// once, and the arguments must stay valid as long as the resource lives.
    ///
    /// ```
    /// use rmm_core::{CallbackResource, CudaResource, Device, MemoryResource};
    /// use std::ffi::c_void;
    ///
    /// // A "C allocator" that takes its memory from a CudaResource passed as the argument.
    /// unsafe extern "C" fn alloc(bytes: usize, _stream: *mut c_void, arg: *mut c_void) -> *mut c_void {
    ///     let r = unsafe { &*(arg as *const CudaResource) };
    ///     let device = r.device().clone();
    ///     r.allocate(bytes, &device.default_stream()).map_or(std::ptr::null_mut(), |p| p as *mut c_void)
    /// }
    /// unsafe extern "C" fn free(ptr: *mut c_void, bytes: usize, _stream: *mut c_void, arg: *mut c_void) {
    ///     let r = unsafe { &*(arg as *const CudaResource) };
    ///     let device = r.device().clone();
    ///     let _ = unsafe { r.deallocate(ptr as u64, bytes, &device.default_stream()) };
    /// }
    ///
    /// let device = Device::simulated(1 << 30);
    /// let target = Box::leak(Box::new(CudaResource::new(&device))) as *mut CudaResource as *mut c_void;
    /// // SAFETY: the callbacks forward to a thread-safe resource of `device` that is never freed.
    /// let r = unsafe { CallbackResource::new(&device, alloc, target, free, target) };
    /// let stream = device.default_stream();
    /// let ptr = r.allocate(4096, &stream)?;
    /// unsafe { r.deallocate(ptr, 4096, &stream)? };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn new(
        device: &Device,
        allocate: AllocateCallback,
        allocate_arg: *mut c_void,
        deallocate: DeallocateCallback,
        deallocate_arg: *mut c_void,
    ) -> Self {
        CallbackResource {
            device: device.clone(),
            allocate,
            allocate_arg,
            deallocate,
            deallocate_arg,
        }
    }
}

impl MemoryResource for CallbackResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        if bytes == 0 {
            return Ok(0);
        }
        // SAFETY: `new`'s contract.
        let ptr = unsafe { (self.allocate)(bytes, stream.as_raw(), self.allocate_arg) };
        if ptr.is_null() {
            return Err(MemoryError::OutOfMemory(
                OutOfMemory::new("callback", bytes).detail("the allocate callback returned null"),
            ));
        }
        Ok(ptr as u64)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        if ptr == 0 {
            return Ok(());
        }
        // SAFETY: `new`'s contract; the caller's (ptr came from `allocate`).
        unsafe {
            (self.deallocate)(
                ptr as *mut c_void,
                bytes,
                stream.as_raw(),
                self.deallocate_arg,
            )
        };
        Ok(())
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn name(&self) -> String {
        "callback".into()
    }
}
