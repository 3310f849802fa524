//! CuPy's allocator as one callable object in Rust: it runs for every CuPy array, so it does
//! its work without Python frames. CuPy's current stream is read through the C function CuPy's
//! own memory pool uses (`get_current_stream_ptr`, exported by Cython in the stream module's
//! `__pyx_capi__`); where a CuPy release does not export it with the expected signature, the
//! Python call `cupy.cuda.get_current_stream().ptr` is used instead.

use crate::buffer::PyDeviceBuffer;
use crate::device::foreign_target;
use crate::errors::OrPy;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use rmm_core::DeviceBuffer;
use std::ffi::c_void;

type StreamPtrFn = unsafe extern "C" fn() -> isize;

/// The C signature Cython gives the capsule of `cdef intptr_t get_current_stream_ptr()`.
const STREAM_PTR_SIGNATURE: &str = "intptr_t (void)";

enum CurrentStream {
    CFunction(StreamPtrFn),
    Python(Py<PyAny>),
}

/// `cupy.cuda.set_allocator(CupyAllocator())`: each allocation comes from the current rmm_core
/// resource of CuPy's current device, on CuPy's current stream, and goes back when CuPy drops it.
#[pyclass(frozen, name = "CupyAllocator", module = "rmm_core.allocators.cupy")]
pub struct PyCupyAllocator {
    unowned_memory: Py<PyAny>,
    memory_pointer: Py<PyAny>,
    current_stream: CurrentStream,
}

fn exported_stream_function(py: Python<'_>) -> Option<StreamPtrFn> {
    let capi = py
        .import("cupy.cuda.stream")
        .ok()?
        .getattr("__pyx_capi__")
        .ok()?;
    let capi = capi.cast_into::<PyDict>().ok()?;
    let capsule = capi.get_item("get_current_stream_ptr").ok()??;
    let capsule = capsule.cast_into::<PyCapsule>().ok()?;
    let name = capsule.name().ok()??;
    // SAFETY: the name is a NUL-terminated string owned by the capsule, alive while it is.
    let name = unsafe { name.as_cstr() };
    if name.to_str().ok()? != STREAM_PTR_SIGNATURE {
        return None;
    }
    let pointer = capsule.pointer_checked(Some(name)).ok()?;
    // SAFETY: Cython exports `intptr_t get_current_stream_ptr(void)` under exactly this name.
    Some(unsafe { std::mem::transmute::<*mut c_void, StreamPtrFn>(pointer.as_ptr()) })
}

impl PyCupyAllocator {
    fn stream(&self, py: Python<'_>) -> PyResult<usize> {
        match &self.current_stream {
            CurrentStream::CFunction(f) => {
                // SAFETY: CuPy's C function, called with the GIL held as CuPy calls it.
                let raw = unsafe { f() };
                if raw == -1 {
                    if let Some(error) = PyErr::take(py) {
                        return Err(error);
                    }
                }
                Ok(raw as usize)
            }
            CurrentStream::Python(get) => get.bind(py).call0()?.getattr("ptr")?.extract(),
        }
    }
}

#[pymethods]
impl PyCupyAllocator {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let memory = py.import("cupy.cuda.memory")?;
        let current_stream = match exported_stream_function(py) {
            Some(f) => CurrentStream::CFunction(f),
            None => CurrentStream::Python(
                py.import("cupy.cuda")?
                    .getattr("get_current_stream")?
                    .unbind(),
            ),
        };
        Ok(PyCupyAllocator {
            unowned_memory: memory.getattr("UnownedMemory")?.unbind(),
            memory_pointer: memory.getattr("MemoryPointer")?.unbind(),
            current_stream,
        })
    }

    /// True when CuPy's current stream is read through its C function (the fast path).
    #[getter]
    fn reads_stream_in_c(&self) -> bool {
        matches!(self.current_stream, CurrentStream::CFunction(_))
    }

    fn __call__(&self, py: Python<'_>, nbytes: usize) -> PyResult<Py<PyAny>> {
        // CuPy makes its device current (cudaSetDevice) before it allocates.
        let ordinal = rmm_cuda::current_context_ordinal().or_py()?.unwrap_or(0);
        let raw = self.stream(py)?;
        // SAFETY: CuPy's current stream of this device, alive while CuPy uses the memory.
        let (stream, resource) = unsafe { foreign_target(ordinal, raw as *mut c_void) }.or_py()?;
        let inner = DeviceBuffer::with_resource(nbytes, &stream, resource).or_py()?;
        let ptr = inner.ptr();
        let owner = Py::new(py, PyDeviceBuffer { inner })?;
        let memory = self
            .unowned_memory
            .bind(py)
            .call1((ptr, nbytes, owner, ordinal))?;
        Ok(self.memory_pointer.bind(py).call1((memory, 0))?.unbind())
    }
}
