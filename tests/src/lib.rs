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

/// A kernel context on a fresh stream of `d` over a pool of 256 MiB (grown as needed).
pub fn pool_context(d: &Device) -> sc_kernels::gpu::GpuContext {
    use rmm_core::{CudaResource, PoolOptions, PoolResource, SharedResource};
    let r: SharedResource = std::sync::Arc::new(
        PoolResource::new(CudaResource::new(d), PoolOptions::sized(1 << 28, None)).unwrap(),
    );
    sc_kernels::gpu::GpuContext::new(d, &d.new_stream().unwrap(), r).unwrap()
}

/// Random counts, `rows x cols`: value `(i, j)` is stored with probability `density(i, j)`,
/// small integers with a few large ones.
pub fn random_counts(
    seed: u64,
    rows: usize,
    cols: usize,
    density: impl Fn(usize, usize) -> f64,
) -> sc_kernels::CsrMatrix<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (vec![], vec![]);
    for i in 0..rows {
        for j in 0..cols {
            if rng.random::<f64>() < density(i, j) {
                indices.push(j as u32);
                let v = if rng.random::<f64>() < 0.05 {
                    rng.random_range(20..3000)
                } else {
                    rng.random_range(1..6)
                };
                data.push(v as f32);
            }
        }
        indptr.push(data.len() as u64);
    }
    sc_kernels::CsrMatrix::new(rows, cols, indptr, indices, data).unwrap()
}
