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
rmm_core::conformance_tests!(
    async_view_on_sim,
    Some((
        Arc::new(AsyncResource::view_default_pool(&sim()).unwrap()) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    pinned_pool_on_sim,
    Some((
        Arc::new(
            PoolResource::new(
                PinnedHostResource::new(&sim()),
                PoolOptions::sized(64 << 20, None)
            )
            .unwrap()
        ) as SharedResource,
        ConformanceConfig::default()
    ))
);
rmm_core::conformance_tests!(
    callback_on_sim,
    Some((
        Arc::new(rmm_core::testing::callback::forwarding_to(Arc::new(
            CudaResource::new(&sim())
        ))) as SharedResource,
        ConformanceConfig::default()
    ))
);

#[test]
fn a_null_from_the_callback_is_an_out_of_memory_error() {
    unsafe extern "C" fn none(
        _: usize,
        _: *mut std::ffi::c_void,
        _: *mut std::ffi::c_void,
    ) -> *mut std::ffi::c_void {
        std::ptr::null_mut()
    }
    unsafe extern "C" fn never(
        _: *mut std::ffi::c_void,
        _: usize,
        _: *mut std::ffi::c_void,
        _: *mut std::ffi::c_void,
    ) {
    }
    let d = sim();
    // SAFETY: allocates nothing.
    let r = unsafe {
        CallbackResource::new(&d, none, std::ptr::null_mut(), never, std::ptr::null_mut())
    };
    let e = r
        .allocate(1000, &d.default_stream())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1000") && e.contains("callback returned null"),
        "{e}"
    );
}

#[test]
fn system_memory_is_refused_where_the_device_cannot_read_pageable_memory() {
    let e = SystemResource::new(&sim()).unwrap_err().to_string();
    assert!(
        e.contains("pageable") && e.contains("ManagedResource"),
        "{e}"
    );
}

#[test]
fn a_view_of_the_default_pool_says_so() {
    let v = AsyncResource::view_default_pool(&sim()).unwrap();
    assert_eq!(v.name(), "async_view");
}
rmm_core::conformance_tests!(
    expandable_pool_on_sim,
    Some((
        Arc::new(PoolResource::expandable(&sim(), PoolOptions::sized(0, None)).unwrap())
            as SharedResource,
        ConformanceConfig::default()
    ))
);
