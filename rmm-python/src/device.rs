//! Devices and streams as Python sees them: a device is an ordinal (or a `Device`, which can also
//! be simulated, for tests without a GPU); a stream is anything that names a `cudaStream_t`
//! (an int, CuPy's `.ptr`, PyTorch's `.cuda_stream`, the `__cuda_stream__` protocol) or our own
//! `Stream`.

use crate::errors::OrPy;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use rmm_core::SharedResource;
use rmm_cuda::{CudaError, Device, Stream};
use std::cell::RefCell;

thread_local! {
    /// The device `set_current_device` chose on this thread, overriding CUDA's current one.
    static CHOSEN: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// A CUDA device, or a simulated one (host memory, for tests without a GPU).
#[pyclass(frozen, eq, hash, name = "Device", module = "rmm_core")]
#[derive(Clone, PartialEq, Eq)]
pub struct PyDevice {
    pub(crate) inner: Device,
}

impl std::hash::Hash for PyDevice {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.id().hash(state)
    }
}

#[pymethods]
impl PyDevice {
    /// CUDA device `ordinal`; an error (not a crash) without a driver or such a device.
    #[new]
    #[pyo3(signature = (ordinal = 0))]
    fn new(ordinal: usize) -> PyResult<Self> {
        Ok(PyDevice {
            inner: Device::cuda(ordinal).or_py()?,
        })
    }

    /// A simulated device of `capacity` bytes: the resources work on it as on a GPU, with host
    /// memory behind the addresses.
    #[staticmethod]
    fn simulated(capacity: usize) -> Self {
        PyDevice {
            inner: Device::simulated(capacity),
        }
    }

    /// The CUDA ordinal (None for a simulated device).
    #[getter]
    fn ordinal(&self) -> Option<usize> {
        match self.inner.id() {
            rmm_cuda::DeviceId::Cuda(n) => Some(n),
            rmm_cuda::DeviceId::Simulated(_) => None,
        }
    }

    #[getter]
    fn is_simulated(&self) -> bool {
        self.inner.is_simulated()
    }

    fn name(&self) -> PyResult<String> {
        self.inner.name().or_py()
    }

    /// `(free, total)` bytes of device memory.
    fn memory_info(&self) -> PyResult<(usize, usize)> {
        let info = self.inner.memory_info().or_py()?;
        Ok((info.free, info.total))
    }

    /// Waits for all work on the device.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.synchronize()).or_py()
    }

    fn __repr__(&self) -> String {
        format!("rmm_core.Device({})", self.inner.id())
    }
}

/// A CUDA stream created by rmm-core (destroyed when its last reference goes).
#[pyclass(frozen, name = "Stream", module = "rmm_core")]
pub struct PyStream {
    pub(crate) inner: Stream,
}

#[pymethods]
impl PyStream {
    /// A new stream on `device` (default: the current device).
    #[new]
    #[pyo3(signature = (device = None))]
    fn new(device: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyStream {
            inner: device_of(device)?.new_stream().or_py()?,
        })
    }

    /// The raw `cudaStream_t`, for other libraries.
    #[getter]
    fn ptr(&self) -> usize {
        self.inner.as_raw() as usize
    }

    /// The CUDA stream protocol: `(version, handle)`.
    fn __cuda_stream__(&self) -> (u32, usize) {
        (0, self.ptr())
    }

    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.synchronize()).or_py()
    }

    fn __repr__(&self) -> String {
        format!("rmm_core.Stream({:#x})", self.ptr())
    }
}

/// Makes `device` (an ordinal or a `Device`) the current device of the calling thread, for
/// rmm_core's calls that name none (and scpipe's GPU steps). Without it, or after
/// `set_current_device(None)`, the current device is CUDA's current one (as PyTorch, CuPy and
/// Numba set it), else device 0.
#[pyfunction]
pub(crate) fn set_current_device(device: &Bound<'_, PyAny>) -> PyResult<()> {
    if device.is_none() {
        CHOSEN.with(|c| *c.borrow_mut() = None);
        return Ok(());
    }
    let device = device_of(Some(device))?;
    device.bind().or_py()?;
    CHOSEN.with(|c| *c.borrow_mut() = Some(device));
    Ok(())
}

/// The calling thread's current device (see `set_current_device`).
#[pyfunction]
pub(crate) fn get_current_device() -> PyResult<PyDevice> {
    Ok(PyDevice {
        inner: current_device()?,
    })
}

pub(crate) fn current_device() -> PyResult<Device> {
    if let Some(device) = CHOSEN.with(|c| c.borrow().clone()) {
        return Ok(device);
    }
    let ordinal = rmm_cuda::current_context_ordinal().or_py()?.unwrap_or(0);
    Device::cuda(ordinal).or_py()
}

/// `None` (the current device), an ordinal, or a `Device`.
pub(crate) fn device_of(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return current_device();
    };
    if let Ok(device) = obj.extract::<PyRef<'_, PyDevice>>() {
        return Ok(device.inner.clone());
    }
    match obj.extract::<usize>() {
        Ok(ordinal) => Device::cuda(ordinal).or_py(),
        Err(_) => Err(PyTypeError::new_err(format!(
            "a device is an ordinal (int) or an rmm_core.Device, not {}",
            obj.get_type().name()?
        ))),
    }
}

/// The stream `obj` names, on `device`: `None` is the device's default stream.
pub(crate) fn stream_of(obj: Option<&Bound<'_, PyAny>>, device: &Device) -> PyResult<Stream> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(device.default_stream());
    };
    if let Ok(stream) = obj.extract::<PyRef<'_, PyStream>>() {
        if stream.inner.device() != device {
            return Err(PyValueError::new_err(format!(
                "{} belongs to {}, not {}",
                stream.__repr__(),
                stream.inner.device().id(),
                device.id()
            )));
        }
        return Ok(stream.inner.clone());
    }
    let raw = raw_stream_handle(obj)?;
    // SAFETY: the caller hands us a stream of its own that it keeps alive while it uses what it
    // allocates on it (as with RMM's streams from other libraries).
    unsafe { Stream::borrowed(device, raw as *mut std::ffi::c_void) }.or_py()
}

/// Another library's stream `raw` on CUDA device `ordinal`, and that device's current resource:
/// where an allocation made for CuPy or PyTorch comes from.
///
/// # Safety
/// `raw` must be a stream of the device's primary context, alive while the memory allocated on
/// it is used (the library passes its current stream).
pub(crate) unsafe fn foreign_target(
    ordinal: usize,
    raw: *mut std::ffi::c_void,
) -> Result<(Stream, SharedResource), CudaError> {
    let device = Device::cuda(ordinal)?;
    // SAFETY: as the caller promises.
    let stream = unsafe { Stream::borrowed(&device, raw) }?;
    Ok((stream, rmm_core::get_per_device_resource(&device)))
}

fn raw_stream_handle(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(raw) = obj.extract::<usize>() {
        return Ok(raw);
    }
    if obj.hasattr("__cuda_stream__")? {
        let (_, handle): (u32, usize) = obj.call_method0("__cuda_stream__")?.extract()?;
        return Ok(handle);
    }
    for attribute in ["cuda_stream", "ptr"] {
        if let Ok(value) = obj.getattr(attribute) {
            if let Ok(raw) = value.extract::<usize>() {
                return Ok(raw);
            }
        }
    }
    Err(PyTypeError::new_err(format!(
        "a stream is an int (cudaStream_t), an rmm_core.Stream, or an object with \
         __cuda_stream__, .cuda_stream or .ptr, not {}",
        obj.get_type().name()?
    )))
}
