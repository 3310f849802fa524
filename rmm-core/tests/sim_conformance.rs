//! The conformance suite against every base resource on a simulated device (runs in CI).

use rmm_core::testing::conformance::ConformanceConfig;
use rmm_core::*;
use std::sync::Arc;

/// A simulated GPU of 8 GiB: host memory, reserved lazily, so the 1 GiB sweep costs nothing.
fn sim() -> Device {
    Device::simulated(8 << 30)
}

rmm_core::conformance_tests!(
    cuda_on_sim,
    Some((
        Arc::new(CudaResource::new(&sim())) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    managed_on_sim,
    Some((
        Arc::new(ManagedResource::new(&sim())) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    managed_prefetch_on_sim,
    Some((
        Arc::new(ManagedResource::with_prefetch(&sim())) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    pinned_on_sim,
    Some((
        Arc::new(PinnedHostResource::new(&sim())) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    async_on_sim,
    Some((
        Arc::new(
            AsyncResource::new(
                &sim(),
                AsyncResourceOptions {
                    initial_pool_size: Some(64 << 20),
                    ..Default::default()
                }
            )
            .unwrap()
        ) as SharedResource,
        ConformanceConfig::default()
    ))
);
