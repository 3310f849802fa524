//! `rmm_core._lib`: the Python extension module of rmm-core (the package `rmm_core` in
//! `python/` wraps it). One file per concept: devices and streams, resources, the buffer,
//! PyTorch's entry points, scpipe's steps on an AnnData (`sc/`); `reinitialize` is here.

mod buffer;
mod cupy_hooks;
mod device;
mod errors;
mod resources;
mod sc;
mod torch_hooks;
mod units;

use device::device_of;
use errors::OrPy;
use pyo3::prelude::*;
use rmm_core::{MemoryResource, ReinitializeOptions};
use std::path::PathBuf;

/// RMM's `reinitialize`: builds each device's resource (plain device memory, managed memory, a
/// pool over either, with CSV logging) and makes it that device's resource. Nothing changes on
/// failure. `devices`: ordinals or Devices (empty: the current device). Returns the resources'
/// names.
#[pyfunction]
#[pyo3(signature = (pool_allocator, managed_memory, initial_pool_size, maximum_pool_size, devices, logging, log_file_name))]
#[allow(clippy::too_many_arguments)]
fn _reinitialize(
    py: Python<'_>,
    pool_allocator: bool,
    managed_memory: bool,
    initial_pool_size: Option<usize>,
    maximum_pool_size: Option<usize>,
    devices: Vec<Bound<'_, PyAny>>,
    logging: bool,
    log_file_name: Option<PathBuf>,
) -> PyResult<Vec<String>> {
    let devices = devices
        .iter()
        .map(|d| device_of(Some(d)))
        .collect::<PyResult<Vec<_>>>()?;
    let devices = if devices.is_empty() {
        vec![device::current_device()?]
    } else {
        devices
    };
    let options = ReinitializeOptions {
        pool_allocator,
        managed_memory,
        initial_pool_size,
        maximum_pool_size,
        devices,
        logging,
        log_file_name,
    };
    let built = py.detach(|| rmm_core::reinitialize(options)).or_py()?;
    Ok(built.iter().map(|r| r.name()).collect())
}

/// `device`'s own log file for `log_file_name` (`rmm.csv` on device 0: `rmm.dev0.csv`), as
/// `rmm_core.mr.enable_logging` names them.
#[pyfunction]
fn _device_log_path(log_file_name: PathBuf, device: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    Ok(rmm_core::device_log_path(
        &log_file_name,
        &device_of(Some(device))?,
    ))
}

#[pymodule]
fn _lib(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(_device_log_path, m)?)?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::PyStream>()?;
    m.add_function(wrap_pyfunction!(device::set_current_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::get_current_device, m)?)?;
    m.add_class::<buffer::PyDeviceBuffer>()?;
    m.add_class::<cupy_hooks::PyCupyAllocator>()?;
    m.add_class::<resources::PyResource>()?;
    m.add_class::<resources::PyCuda>()?;
    m.add_class::<resources::PyManaged>()?;
    m.add_class::<resources::PySystem>()?;
    m.add_class::<resources::PyAsync>()?;
    m.add_class::<resources::PyAsyncView>()?;
    m.add_class::<resources::PyPool>()?;
    m.add_class::<resources::PyExpandablePool>()?;
    m.add_class::<resources::PyArena>()?;
    m.add_class::<resources::PyBinning>()?;
    m.add_class::<resources::PyFixedSize>()?;
    m.add_class::<resources::PyLimiting>()?;
    m.add_class::<resources::PyStatistics>()?;
    m.add_class::<resources::PyTracking>()?;
    m.add_class::<resources::PyLogging>()?;
    m.add_class::<resources::PyFailureCallback>()?;
    m.add_class::<resources::PyCallback>()?;
    m.add_class::<resources::PyAligned>()?;
    m.add_class::<resources::PyPrefetch>()?;
    m.add_function(wrap_pyfunction!(resources::set_per_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(resources::get_per_device_resource, m)?)?;
    m.add_function(wrap_pyfunction!(_reinitialize, m)?)?;
    m.add_function(wrap_pyfunction!(torch_hooks::_set_torch_oom_type, m)?)?;
    m.add_function(wrap_pyfunction!(torch_hooks::_torch_live_allocations, m)?)?;
    m.add("gpu_available", rmm_cuda::gpu_available())?;
    sc::register(m)?;
    Ok(())
}
