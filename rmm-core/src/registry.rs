//! The per-device resource registry and the calling thread's current device.
//!
//! Each device has one resource that containers use when none is given (RMM's
//! `get_current_device_resource`); until set, it is a [`CudaResource`] of that device.

use crate::error::{MemoryError, Result};
use crate::resource::SharedResource;
use crate::resources::CudaResource;
use once_cell::sync::Lazy;
use parking_lot::RwLock;
use rmm_cuda::{Device, DeviceId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

static RESOURCES: Lazy<RwLock<HashMap<DeviceId, SharedResource>>> =
    Lazy::new(|| RwLock::new(HashMap::new()));

thread_local! {
    static CURRENT_DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The calling thread's current device: the one set by [`set_current_device`], else CUDA device 0.
pub fn current_device() -> Result<Device> {
    if let Some(dev) = CURRENT_DEVICE.with(|c| c.borrow().clone()) {
        return Ok(dev);
    }
    Ok(Device::cuda(0)?)
}

/// Makes `device` the calling thread's current device (and binds its context); returns the
/// previous one, if any was set.
pub fn set_current_device(device: &Device) -> Result<Option<Device>> {
    device.bind()?;
    Ok(CURRENT_DEVICE.with(|c| c.replace(Some(device.clone()))))
}

/// The resource of `device` (a [`CudaResource`] until one is set).
pub fn get_per_device_resource(device: &Device) -> SharedResource {
    if let Some(r) = RESOURCES.read().get(&device.id()) {
        return r.clone();
    }
    RESOURCES
        .write()
        .entry(device.id())
        .or_insert_with(|| Arc::new(CudaResource::new(device)))
        .clone()
}

/// Sets the resource of `device`, returning the previous one. The resource must belong to
/// `device`. As in RMM, set it before allocating: memory already handed out keeps its resource.
pub fn set_per_device_resource(
    device: &Device,
    resource: SharedResource,
) -> Result<SharedResource> {
    if resource.device() != device {
        return Err(MemoryError::InvalidArgument(format!(
            "resource {} belongs to {}, not {}",
            resource.name(),
            resource.device().id(),
            device.id()
        )));
    }
    let previous = RESOURCES.write().insert(device.id(), resource);
    Ok(previous.unwrap_or_else(|| Arc::new(CudaResource::new(device))))
}

/// The resource of the current device.
pub fn get_current_device_resource() -> Result<SharedResource> {
    Ok(get_per_device_resource(&current_device()?))
}

/// Sets the resource of the current device, returning the previous one.
pub fn set_current_device_resource(resource: SharedResource) -> Result<SharedResource> {
    set_per_device_resource(&current_device()?, resource)
}
