//! The conformance suite against every sub-allocator and adaptor on the real GPU (skips without
//! one). Pools start at 256 MiB so the 1 GiB sweep exercises growth from cudaMalloc.

use integration_tests::gpu_or_skip;
use rmm_core::testing::conformance::ConformanceConfig;
use rmm_core::*;
use std::sync::Arc;

fn cuda(device: &Device) -> SharedResource {
    Arc::new(CudaResource::new(device))
}

fn pool(device: &Device) -> SharedResource {
    Arc::new(PoolResource::new(cuda(device), PoolOptions::sized(256 << 20, None)).unwrap())
}

fn gpu(test: &str) -> Option<Device> {
    gpu_or_skip(test)
}

rmm_core::conformance_tests!(
    pool_on_gpu,
    gpu("gpu pool").map(|d| (pool(&d), ConformanceConfig::default()))
);
rmm_core::conformance_tests!(
    pool_with_maximum_on_gpu,
    gpu("gpu pool with maximum").map(|d| {
        let r = PoolResource::new(cuda(&d), PoolOptions::sized(0, Some(1536 << 20))).unwrap();
        (Arc::new(r) as SharedResource, ConformanceConfig::default())
    })
);
rmm_core::conformance_tests!(
    fixed_size_on_gpu,
    gpu("gpu fixed-size").map(|d| {
        let cfg = ConformanceConfig {
            max_size: 1 << 20,
            random_max_size: 1 << 20,
            random_max_live: 64 << 20,
            ..Default::default()
        };
        (
            Arc::new(FixedSizeResource::new(cuda(&d), 1 << 20, 16).unwrap()) as SharedResource,
            cfg,
        )
    })
);
rmm_core::conformance_tests!(
    binning_on_gpu,
    gpu("gpu binning").map(|d| (
        Arc::new(BinningResource::with_range(pool(&d), 18, 22).unwrap()) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    arena_on_gpu,
    gpu("gpu arena").map(|d| {
        let options = ArenaOptions {
            arena_size: Some(4 << 30),
            ..Default::default()
        };
        (
            Arc::new(ArenaResource::new(cuda(&d), options).unwrap()) as SharedResource,
            ConformanceConfig::default(),
        )
    })
);
rmm_core::conformance_tests!(
    limiting_on_gpu,
    gpu("gpu limiting").map(|d| (
        Arc::new(LimitingAdaptor::new(pool(&d), 4 << 30)) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    statistics_on_gpu,
    gpu("gpu statistics").map(|d| (
        Arc::new(StatisticsAdaptor::new(pool(&d))) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    tracking_on_gpu,
    gpu("gpu tracking").map(|d| (
        Arc::new(TrackingAdaptor::new(pool(&d), true)) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    logging_on_gpu,
    gpu("gpu logging").map(|d| (
        Arc::new(LoggingAdaptor::with_writer(pool(&d), std::io::sink()).unwrap()) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    failure_callback_on_gpu,
    gpu("gpu failure callback").map(|d| (
        Arc::new(FailureCallbackAdaptor::new(pool(&d), |_, _| false)) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    aligned_on_gpu,
    gpu("gpu aligned").map(|d| (
        Arc::new(AlignedAdaptor::new(pool(&d), 4096, 0).unwrap()) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    prefetch_over_managed_pool_on_gpu,
    gpu("gpu prefetch over managed pool").map(|d| {
        // Managed memory: sizes far below the free memory, no huge request (see gpu_resources.rs).
        let managed: SharedResource = Arc::new(ManagedResource::new(&d));
        let pool =
            PoolResource::new(managed, PoolOptions::sized(256 << 20, Some(4 << 30))).unwrap();
        (
            Arc::new(PrefetchAdaptor::new(pool)) as SharedResource,
            ConformanceConfig {
                huge_request: None,
                ..Default::default()
            },
        )
    })
);

#[test]
fn pool_cross_stream_reuse_on_gpu_keeps_data_ordered() {
    // A block freed on stream A after a large memset is reused by stream B: B must see the memset
    // finished before its own writes (the pool orders B after A with an event, not a host sync).
    let Some(d) = gpu("gpu pool cross-stream reuse") else {
        return;
    };
    let r = PoolResource::new(cuda(&d), PoolOptions::sized(512 << 20, None)).unwrap();
    let (a, b) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let bytes = 256 << 20;
    let p = r.allocate(bytes, &a).unwrap();
    unsafe {
        a.memset(p, 1, bytes).unwrap();
        r.deallocate(p, bytes, &a).unwrap();
    }
    let q = r.allocate(bytes, &b).unwrap();
    unsafe { b.memset(q, 2, 4096).unwrap() };
    let mut head = vec![0u8; 4096];
    unsafe { b.copy_to_host(&mut head, q).unwrap() };
    assert!(
        head.iter().all(|&x| x == 2),
        "stream B's write was overtaken by stream A's memset"
    );
    unsafe { r.deallocate(q, bytes, &b).unwrap() };
    b.synchronize().unwrap();
    // Everything is free again: release gives every chunk back to cudaMalloc.
    let released = r.release().unwrap();
    assert!(released >= 512 << 20, "released {released} bytes");
    assert_eq!(r.pool_size(), 0);
}
