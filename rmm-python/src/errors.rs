//! rmm-core's errors as Python exceptions: out of memory is `MemoryError` (as in RMM), a bad
//! argument or a bad free `ValueError`, anything from the driver `RuntimeError`.

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use rmm_core::MemoryError;
use rmm_cuda::CudaError;

pub(crate) fn to_py(error: MemoryError) -> PyErr {
    let message = error.to_string();
    match error {
        MemoryError::OutOfMemory(_) => PyMemoryError::new_err(message),
        MemoryError::Cuda(e) if e.is_out_of_memory() => PyMemoryError::new_err(message),
        MemoryError::InvalidArgument(_)
        | MemoryError::InvalidDeallocation(_)
        | MemoryError::Cuda(CudaError::InvalidArgument { .. }) => PyValueError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// `?` for rmm-core's and rmm-cuda's results in functions that return `PyResult`.
pub(crate) trait OrPy<T> {
    fn or_py(self) -> pyo3::PyResult<T>;
}

impl<T> OrPy<T> for Result<T, MemoryError> {
    fn or_py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

impl<T> OrPy<T> for Result<T, CudaError> {
    fn or_py(self) -> pyo3::PyResult<T> {
        self.map_err(|e| to_py(MemoryError::from(e)))
    }
}
