//! `DeviceBuffer`: untyped device memory owned by a Python object, as in RMM's Python API, and
//! the owner behind the CuPy and Numba allocators.

use crate::device::{device_of, stream_of, PyDevice};
use crate::errors::OrPy;
use crate::resources::PyResource;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PySlice};
use rmm_core::{DeviceBuffer, SharedResource};

/// Device memory of `size` bytes from `mr` (default: the device's current resource), for use on
/// `stream` (default: the device's default stream), freed when the object goes.
#[pyclass(name = "DeviceBuffer", module = "rmm_core")]
pub struct PyDeviceBuffer {
    pub(crate) inner: DeviceBuffer,
}

/// `mr`'s resource, or the current one of `device`; both given must agree.
fn resource_of(
    mr: Option<&Bound<'_, PyResource>>,
    device: Option<&Bound<'_, PyAny>>,
) -> PyResult<SharedResource> {
    match mr {
        Some(mr) => {
            let resource = mr.get().inner.clone();
            if device.is_some_and(|d| !d.is_none()) && &device_of(device)? != resource.device() {
                return Err(PyValueError::new_err(format!(
                    "mr belongs to {}, not to the device given",
                    resource.device().id()
                )));
            }
            Ok(resource)
        }
        None => Ok(rmm_core::get_per_device_resource(&device_of(device)?)),
    }
}

/// The bytes of a bytes-like object (bytes, bytearray, memoryview, a NumPy array: anything with
/// the buffer protocol), C-ordered.
fn host_bytes<'py>(data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(bytes.clone());
    }
    let memoryview = data.py().import("builtins")?.getattr("memoryview")?;
    Ok(memoryview
        .call1((data,))?
        .call_method0("tobytes")?
        .cast_into::<PyBytes>()?)
}

