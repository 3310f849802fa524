//! Errors of the CUDA layer.

use cudarc::driver::DriverError;

/// The driver's code for an out-of-memory failure (`CUDA_ERROR_OUT_OF_MEMORY`).
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

/// A failure of the CUDA layer.
///
/// ```
/// // A device that does not exist is an error naming the problem, with or without a GPU.
/// let e = rmm_cuda::Device::cuda(10_000).unwrap_err();
/// println!("{e}");
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// libcuda could not be loaded: this machine has no NVIDIA driver.
    #[error("no CUDA driver on this machine (libcuda could not be loaded)")]
    NoDriver,
    /// The driver is present but reports no device.
    #[error("no CUDA-capable GPU on this machine")]
    NoDevice,
    /// A device ordinal past the devices present.
    #[error("CUDA device {ordinal} does not exist: {count} device(s) present")]
    InvalidDevice { ordinal: usize, count: usize },
    /// A driver call failed; `name` is the driver's error name (e.g. `CUDA_ERROR_OUT_OF_MEMORY`).
    #[error("{call} failed: {name} ({description})")]
    Driver {
        call: &'static str,
        code: u32,
        name: String,
        description: String,
    },
    /// A CUDA library other than the driver (NCCL) failed or could not be loaded.
    #[error("{call} failed: {problem}")]
    Library { call: &'static str, problem: String },
    /// A call that makes no sense for its arguments (e.g. a copy longer than its host slice).
    #[error("invalid argument to {call}: {reason}")]
    InvalidArgument { call: &'static str, reason: String },
}

impl CudaError {
    /// Wraps a driver error with the call that produced it.
    pub fn driver(call: &'static str, err: DriverError) -> Self {
        let name = err
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUDA error {}", err.0 as u32));
        let description = err
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        CudaError::Driver {
            call,
            code: err.0 as u32,
            name,
            description,
        }
    }

    /// The error the simulated device returns when its capacity is exhausted; it looks like the
    /// driver's so that layers above treat both alike.
    pub(crate) fn simulated_out_of_memory(call: &'static str, bytes: usize, free: usize) -> Self {
        CudaError::Driver {
            call,
            code: CUDA_ERROR_OUT_OF_MEMORY,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            description: format!("simulated device: {bytes} bytes requested, {free} bytes free"),
        }
    }

    /// True when the driver (or the simulated device) ran out of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, CudaError::Driver { code, .. } if *code == CUDA_ERROR_OUT_OF_MEMORY)
    }

    pub(crate) fn invalid(call: &'static str, reason: impl Into<String>) -> Self {
        CudaError::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }
}

/// Result of the CUDA layer.
///
/// ```
/// fn free_bytes(device: &rmm_cuda::Device) -> rmm_cuda::Result<usize> {
///     Ok(device.memory_info()?.free)
/// }
/// assert_eq!(free_bytes(&rmm_cuda::Device::simulated(1 << 20))?, 1 << 20);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub type Result<T> = std::result::Result<T, CudaError>;

/// Turns a cudarc result into ours, naming the call.
pub(crate) trait Checked<T> {
    fn checked(self, call: &'static str) -> Result<T>;
}

impl<T> Checked<T> for std::result::Result<T, DriverError> {
    fn checked(self, call: &'static str) -> Result<T> {
        self.map_err(|e| CudaError::driver(call, e))
    }
}
