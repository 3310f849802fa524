//! The GPU side of the kernels: what every step's GPU twin shares.
//!
//! - [`GpuContext`]: the device, the stream and the memory resource a step runs with (the
//!   caller picks them; a kernel never chooses a resource itself), plus the compiled modules and
//!   the cuBLAS / cuSOLVER handles of that stream, and counters of the bytes moved.
//! - [`module_cache`]: kernel modules loaded once per process: built into the binary
//!   ([`built_in`], compiled ahead of time by `build.rs`), else compiled by NVRTC once per
//!   machine through a disk cache keyed by source, GPU architecture and NVRTC version.
//! - [`DeviceCsr`] / [`DeviceDense`]: matrices whose storage is `rmm-core` [`DeviceVec`]s.
//! - [`fft`]: batched 2-D FFTs (cuFFT) with their work area from the context's resource.
//! - [`scan`]: exclusive prefix sums, the building block of every compaction.
//! - [`radix_sort`]: sorting `u64` keys (a step packs what it needs ordered into them).
//! - [`NcclCommunicator`]: the [`crate::comm::Communicator`] of ranks on several GPUs.
//! - [`pinned_buffers`]: page-locked buffers lent to threads that download at once (a chunked
//!   write's threads).
//! - [`streamed`]: host matrices streamed through the device in row blocks (the steps'
//!   `*_streamed` twins run in a fraction of the device memory the matrix needs).
//! - [`trace`]: the time of each phase of a step, when `SCPIPE_TRACE_PHASES` is set.
//!
//! Every device allocation of a step comes from the context's resource, on its stream.

pub mod bounds;
pub mod built_in;
pub mod compact;
mod context;
pub mod dense_reduce;
pub mod fft;
pub(crate) mod matrix;
pub mod module_cache;
mod nccl_communicator;
pub mod pinned_buffers;
pub mod radix_sort;
pub mod reduce;
pub mod scan;
pub mod staging;
pub mod streamed;
pub mod trace;

pub use context::{blocks_for_rows, grid_for, grid_stride, GpuContext, Transfers};
pub use matrix::{DeviceCsr, DeviceDense, StructureProblem};
pub use nccl_communicator::NcclCommunicator;
pub use rmm_core::DeviceVec;

/// Threads per block of the row- and element-wise kernels.
pub const BLOCK: u32 = 256;

/// Common device helpers, prepended to every module's source.
pub(crate) const COMMON: &str = include_str!("common.cuh");

/// `work(rank, gpu)` on a thread per GPU at once; the results in rank order, or the first error.
pub fn on_each_gpu<T: Send>(
    gpus: &[std::sync::Arc<GpuContext>],
    work: impl Fn(usize, &GpuContext) -> crate::Result<T> + Sync,
) -> crate::Result<Vec<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = gpus
            .iter()
            .enumerate()
            .map(|(r, ctx)| {
                let work = &work;
                s.spawn(move || work(r, ctx))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
