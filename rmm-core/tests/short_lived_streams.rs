//! A stream per task: the sub-allocators keep state per stream, and retire it once no handle to
//! the stream is left, so a program that creates and drops a thousand streams keeps a bounded
//! number of lists, and the memory those streams freed stays usable by every later stream.

use rmm_core::{
    ArenaOptions, ArenaResource, CudaResource, Device, FixedSizeResource, MemoryResource,
    PoolOptions, PoolResource, Stream,
};
use rmm_cuda::SimOp;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const TASKS: usize = 1000;

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, s: &Stream) {
    // SAFETY: tests free only blocks they allocated from `r` with these sizes.
    unsafe { r.deallocate(ptr, bytes, s) }.unwrap();
}

fn host_waits(device: &Device) -> usize {
    device
        .sim_ops()
        .iter()
        .filter(|op| {
            matches!(
                op,
                SimOp::StreamSync { .. } | SimOp::EventSync { .. } | SimOp::DeviceSync
            )
        })
        .count()
}

#[test]
fn pool_keeps_a_bounded_number_of_lists_and_reuses_what_gone_streams_freed() {
    let device = Device::simulated(1 << 30);
    // 16 MiB at most: a thousand tasks of 2 x 256 KiB get by only by reusing memory that earlier
    // tasks freed on streams that are gone.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(16 * MIB, Some(16 * MIB)),
    )
    .unwrap();
    let most = {
        let keeper = device.new_stream().unwrap();
        let kept = pool.allocate(256 * KIB, &keeper).unwrap();
        let mut most = 0;
        for _ in 0..TASKS {
            let task = device.new_stream().unwrap();
            let a = pool.allocate(256 * KIB, &task).unwrap();
            let b = pool.allocate(256 * KIB, &task).unwrap();
            free(&pool, a, 256 * KIB, &task);
            free(&pool, b, 256 * KIB, &task);
            most = most.max(pool.stream_count());
        }
        // The long-lived stream's list was never retired: its block comes back to it.
        free(&pool, kept, 256 * KIB, &keeper);
        assert_eq!(pool.allocate(256 * KIB, &keeper).unwrap(), kept);
        free(&pool, kept, 256 * KIB, &keeper);
        most
    };
    assert!(
        most <= 3,
        "lists kept at once: {most} (the keeper's, the task's, the previous task's)"
    );
    assert_eq!(
        pool.pool_size(),
        16 * MIB,
        "no growth: the memory was reused"
    );
    assert_eq!(pool.free_bytes(), 16 * MIB, "nothing lost");
    assert_eq!(
        host_waits(&device),
        0,
        "retiring a stream orders on the device"
    );
    // Everything coalesces back into one block for a new stream, and goes back to the device.
    let s = device.new_stream().unwrap();
    let whole = pool.allocate(16 * MIB, &s).unwrap();
    free(&pool, whole, 16 * MIB, &s);
    drop(s);
    assert_eq!(pool.release().unwrap(), 16 * MIB);
    assert_eq!(pool.stream_count(), 0, "release retires gone streams too");
}

#[test]
fn fixed_size_keeps_a_bounded_number_of_lists() {
    let device = Device::simulated(1 << 30);
    let fixed = FixedSizeResource::new(CudaResource::new(&device), 256 * KIB, 8).unwrap();
    let keeper = device.new_stream().unwrap();
    let kept = fixed.allocate(1000, &keeper).unwrap();
    let mut most = 0;
    for _ in 0..TASKS {
        let task = device.new_stream().unwrap();
        let a = fixed.allocate(1000, &task).unwrap();
        let b = fixed.allocate(1000, &task).unwrap();
        free(&fixed, a, 1000, &task);
        free(&fixed, b, 1000, &task);
        most = most.max(fixed.stream_count());
    }
    free(&fixed, kept, 1000, &keeper);
    assert!(most <= 3, "lists kept at once: {most}");
    assert_eq!(
        fixed.held_bytes(),
        8 * 256 * KIB,
        "no growth: the blocks were reused"
    );
    assert_eq!(fixed.free_bytes(), 8 * 256 * KIB);
}

#[test]
fn arena_keeps_a_bounded_number_of_arenas() {
    let device = Device::simulated(1 << 30);
    let arena = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(16 * MIB),
            superblock_size: MIB,
            dump_on_failure: None,
        },
    )
    .unwrap();
    let keeper = device.new_stream().unwrap();
    let kept = arena.allocate(256 * KIB, &keeper).unwrap();
    let mut most = 0;
    for _ in 0..TASKS {
        let task = device.new_stream().unwrap();
        let a = arena.allocate(256 * KIB, &task).unwrap();
        let b = arena.allocate(256 * KIB, &task).unwrap();
        free(&arena, a, 256 * KIB, &task);
        free(&arena, b, 256 * KIB, &task);
        most = most.max(arena.stream_count());
    }
    free(&arena, kept, 256 * KIB, &keeper);
    assert!(most <= 3, "arenas kept at once: {most}");
    arena.defragment().unwrap();
    assert_eq!(arena.free_bytes(), 16 * MIB);
    assert_eq!(arena.largest_free_block(), 16 * MIB, "it all coalesces");
}

