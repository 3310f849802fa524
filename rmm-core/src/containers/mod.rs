//! Containers of device memory from a memory resource.

mod cudarc_interop;
mod device_buffer;
mod device_scalar;
mod device_vec;
mod pinned_host_vec;

pub use device_buffer::DeviceBuffer;
pub use device_scalar::DeviceScalar;
pub use device_vec::DeviceVec;
pub use pinned_host_vec::PinnedHostVec;
