//! PyTorch's pluggable-allocator entry points (`torch.cuda.memory.CUDAPluggableAllocator(path,
//! "rmm_core_torch_alloc", "rmm_core_torch_free")`), exported from this same library so that
//! PyTorch, CuPy and Numba share one resource per device. Each allocation remembers the
//! resource it came from, so a resource changed later still gets back only its own memory.
//!
//! The symbols are not named `alloc` and `free`: a library exporting `free` would offer a
//! second `free` to every other library that looks one up in the process.

use crate::device::foreign_target;
use once_cell::sync::Lazy;
use parking_lot::Mutex;
use pyo3::prelude::*;
use rmm_core::{MemoryResource, SharedResource};
use rmm_cuda::Stream;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};

extern "C-unwind" {
    /// csrc/torch_allocator.cpp: throws the C++ exception PyTorch raises as
    /// torch.OutOfMemoryError.
    fn rmm_core_throw_alloc_failure(message: *const c_char) -> !;
}

extern "C" {
    fn rmm_core_set_torch_oom_type(type_object: *mut pyo3::ffi::PyObject);
}

/// Live allocations made for PyTorch: address to the resource that made it.
static LIVE: Lazy<Mutex<HashMap<u64, SharedResource>>> = Lazy::new(Default::default);

/// The class PyTorch's allocator failures raise, kept alive here.
static OOM_TYPE: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

fn allocate(size: usize, device: c_int, stream: *mut c_void) -> Result<u64, String> {
    let ordinal = usize::try_from(device).map_err(|_| format!("invalid device {device}"))?;
    // SAFETY: PyTorch passes its current stream of this device, alive while it uses the memory.
    let (stream, resource) =
        unsafe { foreign_target(ordinal, stream) }.map_err(|e| e.to_string())?;
    let ptr = resource.allocate(size, &stream).map_err(|e| {
        format!(
            "CUDA out of memory. rmm_core's {} could not allocate {size} bytes on GPU {ordinal}: {e}",
            resource.name()
        )
    })?;
    if ptr != 0 {
        LIVE.lock().insert(ptr, resource);
    }
    Ok(ptr)
}

/// PyTorch's `alloc`: `size` bytes on `device` for `stream`. Failure throws the C++ exception
/// PyTorch expects (it has no null check), raised in Python as torch.OutOfMemoryError.
///
/// # Safety
/// Called by PyTorch with its current stream of `device`.
#[no_mangle]
pub unsafe extern "C-unwind" fn rmm_core_torch_alloc(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    let outcome = std::panic::catch_unwind(|| allocate(size, device, stream))
        .unwrap_or_else(|_| Err("rmm_core: allocation failed (a panic)".to_string()));
    match outcome {
        Ok(ptr) => ptr as *mut c_void,
        Err(message) => {
            let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
            // SAFETY: a valid C string; the function copies it before throwing.
            unsafe { rmm_core_throw_alloc_failure(message.as_ptr()) }
        }
    }
}

/// PyTorch's `free`: gives `ptr` back to the resource it came from, ordered after `stream`.
///
/// # Safety
/// Called by PyTorch with what `rmm_core_torch_alloc` returned, its size, device and stream.
#[no_mangle]
pub unsafe extern "C" fn rmm_core_torch_free(
    ptr: *mut c_void,
    size: usize,
    _device: c_int,
    stream: *mut c_void,
) {
    if ptr.is_null() {
        return;
    }
    let freed = std::panic::catch_unwind(|| -> Result<(), String> {
        let resource = LIVE
            .lock()
            .remove(&(ptr as u64))
            .ok_or_else(|| format!("{ptr:p} was not allocated by rmm_core_torch_alloc"))?;
        // SAFETY: the stream PyTorch allocated the memory on, still alive.
        let stream =
            unsafe { Stream::borrowed(resource.device(), stream) }.map_err(|e| e.to_string())?;
        // SAFETY: allocated by this resource with this size (PyTorch passes it back).
        unsafe { resource.deallocate(ptr as u64, size, &stream) }.map_err(|e| e.to_string())
    });
    match freed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("rmm_core: PyTorch's free of {size} bytes at {ptr:p} failed: {e}"),
        Err(_) => eprintln!("rmm_core: PyTorch's free of {size} bytes at {ptr:p} panicked"),
    }
}

/// Tells the C++ side which Python class PyTorch should raise when an allocation fails
/// (torch.OutOfMemoryError).
#[pyfunction]
pub(crate) fn _set_torch_oom_type(oom_type: Bound<'_, PyAny>) {
    let ptr = oom_type.as_ptr();
    *OOM_TYPE.lock() = Some(oom_type.unbind());
    // SAFETY: the class is kept alive by OOM_TYPE for as long as the pointer is used.
    unsafe { rmm_core_set_torch_oom_type(ptr) };
}

/// Number of PyTorch allocations alive (for tests and leak checks).
#[pyfunction]
pub(crate) fn _torch_live_allocations() -> usize {
    LIVE.lock().len()
}
