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
///
/// ```
/// use rmm_core::{current_device, set_current_device, Device};
/// let device = Device::simulated(1 << 30);
/// let previous = set_current_device(&device)?;
/// assert_eq!(current_device()?, device);
/// # let _ = previous;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn current_device() -> Result<Device> {
    if let Some(dev) = CURRENT_DEVICE.with(|c| c.borrow().clone()) {
        return Ok(dev);
    }
    Ok(Device::cuda(0)?)
}

/// Makes `device` the calling thread's current device (and binds its context); returns the
/// previous one, if any was set.
///
/// ```
/// use rmm_core::{get_current_device_resource, set_current_device, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// set_current_device(&device)?;
/// assert_eq!(get_current_device_resource()?.device(), &device);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_current_device(device: &Device) -> Result<Option<Device>> {
    device.bind()?;
    Ok(CURRENT_DEVICE.with(|c| c.replace(Some(device.clone()))))
}

/// The resource of `device` (a [`CudaResource`] until one is set).
///
/// ```
/// use rmm_core::{get_per_device_resource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// // Until one is set, a device's resource is plain device memory (RMM's default).
/// assert_eq!(get_per_device_resource(&device).name(), "cuda");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
///
/// ```
/// use rmm_core::*;
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 30);
/// let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(16 << 20, None))?;
/// set_per_device_resource(&device, Arc::new(pool))?;
/// let stream = device.new_stream()?;
/// let v = DeviceVec::<f32>::zeros(1000, &stream)?; // from the pool
/// assert!(v.buffer().resource().name().starts_with("pool"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
///
/// ```
/// use rmm_core::{get_current_device_resource, set_current_device, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// set_current_device(&device)?;
/// let resource = get_current_device_resource()?;
/// assert_eq!(resource.device(), &device);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn get_current_device_resource() -> Result<SharedResource> {
    Ok(get_per_device_resource(&current_device()?))
}

/// Sets the resource of the current device, returning the previous one.
///
/// ```
/// use rmm_core::*;
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 30);
/// set_current_device(&device)?;
/// let stats = Arc::new(StatisticsAdaptor::new(CudaResource::new(&device)));
/// set_current_device_resource(stats.clone())?;
/// let stream = device.new_stream()?;
/// let _v = DeviceVec::<u8>::new(100, &stream)?;
/// assert_eq!(stats.statistics().allocations.value, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn set_current_device_resource(resource: SharedResource) -> Result<SharedResource> {
    set_per_device_resource(&current_device()?, resource)
}
