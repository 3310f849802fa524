//! The GPU that scpipe's functions run on: the calling thread's current device (as rmm_core's
//! Python side sets it), its resource from rmm_core's registry, so that `rmm_core.reinitialize(...)` or
//! `rmm_core.mr.set_current_device_resource(...)` decides where every step allocates, and one
//! stream. The run (its kernel modules, library handles and staging buffers) is kept between
//! calls and made again when the device or its resource changes.

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use rmm_core::{Device, SharedResource};
use sc_pipeline::run::GpuRun;
use std::sync::Arc;

struct Held {
    device: Device,
    resource: SharedResource,
    run: Arc<GpuRun>,
}

static HELD: Mutex<Option<Held>> = Mutex::new(None);

/// The run for the current device and its current resource.
pub(crate) fn current() -> PyResult<Arc<GpuRun>> {
    if !rmm_cuda::gpu_available() {
        return Err(PyRuntimeError::new_err(
            "scpipe.settings.device is 'gpu' but no CUDA GPU is available (use 'cpu' or 'auto')",
        ));
    }
    // The device rmm_core's Python calls take as current (its `set_current_device`, else
    // CUDA's current one, as CuPy and PyTorch set it): the one whose resource
    // `rmm_core.mr.set_current_device_resource` sets.
    let device = crate::device::current_device()?;
    if device.is_simulated() {
        return Err(PyRuntimeError::new_err(
            "the current device is a simulated one (rmm_core.set_current_device); scpipe's GPU \
             steps need a CUDA device: rmm_core.set_current_device(None) or an ordinal",
        ));
    }
    let resource = rmm_core::get_per_device_resource(&device);
    let mut held = HELD.lock();
    if let Some(h) = held.as_ref() {
        if h.device == device && Arc::ptr_eq(&h.resource, &resource) {
            return Ok(h.run.clone());
        }
    }
    let stream = device
        .new_stream()
        .map_err(|e| PyRuntimeError::new_err(format!("creating a stream for scpipe: {e}")))?;
    let run = GpuRun::new(&device, &stream, resource.clone()).map_err(super::errors::to_py)?;
    let run = Arc::new(run);
    *held = Some(Held {
        device,
        resource,
        run: run.clone(),
    });
    Ok(run)
}
