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

/// The async resource's calls on a created stream do not make the device current (the driver
/// takes the context from the stream): they must work with no context current, and on the
/// default stream (which means the current context's) the device is still made current.
#[test]
fn async_resource_works_with_no_context_current() {
    let Some(d) = gpu_or_skip("async without a current context") else {
        return;
    };
    let r = AsyncResource::new(&d, AsyncResourceOptions::default()).unwrap();
    let s = d.new_stream().unwrap();
    let unbind = || {
        // SAFETY: setting no context current is always allowed.
        let rc = unsafe { cudarc::driver::sys::cuCtxSetCurrent(std::ptr::null_mut()) };
        assert_eq!(rc, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
    };
    unbind();
    let p = r.allocate(1 << 20, &s).unwrap();
    let mut back = vec![0u8; 1 << 20];
    // SAFETY: `p` holds 1 MiB on this device, used by nothing else; `back` outlives the copy.
    unsafe {
        s.memset(p, 0xab, 1 << 20).unwrap();
        s.copy_to_host(&mut back, p).unwrap();
    }
    assert!(back.iter().all(|&b| b == 0xab));
    unbind();
    // SAFETY: allocated above with this size, its work done.
    unsafe { r.deallocate(p, 1 << 20, &s).unwrap() };
    s.synchronize().unwrap();
    unbind();
    let default = d.default_stream();
    let q = r.allocate(4096, &default).unwrap();
    // SAFETY: allocated just above on this stream, unused.
    unsafe { r.deallocate(q, 4096, &default).unwrap() };
    default.synchronize().unwrap();
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
rmm_core::conformance_tests!(
    async_view,
    gpu_or_skip("gpu async view of the default pool").map(|d| (
        Arc::new(AsyncResource::view_default_pool(&d).unwrap()) as SharedResource,
        gpu_config()
    ))
);
rmm_core::conformance_tests!(
    callback,
    gpu_or_skip("gpu callback resource").map(|d| (
        Arc::new(rmm_core::testing::callback::forwarding_to(Arc::new(
            CudaResource::new(&d)
        ))) as SharedResource,
        gpu_config()
    ))
);
rmm_core::conformance_tests!(
    pinned_pool,
    gpu_or_skip("gpu stream-ordered pinned host pool").map(|d| (
        Arc::new(
            PoolResource::new(
                PinnedHostResource::new(&d),
                PoolOptions::sized(64 << 20, None)
            )
            .unwrap()
        ) as SharedResource,
        gpu_config()
    ))
);
rmm_core::conformance_tests!(
    system,
    gpu_or_skip("gpu system memory")
        .filter(|d| d.pageable_memory_access().unwrap())
        .map(|d| (
            Arc::new(SystemResource::new(&d).unwrap()) as SharedResource,
            ConformanceConfig {
                huge_request: None,
                ..gpu_config()
            }
        ))
);

/// The view and cudarc share the device's default pool: memory cudarc allocates
/// (`CudaStream::alloc_zeros`, i.e. `cuMemAllocAsync`) shows in the view's pool, and the view's
/// allocations come from the same pool.
#[test]
fn the_default_pool_view_shares_the_pool_with_cudarc() {
    use cudarc::driver::{sys, DevicePtr};
    let Some(d) = gpu_or_skip("default pool shared with cudarc") else {
        return;
    };
    // Other tests of this binary use the default pool at the same time, so its counters only
    // bound what this test holds; which pool a block came from is asked of the driver instead.
    let pool_of = |ptr: u64| {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `ptr` is a live allocation; the out pointer is valid for a pool handle.
        let rc = unsafe {
            sys::cuPointerGetAttribute(
                &mut pool as *mut sys::CUmemoryPool as *mut std::ffi::c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                ptr,
            )
        };
        assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "cuPointerGetAttribute");
        pool as usize
    };
    let mut default_pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: device 0 exists (gpu_or_skip opened it); the out pointer is valid.
    let rc = unsafe { sys::cuDeviceGetDefaultMemPool(&mut default_pool, 0) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "cuDeviceGetDefaultMemPool");
    let view = AsyncResource::view_default_pool(&d).unwrap();
    let stream = d.new_stream().unwrap();
    let cuda_stream = stream.cuda().unwrap();
    let slice = cuda_stream.alloc_zeros::<u8>(64 << 20).unwrap();
    let ptr = view.allocate(32 << 20, &stream).unwrap();
    let (cudarc_ptr, _sync) = slice.device_ptr(&cuda_stream);
    assert_eq!(pool_of(cudarc_ptr), default_pool as usize, "cudarc's block");
    assert_eq!(pool_of(ptr), default_pool as usize, "the view's block");
    stream.synchronize().unwrap();
    assert!(view.used_bytes().unwrap() >= 96 << 20, "both counted");
    unsafe { view.deallocate(ptr, 32 << 20, &stream).unwrap() };
    drop(_sync);
    drop(slice);
    stream.synchronize().unwrap();
    drop(view);
    // The view left the pool alone: cudarc still allocates from it.
    let again = cuda_stream.alloc_zeros::<u8>(1 << 20).unwrap();
    let (again_ptr, _sync) = again.device_ptr(&cuda_stream);
    assert_eq!(pool_of(again_ptr), default_pool as usize);
}

/// Where the device reads pageable memory, the system allocator's memory is written by the
/// device and read back on the host; elsewhere the resource is refused, saying why.
#[test]
fn system_memory_works_with_hmm_and_is_refused_without() {
    let Some(d) = gpu_or_skip("system memory") else {
        return;
    };
    if !d.pageable_memory_access().unwrap() {
        let e = SystemResource::new(&d).unwrap_err().to_string();
        assert!(e.contains("pageable"), "{e}");
        println!("system memory: not supported here ({e})");
        return;
    }
    let r = SystemResource::new(&d).unwrap();
    let stream = d.new_stream().unwrap();
    let ptr = r.allocate(1 << 20, &stream).unwrap();
    unsafe { stream.memset(ptr, 0x5a, 1 << 20).unwrap() };
    stream.synchronize().unwrap();
    let host = unsafe { std::slice::from_raw_parts(ptr as *const u8, 1 << 20) };
    assert!(host.iter().all(|&b| b == 0x5a));
    unsafe { r.deallocate(ptr, 1 << 20, &stream).unwrap() };
}
