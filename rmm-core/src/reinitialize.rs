//! `reinitialize`: the one-call setup users know from RMM's Python API.

use crate::adaptors::LoggingAdaptor;
use crate::error::Result;
use crate::registry::{current_device, set_per_device_resource};
use crate::resource::SharedResource;
use crate::resources::{CudaResource, ManagedResource};
use crate::suballocators::{PoolOptions, PoolResource};
use rmm_cuda::{Device, DeviceId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Options of [`reinitialize`], with RMM's meanings.
///
/// ```
/// use rmm_core::ReinitializeOptions;
/// let options = ReinitializeOptions {
///     pool_allocator: true,
///     initial_pool_size: Some(256 << 20),
///     maximum_pool_size: Some(1 << 30),
///     ..Default::default()
/// };
/// assert!(!options.managed_memory);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ReinitializeOptions {
    /// Put a pool sub-allocator in front of the base resource (fast; keeps memory reserved).
    pub pool_allocator: bool,
    /// Use managed memory as the base resource (lets data exceed the GPU's memory).
    pub managed_memory: bool,
    /// Initial pool size in bytes (default: half of the free device memory). Ignored without
    /// `pool_allocator`, as in RMM.
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
/// resource. Returns the new resources, in device order. Every resource is built before any is
/// installed, so a failure (e.g. a pool larger than a device) changes nothing.
///
/// As the rapids-singlecell guide says, choose the pool when the data fits in GPU memory and
/// managed memory when it does not; asking for both works (a pool over managed memory) but prints
/// a warning.
///
/// ```
/// use rmm_core::{reinitialize, Device, MemoryResource, ReinitializeOptions};
/// let device = Device::simulated(1 << 30);
/// // rmm.reinitialize(pool_allocator=True, initial_pool_size=..., devices=[...])
/// let set = reinitialize(ReinitializeOptions {
///     pool_allocator: true,
///     initial_pool_size: Some(64 << 20),
///     devices: vec![device.clone()],
///     ..Default::default()
/// })?;
/// assert!(set[0].name().starts_with("pool"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn reinitialize(options: ReinitializeOptions) -> Result<Vec<SharedResource>> {
    if options.pool_allocator && options.managed_memory {
        eprintln!(
            "rmm-core warning: pool_allocator and managed_memory together: pooling assumes the data stays in \
             GPU memory, managed memory assumes it spills; combining them can increase fragmentation. \
             Choose one unless you know you need both."
        );
    }
    let devices = if options.devices.is_empty() {
        vec![current_device()?]
    } else {
        options.devices.clone()
    };
    let mut built = Vec::with_capacity(devices.len());
    for device in &devices {
        built.push(build(&options, device, devices.len() > 1)?);
    }
    for (device, resource) in devices.iter().zip(&built) {
        set_per_device_resource(device, resource.clone())?;
    }
    Ok(built)
}

/// The resource of one device: base (cuda or managed), then the pool, then the logging adaptor.
fn build(options: &ReinitializeOptions, device: &Device, several: bool) -> Result<SharedResource> {
    let mut resource: SharedResource = if options.managed_memory {
        Arc::new(ManagedResource::new(device))
    } else {
        Arc::new(CudaResource::new(device))
    };
    if options.pool_allocator {
        resource = Arc::new(PoolResource::new(
            resource,
            PoolOptions {
                initial_pool_size: options.initial_pool_size,
                maximum_pool_size: options.maximum_pool_size,
                ..Default::default()
            },
        )?);
    }
    if options.logging {
        let path = log_path(options.log_file_name.as_deref(), device, several);
        resource = Arc::new(LoggingAdaptor::new(resource, path)?);
    }
    Ok(resource)
}

/// `device`'s log file when each device logs to a file of its own: `log_file_name` with
/// `.dev<N>` (`.sim<N>` for a simulated device) before its extension, as RMM names them
/// (`rmm.csv` on device 0: `rmm.dev0.csv`).
///
/// ```
/// use rmm_core::{device_log_path, Device};
/// let device = Device::simulated(1 << 20);
/// let path = device_log_path("logs/rmm.csv".as_ref(), &device);
/// assert!(path.to_str().unwrap().starts_with("logs/rmm.sim"));
/// assert!(path.to_str().unwrap().ends_with(".csv"));
/// ```
pub fn device_log_path(log_file_name: &Path, device: &Device) -> PathBuf {
    log_path(Some(log_file_name), device, true)
}

/// `rmm_log.<device>.csv` by default; with several devices, a given name gets `.<device>` before
/// its extension (as RMM appends `.dev<N>`), so the devices do not overwrite each other's log.
fn log_path(given: Option<&Path>, device: &Device, several: bool) -> PathBuf {
    let tag = match device.id() {
        DeviceId::Cuda(n) => format!("dev{n}"),
        DeviceId::Simulated(n) => format!("sim{n}"),
    };
    match given {
        None => PathBuf::from(format!("rmm_log.{tag}.csv")),
        Some(p) if !several => p.to_path_buf(),
        Some(p) => {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = match p.extension() {
                Some(ext) => format!("{stem}.{tag}.{}", ext.to_string_lossy()),
                None => format!("{stem}.{tag}"),
            };
            p.with_file_name(name)
        }
    }
}
