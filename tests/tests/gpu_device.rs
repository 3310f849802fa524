//! The CUDA layer itself on the real GPU: properties, streams, events, raw calls, pools.

use integration_tests::gpu_or_skip;
use rmm_cuda::*;

#[test]
fn device_properties_and_memory_info() {
    let Some(d) = gpu_or_skip("device properties") else {
        return;
    };
    let name = d.name().unwrap();
    assert!(!name.is_empty());
    let (major, _) = d.compute_capability().unwrap();
    assert!(major >= 5);
    let info = d.memory_info().unwrap();
    assert!(info.total > 0 && info.free <= info.total);
    eprintln!(
        "GPU: {name}, cc {major}, {} MiB total, {} MiB free",
        info.total >> 20,
        info.free >> 20
    );
    let count = device_count().unwrap();
    assert!(matches!(
        Device::cuda(count),
        Err(CudaError::InvalidDevice { .. })
    ));
    assert_eq!(Device::cuda(0).unwrap(), d, "one handle per ordinal");
}

#[test]
fn raw_allocations_copies_and_memsets() {
    let Some(d) = gpu_or_skip("raw allocations") else {
        return;
    };
    let s = d.new_stream().unwrap();
    let dev = d.alloc(1 << 20).unwrap();
    let pinned = d.alloc_pinned(1 << 20).unwrap();
    let managed = d.alloc_managed(1 << 20).unwrap();
    unsafe {
        s.memset(dev, 0xAB, 1 << 20).unwrap();
        s.copy_device(managed, dev, 1 << 20).unwrap();
        d.prefetch(managed, 1 << 20, &s).unwrap();
        d.advise(managed, 1 << 20, MemAdvice::SetReadMostly)
            .unwrap();
        let mut host = vec![0u8; 1 << 20];
        s.copy_to_host(&mut host, managed).unwrap();
        assert!(host.iter().all(|&b| b == 0xAB));
        std::ptr::write_bytes(pinned as *mut u8, 0x11, 1 << 20);
        s.copy_from_host(
            dev,
            std::slice::from_raw_parts(pinned as *const u8, 1 << 20),
        )
        .unwrap();
        s.copy_to_host(&mut host, dev).unwrap();
        assert!(host.iter().all(|&b| b == 0x11));
        d.free(dev).unwrap();
        d.free_pinned(pinned).unwrap();
        d.free(managed).unwrap();
    }
    // A bad free is an error naming the driver's error, not a crash.
    let err = unsafe { d.free(0xdead_0000) }.unwrap_err();
    assert!(matches!(err, CudaError::Driver { .. }), "{err}");
}

#[test]
fn events_order_streams_without_host_sync() {
    let Some(d) = gpu_or_skip("events") else {
        return;
    };
    let (a, b) = (d.new_stream().unwrap(), d.new_stream().unwrap());
    let e = d.new_event().unwrap();
    let buf = d.alloc(64 << 20).unwrap();
    unsafe { a.memset(buf, 3, 64 << 20).unwrap() };
    b.wait_for(&a, &e).unwrap();
    let mut host = vec![0u8; 16];
    unsafe { b.copy_to_host(&mut host, buf + (64 << 20) - 16).unwrap() };
    assert!(host.iter().all(|&x| x == 3));
    e.synchronize().unwrap();
    assert!(e.is_complete().unwrap());
    unsafe { d.free(buf).unwrap() };
}

#[test]
fn stream_ordered_pool_reuses_and_trims() {
    let Some(d) = gpu_or_skip("mem pool") else {
        return;
    };
    let pool = d
        .create_mem_pool(MemPoolOptions {
            release_threshold: Some(u64::MAX),
            maximum_size: None,
        })
        .unwrap();
    let s = d.new_stream().unwrap();
    let p = pool.alloc_async(8 << 20, &s).unwrap();
    assert!(pool.used_bytes().unwrap() >= 8 << 20);
    unsafe { pool.free_async(p, &s).unwrap() };
    s.synchronize().unwrap();
    assert!(
        pool.reserved_bytes().unwrap() >= 8 << 20,
        "the release threshold keeps memory"
    );
    pool.trim_to(0).unwrap();
    assert_eq!(pool.used_bytes().unwrap(), 0);
}
