//! Byte sizes as Python users write them (`2**30`, `"4GiB"`, `"512 MB"`): every size argument of
//! the resources takes what `rmm_core.parse_bytes` takes, as `reinitialize` does.

use pyo3::prelude::*;

/// A size in bytes from an int, a float or a string with a unit, read by
/// `rmm_core._units.parse_bytes` (one parser for the whole package; its errors are its own:
/// `ValueError` for a negative size or an unknown unit, `TypeError` for other types).
pub(crate) struct Bytes(pub usize);

impl FromPyObject<'_, '_> for Bytes {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        let parse = obj.py().import("rmm_core._units")?.getattr("parse_bytes")?;
        Ok(Bytes(parse.call1((obj.to_owned(),))?.extract()?))
    }
}

/// `Option<Bytes>` as the `Option<usize>` rmm-core's options take.
pub(crate) fn bytes(size: Option<Bytes>) -> Option<usize> {
    size.map(|b| b.0)
}
