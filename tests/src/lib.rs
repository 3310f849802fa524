//! Helpers shared by the workspace integration tests.

use rmm_cuda::{Device, GpuPresence};

/// The GPU for a test: `Some(device 0)` when there is one; `None` (after printing a visible
/// SKIPPED line) when there is none; a panic (the test fails) when `REQUIRE_GPU=1` and there is
/// none.
pub fn gpu_or_skip(test: &str) -> Option<Device> {
    match rmm_cuda::require_gpu_from_env(test) {
        Ok(GpuPresence::Present) => Some(
            Device::cuda(0)
                .unwrap_or_else(|e| panic!("{test}: a GPU is present but device 0 failed: {e}")),
        ),
        Ok(GpuPresence::Skip) => None,
        Err(message) => panic!("{message}"),
    }
}
