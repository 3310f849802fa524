//! The GPU side of the kernels: what every step's GPU twin shares.
//!
//! - [`GpuContext`]: the device, the stream and the memory resource a step runs with (the
//!   caller picks them; a kernel never chooses a resource itself), plus the compiled modules and
//!   the cuBLAS / cuSOLVER handles of that stream, and counters of the bytes moved.
//! - [`module_cache`]: CUDA C compiled once per process by NVRTC, and once per machine through
//!   a disk cache keyed by source, GPU architecture and NVRTC version.
//! - [`DeviceCsr`] / [`DeviceDense`]: matrices whose storage is `rmm-core` [`DeviceVec`]s.
//! - [`scan`]: exclusive prefix sums, the building block of every compaction.
//!
//! Every device allocation of a step comes from the context's resource, on its stream.

pub mod compact;
mod context;
mod matrix;
pub mod module_cache;
pub mod reduce;
pub mod scan;
pub mod staging;

pub use context::{blocks_for_rows, grid_for, GpuContext, Transfers};
pub use matrix::{DeviceCsr, DeviceDense};
pub use rmm_core::DeviceVec;

/// Threads per block of the row- and element-wise kernels.
pub const BLOCK: u32 = 256;

/// Common device helpers, prepended to every module's source.
pub(crate) const COMMON: &str = include_str!("common.cuh");

/// Every kernel module, in the order the pipeline first uses them.
pub fn all_modules() -> Vec<module_cache::KernelSource> {
    vec![
        reduce::SRC,
        crate::qc::gpu::SRC,
        scan::SRC,
        compact::SRC,
        crate::normalize::gpu::SRC,
        crate::log1p::gpu::SRC,
        crate::hvg::gpu::SRC,
        crate::scale::gpu::SRC,
        crate::pca::gpu::SRC,
    ]
}

/// Loads (or compiles) every module and creates the cuBLAS and cuSOLVER handles on a background
/// thread, so a pipeline that starts by reading a file finds them ready: library start-up
/// (hundreds of milliseconds for cuSOLVER) overlaps the read instead of the first step.
pub fn warm_up_in_background(ctx: &std::sync::Arc<GpuContext>) -> std::thread::JoinHandle<crate::Result<()>> {
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        ctx.device()
            .bind()
            .map_err(|e| crate::KernelError::Gpu(format!("binding the device: {e}")))?;
        for m in all_modules() {
            ctx.load_module(m)?;
        }
        ctx.blas()?;
        ctx.solver()?;
        Ok(())
    })
}
