//! scpipe's steps for Python (the `scpipe` package in `python/scpipe`): the parts of an AnnData
//! a step reads come in as the pipeline's model ([`model_in`]), the step runs through the same
//! functions as `scpipe run` ([`call`]), and the model goes back ([`model_out`]). It lives in
//! rmm_core's extension module, so the steps allocate from the resources rmm_core sets ([`gpu`]):
//! one registry per process.

mod call;
mod device_parts;
mod errors;
mod gpu;
mod model_in;
mod model_out;

use pyo3::prelude::*;

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(call::_sc_call, m)?)?;
    m.add_function(wrap_pyfunction!(device_parts::_sc_to_device, m)?)
}