#[test]
fn a_stream_still_held_elsewhere_keeps_its_list() {
    let device = Device::simulated(1 << 30);
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(16 * MIB, Some(16 * MIB)),
    )
    .unwrap();
    let held = device.new_stream().unwrap();
    let clone = held.clone();
    let p = pool.allocate(256 * KIB, &held).unwrap();
    free(&pool, p, 256 * KIB, &held);
    drop(held);
    // A new stream's first use retires gone streams: `clone` still names this one.
    let other = device.new_stream().unwrap();
    let q = pool.allocate(256 * KIB, &other).unwrap();
    free(&pool, q, 256 * KIB, &other);
    assert_eq!(pool.stream_count(), 2);
    device.clear_sim_ops();
    assert_eq!(
        pool.allocate(256 * KIB, &clone).unwrap(),
        p,
        "its block is still in its own list"
    );
    assert_eq!(device.sim_ops(), vec![], "and reused without ordering");
    free(&pool, p, 256 * KIB, &clone);
}

#[test]
fn a_retired_streams_blocks_reach_another_stream_only_after_device_ordering() {
    let device = Device::simulated(1 << 30);
    // One reservoir portion: the first stream takes all of it.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(MIB, Some(MIB)),
    )
    .unwrap();
    let gone = device.new_stream().unwrap();
    let gone_id = gone.id().0;
    let p = pool.allocate(64 * KIB, &gone).unwrap();
    free(&pool, p, 64 * KIB, &gone);
    drop(gone);
    device.clear_sim_ops();
    let next = device.new_stream().unwrap();
    let q = pool.allocate(64 * KIB, &next).unwrap();
    assert_eq!(q, p, "the gone stream's block is reused");
    let ops = device.sim_ops();
    // The gone stream's blocks went to the retired list, whose stream waited for its work; the
    // new stream then waited for the retired list's stream.
    let [SimOp::Record {
        event: e1,
        stream: s1,
    }, SimOp::Wait {
        stream: retired,
        event: w1,
    }, SimOp::Record {
        event: e2,
        stream: s2,
    }, SimOp::Wait {
        stream: waiter,
        event: w2,
    }] = ops[..]
    else {
        panic!("expected two record/wait pairs, got {ops:?}");
    };
    assert_eq!((s1, w1), (gone_id, e1));
    assert_eq!((s2, w2), (retired, e2));
    assert_eq!(waiter, next.id().0);
    assert_ne!(retired, next.id().0);
    free(&pool, q, 64 * KIB, &next);
}

/// Threads that each run tasks on streams of their own, at once: streams are retired while other
/// threads steal from the retired list and from each other. No two live blocks may overlap, and
/// the resource must get by on its fixed memory.
fn concurrent_tasks(r: std::sync::Arc<dyn MemoryResource>, device: &Device, max: usize) {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    const THREADS: usize = 4;
    let live = Arc::new(Mutex::new(BTreeMap::<u64, u64>::new()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (r, device, live) = (r.clone(), device.clone(), live.clone());
            std::thread::spawn(move || {
                let mut rng = rmm_core::testing::SplitMix64::new(7 + t as u64);
                for _ in 0..TASKS / THREADS {
                    let task = device.new_stream().unwrap();
                    let blocks: Vec<(u64, usize)> = (0..3)
                        .map(|_| {
                            let bytes = 1 + (rng.next() % max as u64) as usize;
                            let p = r.allocate(bytes, &task).unwrap();
                            let end = p + bytes as u64;
                            let mut live = live.lock().unwrap();
                            if let Some((&s, &e)) = live.range(..end).next_back() {
                                assert!(e <= p, "[{p:#x}, {end:#x}) overlaps [{s:#x}, {e:#x})");
                            }
                            live.insert(p, end);
                            (p, bytes)
                        })
                        .collect();
                    for (p, bytes) in blocks {
                        live.lock().unwrap().remove(&p);
                        free(&*r, p, bytes, &task);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn pool_retires_streams_while_other_threads_steal() {
    let device = Device::simulated(1 << 30);
    let pool = std::sync::Arc::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(16 * MIB, Some(16 * MIB)),
        )
        .unwrap(),
    );
    concurrent_tasks(pool.clone(), &device, 512 * KIB);
    assert!(pool.stream_count() <= 4, "{}", pool.stream_count());
    assert_eq!(pool.pool_size(), 16 * MIB);
    assert_eq!(pool.free_bytes(), 16 * MIB);
    assert_eq!(pool.release().unwrap(), 16 * MIB);
}

#[test]
fn fixed_size_retires_streams_while_other_threads_steal() {
    let device = Device::simulated(1 << 30);
    let fixed = std::sync::Arc::new(
        FixedSizeResource::new(CudaResource::new(&device), 64 * KIB, 16).unwrap(),
    );
    concurrent_tasks(fixed.clone(), &device, 64 * KIB);
    assert!(fixed.stream_count() <= 4, "{}", fixed.stream_count());
    assert_eq!(fixed.held_bytes(), 16 * 64 * KIB, "no growth");
    assert_eq!(fixed.free_bytes(), 16 * 64 * KIB);
}
