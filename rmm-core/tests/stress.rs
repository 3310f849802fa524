//! Many threads at once on the simulated device: each of 8 threads allocates on its own stream and
//! hands its blocks to the next thread, which frees them on *its* stream. No two live blocks may
//! overlap, and every byte must come back. (The same scenarios run on the GPU in
//! `tests/tests/gpu_suballocators.rs`.)

use rmm_core::testing::stress;
use rmm_core::Device;

fn sim() -> Device {
    Device::simulated(8 << 30)
}

#[test]
fn pool_under_eight_threads() {
    stress::pool_under_eight_threads(&sim()).unwrap();
}

#[test]
fn arena_under_eight_threads() {
    stress::arena_under_eight_threads(&sim()).unwrap();
}

#[test]
fn fixed_size_under_eight_threads() {
    stress::fixed_size_under_eight_threads(&sim()).unwrap();
}

#[test]
fn binning_under_eight_threads() {
    stress::binning_under_eight_threads(&sim()).unwrap();
}