impl PyDeviceBuffer {
    /// Refuses a copy of `len` bytes that would not fit in the buffer.
    fn check_fits(&self, len: usize) -> PyResult<()> {
        let size = self.inner.size();
        if len > size {
            return Err(PyValueError::new_err(format!(
                "{len} bytes do not fit in a buffer of {size}"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl PyDeviceBuffer {
    /// `ptr`, when given, is device memory to copy the `size` bytes from.
    #[new]
    #[pyo3(signature = (*, ptr = None, size = 0, stream = None, mr = None, device = None))]
    fn new(
        py: Python<'_>,
        ptr: Option<u64>,
        size: usize,
        stream: Option<&Bound<'_, PyAny>>,
        mr: Option<&Bound<'_, PyResource>>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let resource = resource_of(mr, device)?;
        let stream = stream_of(stream, resource.device())?;
        // Without the GIL, as RMM allocates (see `DeviceMemoryResource.allocate`).
        let inner = py
            .detach(|| DeviceBuffer::with_resource(size, &stream, resource))
            .or_py()?;
        if let Some(src) = ptr.filter(|_| size > 0) {
            // SAFETY: the caller names `size` readable bytes at `src`, as in RMM.
            py.detach(|| unsafe { stream.copy_device(inner.ptr(), src, size) })
                .or_py()?;
        }
        Ok(PyDeviceBuffer { inner })
    }

    /// A new buffer holding a copy of `data` (any bytes-like object); returns once copied.
    #[staticmethod]
    #[pyo3(signature = (data, stream = None, mr = None, device = None))]
    fn to_device(
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
        mr: Option<&Bound<'_, PyResource>>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let bytes = host_bytes(data)?;
        let resource = resource_of(mr, device)?;
        let stream = stream_of(stream, resource.device())?;
        let bytes = bytes.as_bytes();
        let inner = py
            .detach(|| DeviceBuffer::from_host_with_resource(bytes, &stream, resource))
            .or_py()?;
        Ok(PyDeviceBuffer { inner })
    }

    /// The buffer's contents as bytes (waits for the buffer's stream).
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        PyBytes::new_with(py, self.inner.size(), |out| {
            self.inner.copy_to_host(out).or_py()
        })
    }

    /// The contents copied into the first `size` bytes of `ary` (any writable, contiguous buffer
    /// of at least `size` bytes), or into a new NumPy array of bytes (a bytearray without NumPy);
    /// returns it.
    #[pyo3(signature = (ary = None))]
    fn copy_to_host<'py>(
        &self,
        py: Python<'py>,
        ary: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data = self.tobytes(py)?;
        let target = match ary {
            Some(ary) => ary,
            None => match py.import("numpy") {
                Ok(np) => np.call_method1("empty", (self.inner.size(), "uint8"))?,
                Err(_) => return Ok(PyByteArray::new(py, data.as_bytes()).into_any()),
            },
        };
        let view = py
            .import("builtins")?
            .getattr("memoryview")?
            .call1((&target,))?
            .call_method1("cast", ("B",))?;
        let len = view.len()?;
        let size = self.inner.size();
        if len < size {
            return Err(PyValueError::new_err(format!(
                "ary holds {len} bytes, too few for the buffer's {size}"
            )));
        }
        view.set_item(PySlice::new(py, 0, size as isize, 1), data)?;
        Ok(target)
    }

    /// Pickling: the contents, copied back to a buffer on the current device when unpickled.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let to_device = py.get_type::<PyDeviceBuffer>().getattr("to_device")?;
        Ok((to_device, (self.tobytes(py)?,)))
    }

    /// Overwrites the first bytes of the buffer with `data` (any bytes-like object of at most
    /// `size` bytes); returns once copied.
    fn copy_from_host(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = host_bytes(data)?;
        let bytes = bytes.as_bytes();
        self.check_fits(bytes.len())?;
        let (dst, stream) = (self.inner.ptr(), self.inner.stream());
        // SAFETY: `dst .. dst + len` lies within this buffer (checked above).
        py.detach(|| unsafe { stream.copy_from_host(dst, bytes) })
            .or_py()
    }

    /// Overwrites the first bytes of the buffer with the device memory of `cuda_ary` (anything
    /// with a one-dimensional, contiguous `__cuda_array_interface__` of at most `size` bytes).
    fn copy_from_device(&mut self, py: Python<'_>, cuda_ary: &Bound<'_, PyAny>) -> PyResult<()> {
        let Ok(interface) = cuda_ary.getattr("__cuda_array_interface__") else {
            return Err(PyValueError::new_err(
                "copy_from_device needs an object with __cuda_array_interface__",
            ));
        };
        let shape: Vec<usize> = interface.get_item("shape")?.extract()?;
        // The array interface's typestr: byte order, kind, then the item's size in bytes.
        let typestr: String = interface.get_item("typestr")?.extract()?;
        let itemsize: usize = typestr
            .get(2..)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                PyValueError::new_err(format!("cannot read the item size of typestr {typestr:?}"))
            })?;
        let strides: Option<Vec<usize>> = interface
            .get_item("strides")
            .ok()
            .and_then(|s| s.extract().ok());
        if shape.len() != 1 || strides.is_some_and(|s| s != [itemsize]) {
            return Err(PyValueError::new_err(
                "copy_from_device takes one-dimensional, contiguous arrays only",
            ));
        }
        let bytes = shape[0] * itemsize;
        self.check_fits(bytes)?;
        let src: u64 = interface.get_item("data")?.get_item(0)?.extract()?;
        let (dst, stream) = (self.inner.ptr(), self.inner.stream());
        // The array's producer may be on any stream: the device's work is waited for first, and
        // the copy after it (RMM copies on the legacy default stream, which does the same).
        // SAFETY: the array names `bytes` readable device bytes at `src` (its interface says
        // so); `dst .. dst + bytes` lies within this buffer (checked above).
        py.detach(|| unsafe {
            stream.device().synchronize()?;
            stream.copy_device(dst, src, bytes)?;
            stream.synchronize()
        })
        .or_py()
    }

    /// A new buffer with a copy of the contents, from the same resource, on the same stream.
    fn copy(&self, py: Python<'_>) -> PyResult<Self> {
        let inner = py
            .detach(|| self.inner.try_clone_on(self.inner.stream()))
            .or_py()?;
        Ok(PyDeviceBuffer { inner })
    }

    fn __copy__(&self, py: Python<'_>) -> PyResult<Self> {
        self.copy(py)
    }

    /// Migrates the contents to `device` (default: the buffer's), ordered on `stream` (default:
    /// the buffer's), where the buffer is managed memory; does nothing otherwise, as in RMM.
    #[pyo3(signature = (device = None, stream = None))]
    fn prefetch(
        &self,
        device: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if self.inner.resource().kind() != rmm_core::MemoryKind::Managed {
            return Ok(());
        }
        let device = match device {
            Some(d) if !d.is_none() => device_of(Some(d))?,
            _ => self.inner.stream().device().clone(),
        };
        let stream = match stream {
            Some(s) if !s.is_none() => stream_of(Some(s), &device)?,
            _ => self.inner.stream().clone(),
        };
        device
            .prefetch(self.inner.ptr(), self.inner.size(), &stream)
            .or_py()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.tobytes(py)
    }

    fn __sizeof__(&self) -> usize {
        self.inner.size()
    }

    /// Changes the size, keeping the contents up to the smaller size.
    fn resize(&mut self, new_size: usize) -> PyResult<()> {
        self.inner.resize(new_size).or_py()
    }

    /// Makes room for `new_capacity` bytes without changing the size.
    fn reserve(&mut self, new_capacity: usize) -> PyResult<()> {
        self.inner.reserve(new_capacity).or_py()
    }

    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.size()
    }

    /// Bytes allocated (at least `size`), a method as in RMM.
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// The device address (0 when empty).
    #[getter]
    fn ptr(&self) -> u64 {
        self.inner.ptr()
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice {
            inner: self.inner.stream().device().clone(),
        }
    }

    fn __len__(&self) -> usize {
        self.inner.size()
    }

    /// The CUDA array interface (version 3): a one-dimensional array of bytes, so that CuPy,
    /// Numba and PyTorch can use the buffer without a copy.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("shape", (self.inner.size(),))?;
        d.set_item("strides", py.None())?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.inner.ptr(), false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<rmm_core.DeviceBuffer size={} ptr={:#x} from {}>",
            self.inner.size(),
            self.inner.ptr(),
            self.inner.resource().name()
        )
    }
}
