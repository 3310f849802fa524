//! scpipe's errors as Python exceptions: out of GPU memory is `MemoryError` (with the
//! allocator's message), something the AnnData lacks `KeyError`, bad data or parameters
//! `ValueError`, a failure of the GPU or of a file `RuntimeError`.

use pyo3::exceptions::{PyKeyError, PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use sc_pipeline::Error;

pub(crate) fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    match error {
        Error::OutOfMemory { step, oom } => PyMemoryError::new_err(format!(
            "{step}: out of GPU memory: {oom} (a larger pool, rmm_core.reinitialize(\
             managed_memory=True), or a smaller input)"
        )),
        Error::Missing { .. } => PyKeyError::new_err(message),
        Error::InvalidData { .. } | Error::InvalidParameter { .. } => {
            PyValueError::new_err(message)
        }
        _ => PyRuntimeError::new_err(message),
    }
}
