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

/// Fixed-size blocks of 1 MiB: the sweep stops at the block size; a larger request is refused.
fn fixed_config() -> ConformanceConfig {
    ConformanceConfig {
        max_size: 1 << 20,
        random_max_size: 1 << 20,
        random_max_live: 64 << 20,
        ..ConformanceConfig::default()
    }
}

rmm_core::conformance_tests!(
    fixed_size_on_sim,
    Some((
        Arc::new(FixedSizeResource::new(cuda(&sim()), 1 << 20, 16).unwrap()) as SharedResource,
        fixed_config()
    ))
);

rmm_core::conformance_tests!(
    binning_over_pool_on_sim,
    Some((
        Arc::new(
            BinningResource::with_range(
                Arc::new(
                    PoolResource::new(cuda(&sim()), PoolOptions::sized(64 << 20, None)).unwrap()
                ),
                18,
                22
            )
            .unwrap()
        ) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    arena_on_sim,
    Some((
        Arc::new(
            ArenaResource::new(
                cuda(&sim()),
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

fn pool(device: &Device) -> SharedResource {
    Arc::new(PoolResource::new(cuda(device), PoolOptions::sized(64 << 20, None)).unwrap())
}

rmm_core::conformance_tests!(
    limiting_on_sim,
    Some((
        Arc::new(LimitingAdaptor::new(pool(&sim()), 4 << 30)) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    statistics_on_sim,
    Some((
        Arc::new(StatisticsAdaptor::new(pool(&sim()))) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    tracking_on_sim,
    Some((
        Arc::new(TrackingAdaptor::new(pool(&sim()), false)) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    logging_on_sim,
    Some((
        Arc::new(LoggingAdaptor::with_writer(pool(&sim()), std::io::sink()).unwrap())
            as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    failure_callback_on_sim,
    Some((
        Arc::new(FailureCallbackAdaptor::new(pool(&sim()), |_, _| false)) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    aligned_on_sim,
    Some((
        Arc::new(AlignedAdaptor::new(pool(&sim()), 4096, 0).unwrap()) as SharedResource,
        ConformanceConfig::default()
    ))
);

rmm_core::conformance_tests!(
    prefetch_over_managed_pool_on_sim,
    Some((
        {
            let device = sim();
            let managed: SharedResource = Arc::new(ManagedResource::new(&device));
            let pool = PoolResource::new(managed, PoolOptions::sized(64 << 20, None)).unwrap();
            Arc::new(PrefetchAdaptor::new(pool)) as SharedResource
        },
        ConformanceConfig::default()
    ))
);

/// From 256 KiB to 4 MiB a block takes its request's size class (at most 1/32 more); a request
/// whose class finds no room, in a pool or an arena of exactly its size, takes its exact size
/// instead of failing, and its free gives all of it back.
#[test]
fn a_request_whose_class_does_not_fit_takes_its_exact_size() {
    let bytes = 1_000_192; // a multiple of 256; its class holds 1,015,808 bytes
    let device = sim();
    let s = device.new_stream().unwrap();
    let pool = PoolResource::new(cuda(&device), PoolOptions::sized(bytes, Some(bytes))).unwrap();
    let arena = ArenaResource::new(
        cuda(&device),
        ArenaOptions {
            arena_size: Some(bytes),
            superblock_size: 512 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    for (name, r, free) in [
        ("pool", &pool as &dyn MemoryResource, &|| pool.free_bytes()),
        ("arena", &arena as &dyn MemoryResource, &|| {
            arena.free_bytes()
        }),
    ] as [(&str, &dyn MemoryResource, &dyn Fn() -> usize); 2]
    {
        for _ in 0..3 {
            let p = r
                .allocate(bytes, &s)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(free(), 0, "{name}: the whole of it");
            assert!(r.allocate(256, &s).is_err(), "{name}: nothing left");
            // SAFETY: allocated above with this size, unused.
            unsafe { r.deallocate(p, bytes, &s) }.unwrap();
            assert_eq!(free(), bytes, "{name}: all of it back");
            // A smaller request, whose class fits, is served from the same memory.
            let q = r.allocate(bytes - 4096, &s).unwrap();
            // SAFETY: allocated above with this size, unused.
            unsafe { r.deallocate(q, bytes - 4096, &s) }.unwrap();
        }
    }
    assert_eq!(pool.pool_size(), bytes, "the pool never grew");
}

/// A stream's arena takes a superblock at a time from a small global arena and 1/64 of a large
/// one (at most 256 MiB: the arena's unit test), so that busy streams of a large arena seldom
/// come back to its lock; a request of a superblock or more that the stream's arena cannot
/// serve takes exactly its size from the global arena.
#[test]
fn a_streams_arena_takes_a_portion_that_grows_with_the_arena() {
    const MIB: usize = 1 << 20;
    let device = Device::simulated(8 << 30);
    let s = device.new_stream().unwrap();
    for (arena_size, portion) in [(48 * MIB, MIB), (1 << 30, 16 * MIB), (4 << 30, 64 * MIB)] {
        let arena = ArenaResource::new(
            cuda(&device),
            ArenaOptions {
                arena_size: Some(arena_size),
                superblock_size: MIB,
                ..Default::default()
            },
        )
        .unwrap();
        let small = arena.allocate(1000, &s).unwrap();
        assert_eq!(
            arena.global_free_bytes(),
            arena_size - portion,
            "arena of {arena_size} bytes: one portion taken"
        );
        assert_eq!(arena.free_bytes(), arena_size - 1024);
        // More than the stream's arena holds: exactly that, from the global arena.
        let large = arena.allocate(portion, &s).unwrap();
        assert_eq!(
            arena.global_free_bytes(),
            arena_size - 2 * portion,
            "a request of a superblock or more takes exactly its size"
        );
        assert!(arena.state_report().contains("portions of"));
        // SAFETY: allocated above with these sizes, unused.
        unsafe {
            arena.deallocate(small, 1000, &s).unwrap();
            arena.deallocate(large, portion, &s).unwrap();
        }
        assert_eq!(arena.free_bytes(), arena_size);
    }
}

/// The quick paths find a stream's list among the first 64 only: the lists of streams beyond
/// them (all alive at once) go the general way, with the same results, for every resource.
#[test]
fn streams_beyond_the_first_64_reuse_their_frees_as_the_first_ones_do() {
    let device = sim();
    let arena_options = ArenaOptions {
        arena_size: Some(256 << 20),
        ..Default::default()
    };
    let resources: Vec<SharedResource> = vec![
        pool(&device),
        Arc::new(ArenaResource::new(cuda(&device), arena_options).unwrap()),
        Arc::new(FixedSizeResource::new(cuda(&device), 1 << 20, 16).unwrap()),
    ];
    for r in resources {
        let streams: Vec<Stream> = (0..80).map(|_| device.new_stream().unwrap()).collect();
        for (i, s) in streams.iter().enumerate() {
            let a = r.allocate(4096, s).unwrap();
            // SAFETY: allocated just above with this size on this stream, unused.
            unsafe { r.deallocate(a, 4096, s).unwrap() };
            let b = r.allocate(4096, s).unwrap();
            assert_eq!(a, b, "stream {i} of {}: its own free comes back", r.name());
            // SAFETY: as above.
            unsafe { r.deallocate(b, 4096, s).unwrap() };
        }
    }
}
