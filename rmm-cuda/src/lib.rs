//! `rmm-cuda`: the only crate of the workspace that calls the CUDA driver (through `cudarc`, loaded
//! at run time, so nothing CUDA is needed to build).
//!
//! It offers devices, streams, events, raw allocation calls (device, managed, pinned host, CUDA
//! stream-ordered pools), copies and memsets, and memory information. Every call is checked and
//! errors carry the driver's error name. "No CUDA driver" and "no GPU" are typed errors returned
//! before anything that would panic.
//!
//! Beside the real backend, [`Device::simulated`] gives a device backed by host memory, with
//! streams and events that execute synchronously and record what was asked of them. Every layer
//! above (memory resources, containers) runs unchanged on it, so CI tests the logic without a GPU.

mod device;
mod driver;
mod error;
mod event;
mod mem_pool;
mod nccl;
mod sim;
mod stream;
mod vector_state;
mod virtual_memory;

pub use device::{Device, DeviceGuard, DeviceId, MemAdvice, MemoryInfo};
pub use driver::{
    current_context_ordinal, device_count, driver_available, gpu_available, require_gpu_from_env,
    GpuPresence,
};
pub use error::{CudaError, Result};
pub use event::Event;
pub use mem_pool::{MemPool, MemPoolOptions};
pub use nccl::{NcclComm, NcclId};
pub use sim::{SimOp, SimWaitHook};
pub use stream::{Stream, StreamId};
pub use vector_state::clear_upper_vector_state;
pub use virtual_memory::VirtualRange;

/// Every pointer handed out by the memory resources is aligned to this many bytes (as in RMM).
///
/// ```
/// assert_eq!(rmm_cuda::ALIGNMENT, 256);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub const ALIGNMENT: usize = 256;

/// The raw driver bindings, for code that launches kernels or calls libraries on our buffers.
pub use cudarc;
