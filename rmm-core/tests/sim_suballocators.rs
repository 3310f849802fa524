//! The conformance suite against every sub-allocator and adaptor on a simulated device (runs in
//! CI). Pools start small so the sweep to 1 GiB exercises growth.

use rmm_core::testing::conformance::ConformanceConfig;
use rmm_core::*;
use std::sync::Arc;

/// A simulated GPU of 8 GiB: host memory, reserved lazily.
fn sim() -> Device {
    Device::simulated(8 << 30)
}

fn cuda(device: &Device) -> SharedResource {
    Arc::new(CudaResource::new(device))
}

rmm_core::conformance_tests!(
    pool_on_sim,
    Some((
        Arc::new(PoolResource::new(cuda(&sim()), PoolOptions::sized(64 << 20, None)).unwrap())
            as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    pool_with_maximum_on_sim,
    Some((
        Arc::new(
            PoolResource::new(
                CudaResource::new(&sim()),
                PoolOptions::sized(0, Some(1536 << 20))
            )
            .unwrap()
        ) as SharedResource,
        ConformanceConfig::default()
    ))
);
