//! The conformance suite against every base resource on the real GPU (skips without one).

use integration_tests::gpu_or_skip;
use rmm_core::testing::conformance::ConformanceConfig;
use rmm_core::*;
use std::sync::Arc;

fn gpu_config() -> ConformanceConfig {
    ConformanceConfig::default()
}

/// Managed memory: never ask for more than the GPU has free (oversubscription can hang the lent
/// machines), so no 1 PiB request, and sizes far below the free memory.
fn managed_config() -> ConformanceConfig {
    ConformanceConfig {
        huge_request: None,
        ..ConformanceConfig::default()
    }
}

rmm_core::conformance_tests!(
    cuda,
    gpu_or_skip("gpu cuda resource").map(|d| (
        Arc::new(CudaResource::new(&d)) as SharedResource,
        gpu_config()
    ))
);
rmm_core::conformance_tests!(
    managed,
    gpu_or_skip("gpu managed resource").map(|d| (
        Arc::new(ManagedResource::new(&d)) as SharedResource,
        managed_config()
    ))
);
rmm_core::conformance_tests!(
    managed_prefetch,
    gpu_or_skip("gpu managed+prefetch resource").map(|d| (
        Arc::new(ManagedResource::with_prefetch(&d)) as SharedResource,
        managed_config()
    ))
);
rmm_core::conformance_tests!(
    pinned_host,
    gpu_or_skip("gpu pinned host resource").map(|d| (
        Arc::new(PinnedHostResource::new(&d)) as SharedResource,
        gpu_config()
    ))
);
rmm_core::conformance_tests!(
    async_pool,
    gpu_or_skip("gpu async resource").map(|d| {
        let r = AsyncResource::new(
            &d,
            AsyncResourceOptions {
                initial_pool_size: Some(256 << 20),
                ..Default::default()
            },
        )
        .unwrap();
        (Arc::new(r) as SharedResource, gpu_config())
    })
);

#[test]
fn async_resource_reserves_its_initial_size_and_respects_its_maximum() {
    let Some(d) = gpu_or_skip("async initial/maximum") else {
        return;
    };
    let r = AsyncResource::new(
        &d,
        AsyncResourceOptions {
            initial_pool_size: Some(64 << 20),
            maximum_pool_size: Some(128 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        r.pool_size().unwrap() >= 64 << 20,
        "pool holds {}",
        r.pool_size().unwrap()
    );
    let s = d.new_stream().unwrap();
    let err = r.allocate(256 << 20, &s).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    let p = r.allocate(32 << 20, &s).unwrap();
    unsafe { r.deallocate(p, 32 << 20, &s).unwrap() };
    s.synchronize().unwrap();
    r.trim_to(0).unwrap();
}

#[test]
fn out_of_memory_from_the_driver_says_what_the_device_has() {
    let Some(d) = gpu_or_skip("cuda oom message") else {
        return;
    };
    let r = CudaResource::new(&d);
    let err = r.allocate(1 << 50, &d.default_stream()).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("not an OOM: {err}")
    };
    assert_eq!(oom.requested, 1 << 50);
    assert!(oom.free.is_some() && oom.maximum.is_some(), "{err}");
    assert!(
        err.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{err}"
    );
}
