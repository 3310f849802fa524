//! `reinitialize`: the one-call setup users know from RMM's Python API.

use crate::error::{MemoryError, Result};
use crate::registry::{current_device, set_per_device_resource};
use crate::resource::SharedResource;
use crate::resources::{CudaResource, ManagedResource};
use rmm_cuda::Device;
use std::path::PathBuf;
use std::sync::Arc;

/// Options of [`reinitialize`], with RMM's meanings.
#[derive(Debug, Clone, Default)]
pub struct ReinitializeOptions {
    /// Put a pool sub-allocator in front of the base resource (fast; keeps memory reserved).
    pub pool_allocator: bool,
    /// Use managed memory as the base resource (lets data exceed the GPU's memory).
    pub managed_memory: bool,
    /// Initial pool size in bytes (default: half of the free device memory).
    pub initial_pool_size: Option<usize>,
    /// Maximum pool size in bytes (default: no maximum).
    pub maximum_pool_size: Option<usize>,
    /// Devices to set up; empty means the current device.
    pub devices: Vec<Device>,
    /// Log every allocation and free to a CSV file.
    pub logging: bool,
    /// The log file (default `rmm_log.<device>.csv`).
    pub log_file_name: Option<PathBuf>,
}

/// Builds the resource described by `options` for each device and makes it that device's
/// resource. Returns the new resources, in device order.
///
/// As the rapids-singlecell guide says, choose the pool when the data fits in GPU memory and
/// managed memory when it does not; asking for both works but prints a warning.
pub fn reinitialize(options: ReinitializeOptions) -> Result<Vec<SharedResource>> {
    if options.pool_allocator && options.managed_memory {
        eprintln!(
            "rmm-core warning: pool_allocator and managed_memory together: pooling assumes the data stays in \
             GPU memory, managed memory assumes it spills; combining them can increase fragmentation. \
             Choose one unless you know you need both."
        );
    }
    if options.pool_allocator {
        return Err(MemoryError::NotAvailable(
            "pool_allocator: the pool resource is not part of this build yet".into(),
        ));
    }
    if options.logging {
        return Err(MemoryError::NotAvailable(
            "logging: the logging adaptor is not part of this build yet".into(),
        ));
    }
    let devices = if options.devices.is_empty() {
        vec![current_device()?]
    } else {
        options.devices.clone()
    };
    let mut built = Vec::with_capacity(devices.len());
    for device in &devices {
        let base: SharedResource = if options.managed_memory {
            Arc::new(ManagedResource::new(device))
        } else {
            Arc::new(CudaResource::new(device))
        };
        set_per_device_resource(device, base.clone())?;
        built.push(base);
    }
    Ok(built)
}
