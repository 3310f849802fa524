//! Is there a driver, is there a GPU: answered without touching anything that could panic.

use crate::error::{CudaError, Result};
use once_cell::sync::OnceCell;

static INIT: OnceCell<std::result::Result<usize, CudaError>> = OnceCell::new();

/// Loads libcuda (if present), initialises the driver and counts devices, once per process.
fn init() -> &'static std::result::Result<usize, CudaError> {
    INIT.get_or_init(|| {
        // cudarc panics on the first driver call when libcuda is missing: look first.
        // SAFETY: only tries to load the shared library.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        match cudarc::driver::result::init() {
            Ok(()) => {}
            // CUDA_ERROR_NO_DEVICE (100): a driver without a GPU.
            Err(e) if e.0 as u32 == 100 => return Ok(0),
            Err(e) => return Err(CudaError::driver("cuInit", e)),
        }
        cudarc::driver::result::device::get_count()
            .map(|n| n.max(0) as usize)
            .map_err(|e| CudaError::driver("cuDeviceGetCount", e))
    })
}

/// True when libcuda can be loaded and initialised.
///
/// ```
/// if !rmm_cuda::driver_available() {
///     println!("no NVIDIA driver: GPU work is skipped");
/// }
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub fn driver_available() -> bool {
    init().is_ok()
}

/// Number of CUDA devices; `Err(NoDriver)` when there is no driver at all.
///
/// ```
/// match rmm_cuda::device_count() {
///     Ok(n) => println!("{n} GPU(s)"),
///     Err(e) => println!("no GPU: {e}"), // a typed error, never a panic
/// }
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub fn device_count() -> Result<usize> {
    init().clone()
}

/// True when at least one GPU is usable.
///
/// ```
/// let device = if rmm_cuda::gpu_available() {
///     rmm_cuda::Device::cuda(0)?
/// } else {
///     rmm_cuda::Device::simulated(1 << 30)
/// };
/// # let _ = device;
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub fn gpu_available() -> bool {
    matches!(init(), Ok(n) if *n > 0)
}

/// What a GPU test should do on this machine.
///
/// ```
/// use rmm_cuda::{require_gpu_from_env, GpuPresence};
/// match require_gpu_from_env("my gpu test") {
///     Ok(GpuPresence::Present) => { /* run it */ }
///     Ok(GpuPresence::Skip) => println!("skipped: no GPU"),
///     Err(why) => panic!("{why}"), // REQUIRE_GPU=1 and no GPU: the test fails
/// }
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPresence {
    /// A GPU is present: run.
    Present,
    /// No GPU and none required: skip, saying so.
    Skip,
}

/// Decides whether a GPU test runs: with a GPU it runs; without one it is skipped with a visible
/// message, unless `REQUIRE_GPU=1` is set, in which case the absence is an error (the test fails).
///
/// ```
/// if let Ok(rmm_cuda::GpuPresence::Skip) = rmm_cuda::require_gpu_from_env("example") {
///     return Ok(());
/// }
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub fn require_gpu_from_env(test: &str) -> std::result::Result<GpuPresence, String> {
    if gpu_available() {
        return Ok(GpuPresence::Present);
    }
    let why = match device_count() {
        Err(e) => e.to_string(),
        Ok(_) => CudaError::NoDevice.to_string(),
    };
    if std::env::var("REQUIRE_GPU")
        .map(|v| v == "1")
        .unwrap_or(false)
    {
        Err(format!("{test}: REQUIRE_GPU=1 but {why}"))
    } else {
        // Written to the process's stderr directly: the test harness captures `eprintln!`.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED (no GPU): {test}: {why}");
        Ok(GpuPresence::Skip)
    }
}

/// The ordinal of the device whose context is current on the calling thread: what CUDA's runtime
/// calls the current device (PyTorch, CuPy and Numba set it with `cudaSetDevice`). `None` when no
/// context is current, or there is no driver or no GPU.
///
/// ```
/// // Without a GPU (or before any CUDA call on this thread) no context is current.
/// if !rmm_cuda::gpu_available() {
///     assert_eq!(rmm_cuda::current_context_ordinal()?, None);
/// }
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub fn current_context_ordinal() -> Result<Option<usize>> {
    if !matches!(init(), Ok(n) if *n > 0) {
        return Ok(None);
    }
    let current = cudarc::driver::result::ctx::get_current()
        .map_err(|e| CudaError::driver("cuCtxGetCurrent", e))?;
    if current.is_none() {
        return Ok(None);
    }
    let mut device: cudarc::driver::sys::CUdevice = 0;
    // SAFETY: a context is current on this thread; `device` is a valid out-pointer.
    unsafe { cudarc::driver::sys::cuCtxGetDevice(&mut device) }
        .result()
        .map_err(|e| CudaError::driver("cuCtxGetDevice", e))?;
    Ok(Some(device.max(0) as usize))
}
