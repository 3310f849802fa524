//! The sub-allocators on the real GPU (skipped, saying so, without one; `REQUIRE_GPU=1` makes the
//! absence a failure): the conformance suite, and cross-stream reuse whose ordering the device
//! must honour.

use rmm_core::testing::conformance::ConformanceConfig;
use rmm_core::{
    ArenaOptions, ArenaResource, BinningResource, CudaResource, Device, FixedSizeResource,
    MemoryResource, PoolOptions, PoolResource, SharedResource, StatisticsAdaptor,
};
use rmm_cuda::GpuPresence;
use std::sync::Arc;

const MIB: usize = 1 << 20;

fn gpu_or_skip(test: &str) -> Option<Device> {
    match rmm_cuda::require_gpu_from_env(test) {
        Ok(GpuPresence::Present) => Some(
            Device::cuda(0)
                .unwrap_or_else(|e| panic!("{test}: a GPU is present but device 0 failed: {e}")),
        ),
        Ok(GpuPresence::Skip) => None,
        Err(message) => panic!("{message}"),
    }
}

fn pool(device: &Device) -> PoolResource<CudaResource> {
    PoolResource::new(
        CudaResource::new(device),
        PoolOptions::sized(256 * MIB, None),
    )
    .unwrap()
}

rmm_core::conformance_tests!(
    pool_on_gpu,
    gpu_or_skip("gpu pool").map(|d| (
        Arc::new(pool(&d)) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    arena_on_gpu,
    gpu_or_skip("gpu arena").map(|d| (
        Arc::new(
            ArenaResource::new(
                CudaResource::new(&d),
                ArenaOptions {
                    arena_size: Some(2 << 30),
                    ..Default::default()
                }
            )
            .unwrap()
        ) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    fixed_size_on_gpu,
    gpu_or_skip("gpu fixed-size").map(|d| (
        Arc::new(FixedSizeResource::new(CudaResource::new(&d), MIB, 64).unwrap()) as SharedResource,
        ConformanceConfig {
            max_size: MIB,
            random_max_size: MIB,
            random_max_live: 64 * MIB,
            ..ConformanceConfig::default()
        }
    ))
);

rmm_core::conformance_tests!(
    binning_on_gpu,
    gpu_or_skip("gpu binning").map(|d| (
        Arc::new(BinningResource::with_range(Arc::new(pool(&d)), 18, 22).unwrap())
            as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    statistics_over_pool_on_gpu,
    gpu_or_skip("gpu statistics over pool").map(|d| (
        Arc::new(StatisticsAdaptor::new(pool(&d))) as SharedResource,
        ConformanceConfig::default()
    ))
);

/// Stream A writes a block and frees it; stream B gets the same memory and writes it after A's
/// work (the pool made B wait on an event): B's bytes must be what the host reads back.
#[test]
fn cross_stream_reuse_is_ordered_on_the_device() {
    let Some(device) = gpu_or_skip("gpu cross-stream reuse") else {
        return;
    };
    // One portion: B can only get memory A freed.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(MIB, Some(MIB)),
    )
    .unwrap();
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    for round in 0..20u8 {
        let p = pool.allocate(MIB, &a).unwrap();
        // SAFETY: `p` is a live block of MIB bytes; the memsets are queued on its streams.
        unsafe {
            a.memset(p, round, MIB).unwrap();
            pool.deallocate(p, MIB, &a).unwrap();
        }
        let q = pool.allocate(MIB, &b).unwrap();
        assert_eq!(p, q, "B reuses A's block");
        let mut host = vec![0u8; MIB];
        // SAFETY: as above.
        unsafe {
            b.memset(q, round.wrapping_add(100), MIB).unwrap();
            b.copy_to_host(&mut host, q).unwrap();
            pool.deallocate(q, MIB, &b).unwrap();
        }
        assert!(
            host.iter().all(|&x| x == round.wrapping_add(100)),
            "round {round}"
        );
        // Give the block back to A's side for the next round.
        let r = pool.allocate(MIB, &a).unwrap();
        unsafe { pool.deallocate(r, MIB, &a) }.unwrap();
    }
}
