//! The pool on a simulated device: property tests over random traces, growth and its limits,
//! release, coalescing back to whole chunks, and deallocation checks.

mod common;

use common::{free_all, run, steps, Block, Live, Step};
use proptest::prelude::*;
use rmm_core::{
    CudaResource, Device, MemoryError, MemoryResource, PoolOptions, PoolResource, SharedResource,
    Stream,
};
use std::sync::Arc;

const MIB: usize = 1 << 20;

fn pool_on(device: &Device, initial: usize, maximum: Option<usize>) -> PoolResource<CudaResource> {
    PoolResource::new(
        CudaResource::new(device),
        PoolOptions {
            initial_pool_size: Some(initial),
            maximum_pool_size: maximum,
            validate_deallocations: true,
        },
    )
    .unwrap()
}

fn streams(device: &Device, n: usize) -> Vec<Stream> {
    (0..n).map(|_| device.new_stream().unwrap()).collect()
}

/// After every block is freed: no byte is missing, every chunk can be handed out whole again
/// (its fragments, spread over several streams and the reservoir, coalesce), and `release`
/// returns all of it to the device.
fn check_everything_comes_back(
    pool: &PoolResource<CudaResource>,
    device: &Device,
    streams: &[Stream],
) -> Result<(), String> {
    let size = pool.pool_size();
    if pool.free_bytes() != size {
        return Err(format!(
            "{} of {size} bytes free after freeing everything",
            pool.free_bytes()
        ));
    }
    let chunks = pool.chunks();
    let total: usize = chunks.iter().map(|c| c.1).sum();
    if total != size {
        return Err(format!("chunks sum to {total}, the pool size is {size}"));
    }
    for (i, &(_, chunk)) in chunks.iter().enumerate() {
        let s = &streams[i % streams.len()];
        let ptr = pool
            .allocate(chunk, s)
            .map_err(|e| format!("a whole chunk of {chunk} bytes: {e}"))?;
        if pool.pool_size() != size {
            return Err(format!(
                "allocating a whole free chunk grew the pool to {}",
                pool.pool_size()
            ));
        }
        // SAFETY: just allocated.
        unsafe { pool.deallocate(ptr, chunk, s) }.map_err(|e| e.to_string())?;
    }
    let released = pool.release().map_err(|e| e.to_string())?;
    if released != size || pool.pool_size() != 0 || pool.free_bytes() != 0 {
        return Err(format!(
            "release returned {released} of {size}; {} held, {} free after",
            pool.pool_size(),
            pool.free_bytes()
        ));
    }
    let info = device.memory_info().unwrap();
    if info.free != info.total {
        return Err(format!(
            "{} bytes still taken from the device",
            info.total - info.free
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random traces on three streams, frees often on another stream than the allocation's, in a
    /// pool that must grow and may hit its maximum.
    #[test]
    fn random_traces_keep_every_invariant(trace in steps(2 * MIB, 3, 400)) {
        let device = Device::simulated(1 << 30);
        let pool = pool_on(&device, MIB, Some(24 * MIB));
        let s = streams(&device, 3);
        let (mut live, _refusals) = run(&pool, &s, &trace, true, |_: &Live| {
            if pool.pool_size() > 24 * MIB {
                return Err(format!("pool size {} exceeds the maximum", pool.pool_size()));
            }
            Ok(())
        })
        .map_err(TestCaseError::fail)?;
        free_all(&pool, &s, &mut live).map_err(TestCaseError::fail)?;
        check_everything_comes_back(&pool, &device, &s).map_err(TestCaseError::fail)?;
    }

    /// Without a maximum nothing is refused, whatever the trace.
    #[test]
    fn an_unbounded_pool_serves_every_request(trace in steps(4 * MIB, 2, 300)) {
        let device = Device::simulated(4 << 30);
        let pool = pool_on(&device, 0, None);
        let s = streams(&device, 2);
        let (mut live, refusals) = run(&pool, &s, &trace, false, |_| Ok(())).map_err(TestCaseError::fail)?;
        prop_assert_eq!(refusals, 0);
        free_all(&pool, &s, &mut live).map_err(TestCaseError::fail)?;
        check_everything_comes_back(&pool, &device, &s).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn growth_spans_several_chunks_that_coalesce_back() {
    let device = Device::simulated(1 << 30);
    let pool = pool_on(&device, 4 * MIB, None);
    let s = streams(&device, 3);
    let mut live = Live::default();
    for i in 0..300usize {
        let bytes = 1 + (i * 7919) % (512 << 10);
        let stream = i % 3;
        let ptr = pool.allocate(bytes, &s[stream]).unwrap();
        live.insert(Block { ptr, bytes, stream }).unwrap();
    }
    assert!(
        pool.chunks().len() > 1,
        "the pool should have grown: {:?}",
        pool.chunks()
    );
    // Free on rotating streams, so the fragments end up spread over all of them.
    for (i, b) in live.drain().into_iter().enumerate() {
        unsafe { pool.deallocate(b.ptr, b.bytes, &s[(i + 1) % 3]) }.unwrap();
    }
    check_everything_comes_back(&pool, &device, &s).unwrap();
}

#[test]
fn growth_halves_its_attempt_when_the_upstream_refuses() {
    // 24 MiB device, 8 MiB initial pool.
    let device = Device::simulated(24 * MIB);
    let pool = pool_on(&device, 8 * MIB, None);
    let s = device.new_stream().unwrap();
    let a = pool.allocate(8 * MIB, &s).unwrap();
    // Growth asks for the pool size (8 MiB): granted.
    let b = pool.allocate(4 * MIB, &s).unwrap();
    assert_eq!(pool.pool_size(), 16 * MIB);
    // Now it asks for 16 MiB, is refused, and settles for 8 MiB.
    let c = pool.allocate(7 * MIB, &s).unwrap();
    assert_eq!(pool.pool_size(), 24 * MIB);
    let sizes: Vec<usize> = pool.chunks().iter().map(|c| c.1).collect();
    assert_eq!(sizes, vec![8 * MIB; 3]);
    for (p, n) in [(a, 8 * MIB), (b, 4 * MIB), (c, 7 * MIB)] {
        unsafe { pool.deallocate(p, n, &s) }.unwrap();
    }
}

#[test]
fn upstream_refusal_is_an_out_of_memory_error_that_says_so() {
    let device = Device::simulated(16 * MIB);
    let pool = pool_on(&device, 4 * MIB, None);
    let s = device.new_stream().unwrap();
    let a = pool.allocate(10 * MIB, &s).unwrap();
    assert_eq!(pool.pool_size(), 14 * MIB);
    let err = pool.allocate(8 * MIB, &s).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(oom.requested, 8 * MIB);
    assert_eq!(oom.held, Some(14 * MIB));
    assert_eq!(oom.free, Some(4 * MIB));
    assert_eq!(oom.largest_free_block, Some(4 * MIB));
    assert_eq!(oom.maximum, None);
    let text = err.to_string();
    assert!(text.contains("refused to grow the pool"), "{text}");
    assert!(text.contains("8.00 MiB requested"), "{text}");
    // The pool still works after the refusal.
    let b = pool.allocate(4 * MIB, &s).unwrap();
    unsafe {
        pool.deallocate(a, 10 * MIB, &s).unwrap();
        pool.deallocate(b, 4 * MIB, &s).unwrap();
    }
}

#[test]
fn the_maximum_is_never_exceeded_and_the_error_names_it() {
    let device = Device::simulated(1 << 30);
    let pool = pool_on(&device, MIB, Some(4 * MIB));
    let s = device.new_stream().unwrap();
    let a = pool.allocate(3 * MIB, &s).unwrap();
    assert_eq!(pool.pool_size(), 4 * MIB);
    let err = pool.allocate(2 * MIB, &s).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!((oom.held, oom.maximum), (Some(4 * MIB), Some(4 * MIB)));
    assert_eq!(oom.free, Some(MIB));
    assert!(
        err.to_string().contains("maximum pool size reached"),
        "{err}"
    );
    assert!(pool.pool_size() <= 4 * MIB);
    unsafe { pool.deallocate(a, 3 * MIB, &s) }.unwrap();
    // The chunks are 1 and 3 MiB: a 3 MiB block fits again once freed, without growth.
    let b = pool.allocate(3 * MIB, &s).unwrap();
    assert_eq!(pool.pool_size(), 4 * MIB);
    unsafe { pool.deallocate(b, 3 * MIB, &s) }.unwrap();
}

#[test]
fn an_initial_size_above_the_maximum_is_refused() {
    let device = Device::simulated(1 << 30);
    let err = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(8 * MIB, Some(4 * MIB)),
    )
    .unwrap_err();
    assert!(matches!(err, MemoryError::InvalidArgument(_)), "{err}");
}

#[test]
fn the_default_initial_size_is_half_the_free_memory() {
    let device = Device::simulated(64 * MIB);
    let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::default()).unwrap();
    assert_eq!(pool.pool_size(), 32 * MIB);
    assert_eq!(pool.maximum_pool_size(), None);
}

#[test]
fn bad_deallocations_are_errors_not_corruption() {
    let device = Device::simulated(1 << 30);
    let pool = pool_on(&device, 4 * MIB, None);
    let s = device.new_stream().unwrap();
    let a = pool.allocate(1000, &s).unwrap();
    let err = unsafe { pool.deallocate(a, 5000, &s) }.unwrap_err();
    assert!(matches!(err, MemoryError::InvalidDeallocation(_)), "{err}");
    unsafe { pool.deallocate(a, 1000, &s) }.unwrap();
    let err = unsafe { pool.deallocate(a, 1000, &s) }.unwrap_err();
    assert!(err.to_string().contains("not a live allocation"), "{err}");
    let err = unsafe { pool.deallocate(0x1234_5600, 256, &s) }.unwrap_err();
    assert!(matches!(err, MemoryError::InvalidDeallocation(_)), "{err}");
    assert_eq!(pool.free_bytes(), pool.pool_size());
}

#[test]
fn the_checked_mode_is_on_by_default_in_debug_builds_only_and_works_in_any_when_set() {
    assert_eq!(
        PoolOptions::default().validate_deallocations,
        cfg!(debug_assertions)
    );
    // Set explicitly, as a release build would: many threads, each block freed right, then twice.
    let device = Device::simulated(1 << 30);
    let pool = Arc::new(pool_on(&device, 16 * MIB, Some(16 * MIB)));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (pool, device) = (pool.clone(), device.clone());
            std::thread::spawn(move || {
                let s = device.new_stream().unwrap();
                let sizes: Vec<usize> = (0..500).map(|i| 256 * (1 + (i + t) % 7)).collect();
                let blocks: Vec<u64> = sizes
                    .iter()
                    .map(|&n| pool.allocate(n, &s).unwrap())
                    .collect();
                for (&p, &n) in blocks.iter().zip(&sizes) {
                    unsafe { pool.deallocate(p, n, &s) }.unwrap();
                }
                for (&p, &n) in blocks.iter().zip(&sizes) {
                    let err = unsafe { pool.deallocate(p, n, &s) }.unwrap_err();
                    assert!(matches!(err, MemoryError::InvalidDeallocation(_)), "{err}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(pool.free_bytes(), pool.pool_size(), "nothing freed twice");
    let s = device.new_stream().unwrap();
    let whole = pool.allocate(16 * MIB, &s).unwrap();
    unsafe { pool.deallocate(whole, 16 * MIB, &s) }.unwrap();
}

#[test]
fn a_stream_of_another_device_is_refused() {
    let pool = pool_on(&Device::simulated(1 << 30), MIB, None);
    let other = Device::simulated(1 << 30).new_stream().unwrap();
    let err = pool.allocate(256, &other).unwrap_err();
    assert!(matches!(err, MemoryError::InvalidArgument(_)), "{err}");
}

#[test]
fn the_pool_composes_through_shared_handles() {
    let device = Device::simulated(1 << 30);
    let upstream: SharedResource = Arc::new(CudaResource::new(&device));
    let pool: SharedResource =
        Arc::new(PoolResource::new(upstream, PoolOptions::sized(MIB, None)).unwrap());
    assert_eq!(pool.name(), "pool(cuda)");
    let s = device.default_stream();
    let (mut live, _) = run(
        &*pool,
        std::slice::from_ref(&s),
        &[Step::Alloc {
            bytes: 300,
            stream: 0,
        }],
        false,
        |_| Ok(()),
    )
    .unwrap();
    free_all(&*pool, &[s], &mut live).unwrap();
}
