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

/// Stream A writes a block and frees it; stream B gets the same memory and writes it after A's
/// work (the pool made B wait on an event): B's bytes must be what the host reads back.
#[test]
fn cross_stream_reuse_is_ordered_on_the_device() {
    let Some(d) = gpu("gpu cross-stream reuse") else {
        return;
    };
    const MIB: usize = 1 << 20;
    // One portion: B can only get memory A freed.
    let pool =
        PoolResource::new(CudaResource::new(&d), PoolOptions::sized(MIB, Some(MIB))).unwrap();
    let (a, b) = (d.new_stream().unwrap(), d.new_stream().unwrap());
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

#[test]
fn release_returns_every_chunk_to_the_driver() {
    let Some(d) = gpu("gpu pool release") else {
        return;
    };
    let r = PoolResource::new(cuda(&d), PoolOptions::sized(512 << 20, None)).unwrap();
    let s = d.new_stream().unwrap();
    let blocks: Vec<u64> = (0..8).map(|_| r.allocate(100 << 20, &s).unwrap()).collect();
    assert!(
        r.pool_size() >= 800 << 20,
        "the pool grew past its initial size"
    );
    for p in blocks {
        unsafe { r.deallocate(p, 100 << 20, &s).unwrap() };
    }
    let size = r.pool_size();
    assert_eq!(r.release().unwrap(), size);
    assert_eq!(r.pool_size(), 0);
}

#[test]
fn pool_under_eight_threads_on_gpu() {
    let Some(d) = gpu("gpu pool, 8 threads") else {
        return;
    };
    rmm_core::testing::stress::pool_under_eight_threads(&d).unwrap();
}

#[test]
fn arena_under_eight_threads_on_gpu() {
    let Some(d) = gpu("gpu arena, 8 threads") else {
        return;
    };
    rmm_core::testing::stress::arena_under_eight_threads(&d).unwrap();
}

#[test]
fn fixed_size_under_eight_threads_on_gpu() {
    let Some(d) = gpu("gpu fixed-size, 8 threads") else {
        return;
    };
    rmm_core::testing::stress::fixed_size_under_eight_threads(&d).unwrap();
}

#[test]
fn binning_under_eight_threads_on_gpu() {
    let Some(d) = gpu("gpu binning, 8 threads") else {
        return;
    };
    rmm_core::testing::stress::binning_under_eight_threads(&d).unwrap();
}
rmm_core::conformance_tests!(
    expandable_pool_on_gpu,
    gpu("gpu expandable pool").map(|d| (
        Arc::new(PoolResource::expandable(&d, PoolOptions::sized(0, None)).unwrap())
            as SharedResource,
        ConformanceConfig::default()
    ))
);
