//! `rmm-core`: composable, stream-ordered GPU memory resources (the ideas of the RAPIDS Memory
//! Manager), their adaptors, and containers of device memory.
//!
//! ```no_run
//! use rmm_core::{DeviceVec, get_per_device_resource};
//! let device = rmm_cuda::Device::cuda(0)?;
//! let stream = device.new_stream()?;
//! let v = DeviceVec::from_host(&[1.0f32, 2.0, 3.0], &stream)?;
//! assert_eq!(v.to_host()?, vec![1.0, 2.0, 3.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Resources, in three modules (each also re-exported here):
//! - [`resources`], the base ones: [`CudaResource`], [`ManagedResource`], [`AsyncResource`] with
//!   its own pool or as a view of the device's default pool, [`PinnedHostResource`],
//!   [`SystemResource`] where the device reads pageable memory, [`CallbackResource`] for C
//!   allocators, [`ExpandableResource`];
//! - [`suballocators`], which carve blocks out of memory taken from an upstream: [`PoolResource`],
//!   [`FixedSizeResource`], [`BinningResource`], [`ArenaResource`];
//! - [`adaptors`], which wrap an upstream: [`LimitingAdaptor`], [`StatisticsAdaptor`],
//!   [`TrackingAdaptor`], [`LoggingAdaptor`], [`FailureCallbackAdaptor`], [`AlignedAdaptor`],
//!   [`PrefetchAdaptor`], [`TimelineAdaptor`].
//!
//! Each sub-allocator and adaptor wraps its upstream by value, so a stack of them is one type
//! without dynamic dispatch, or `Arc<dyn MemoryResource>` ([`SharedResource`]) where it is
//! shared:
//!
//! ```
//! use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource, StatisticsAdaptor};
//! let device = Device::simulated(1 << 30);
//! let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(64 << 20, None))?;
//! let stats = StatisticsAdaptor::new(pool);
//! let stream = device.new_stream()?;
//! let ptr = stats.allocate(1000, &stream)?;
//! assert_eq!(stats.bytes_counter().value, 1000);
//! // SAFETY: allocated just above with this size.
//! unsafe { stats.deallocate(ptr, 1000, &stream)? };
//! assert_eq!(stats.upstream().free_bytes(), 64 << 20);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod adaptors;
mod containers;
mod error;
mod identity;
mod registry;
mod reinitialize;
mod resource;
pub mod resources;
pub mod suballocators;
pub mod testing;
mod thread_index;

pub use adaptors::{
    AlignedAdaptor, FailureCallbackAdaptor, LimitingAdaptor, LoggingAdaptor, PrefetchAdaptor,
    StatisticsAdaptor, TimelineAdaptor, TrackingAdaptor,
};
pub use containers::{DeviceBuffer, DeviceScalar, DeviceVec, PinnedHostVec};
pub use error::{human_bytes, MemoryError, OutOfMemory, Result};
pub use identity::ResourceIdentity;
pub use registry::{
    current_device, get_current_device_resource, get_per_device_resource, set_current_device,
    set_current_device_resource, set_per_device_resource,
};
pub use reinitialize::{device_log_path, reinitialize, ReinitializeOptions};
pub use resource::{
    align_up, aligned_size, check_stream, MemoryKind, MemoryResource, SharedResource,
};
pub use resources::{
    AllocateCallback, AsyncResource, AsyncResourceOptions, CallbackResource, CudaResource,
    DeallocateCallback, ExpandableResource, ManagedResource, PinnedHostResource, SystemResource,
    EXPANDABLE_UNIT,
};
pub use rmm_cuda::{Device, Stream, ALIGNMENT};
pub use suballocators::{
    ArenaOptions, ArenaResource, BinningResource, FixedSizeResource, PoolOptions, PoolResource,
    DEFAULT_BIN_BLOCKS,
};
