//! Stream ordering of the sub-allocators, read from the simulated device's log of ordering
//! operations: reuse on the freeing stream costs nothing; reuse on another stream costs one event
//! record on the freeing stream and one wait on the allocating one, and never a host wait.

use rmm_core::{
    ArenaOptions, ArenaResource, CudaResource, Device, FixedSizeResource, MemoryResource,
    PoolOptions, PoolResource, Stream,
};
use rmm_cuda::SimOp;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// A pool of one reservoir portion (1 MiB): the first stream to allocate takes all of it, so any
/// other stream must get memory from that stream's list.
fn one_portion_pool(device: &Device) -> PoolResource<CudaResource> {
    PoolResource::new(
        CudaResource::new(device),
        PoolOptions::sized(MIB, Some(MIB)),
    )
    .unwrap()
}

fn host_waits(ops: &[SimOp]) -> Vec<SimOp> {
    ops.iter()
        .copied()
        .filter(|op| {
            matches!(
                op,
                SimOp::StreamSync { .. } | SimOp::EventSync { .. } | SimOp::DeviceSync
            )
        })
        .collect()
}

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, s: &Stream) {
    // SAFETY: tests free only blocks they allocated from `r` with these sizes.
    unsafe { r.deallocate(ptr, bytes, s) }.unwrap();
}

#[test]
fn pool_reuse_on_the_same_stream_issues_no_event_operation() {
    let device = Device::simulated(1 << 30);
    let pool = one_portion_pool(&device);
    let a = device.new_stream().unwrap();
    let first = pool.allocate(4 * KIB, &a).unwrap();
    device.clear_sim_ops();
    free(&pool, first, 4 * KIB, &a);
    let again = pool.allocate(4 * KIB, &a).unwrap();
    assert_eq!(
        again, first,
        "a block freed on a stream is reused at once on it"
    );
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(pool.allocate(3 * KIB, &a).unwrap());
    }
    for p in held {
        free(&pool, p, 3 * KIB, &a);
    }
    free(&pool, again, 4 * KIB, &a);
    assert_eq!(
        device.sim_ops(),
        vec![],
        "frees and same-stream reuse record nothing"
    );
}

#[test]
fn pool_reuse_across_streams_records_once_on_the_freeing_stream_and_waits_on_the_other() {
    let device = Device::simulated(1 << 30);
    let pool = one_portion_pool(&device);
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let blocks: Vec<u64> = (0..8)
        .map(|_| pool.allocate(16 * KIB, &a).unwrap())
        .collect();
    for &p in &blocks {
        free(&pool, p, 16 * KIB, &a);
    }
    device.clear_sim_ops();
    let on_b = pool.allocate(16 * KIB, &b).unwrap();
    let ops = device.sim_ops();
    let [SimOp::Record { event, stream }, SimOp::Wait {
        stream: waiter,
        event: waited,
    }] = ops[..]
    else {
        panic!("expected one record and one wait, got {ops:?}");
    };
    assert_eq!((stream, waiter, waited), (a.id().0, b.id().0, event));
    assert!(blocks.contains(&on_b), "B reuses memory A freed");
    // B took A's whole list: more allocations on B need no further ordering.
    device.clear_sim_ops();
    let more: Vec<u64> = (0..7)
        .map(|_| pool.allocate(16 * KIB, &b).unwrap())
        .collect();
    assert_eq!(device.sim_ops(), vec![]);
    for p in more.into_iter().chain([on_b]) {
        free(&pool, p, 16 * KIB, &b);
    }
    assert!(host_waits(&device.sim_ops()).is_empty());
}

#[test]
fn pool_per_thread_default_stream_records_as_it_frees_and_the_thief_only_waits() {
    let device = Device::simulated(1 << 30);
    let pool = std::sync::Arc::new(one_portion_pool(&device));
    let (p2, d2) = (pool.clone(), device.clone());
    std::thread::spawn(move || {
        let s = d2.per_thread_stream();
        let ptr = p2.allocate(64 * KIB, &s).unwrap();
        free(&*p2, ptr, 64 * KIB, &s);
    })
    .join()
    .unwrap();
    let ops = device.sim_ops();
    let recorded: Vec<u64> = ops
        .iter()
        .filter_map(|op| match op {
            SimOp::Record { event, stream: 2 } => Some(*event),
            _ => None,
        })
        .collect();
    assert_eq!(recorded.len(), 1, "the owner records at its free: {ops:?}");
    device.clear_sim_ops();
    let b = device.new_stream().unwrap();
    let ptr = pool.allocate(64 * KIB, &b).unwrap();
    assert_eq!(
        device.sim_ops(),
        vec![SimOp::Wait {
            stream: b.id().0,
            event: recorded[0]
        }],
        "another thread cannot name that stream: it waits on the owner's event"
    );
    free(&*pool, ptr, 64 * KIB, &b);
}

#[test]
fn fixed_size_reuse_across_streams_records_and_waits() {
    let device = Device::simulated(1 << 30);
    let fixed = FixedSizeResource::new(CudaResource::new(&device), 64 * KIB, 4).unwrap();
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let held: Vec<u64> = (0..4).map(|_| fixed.allocate(1000, &a).unwrap()).collect();
    for &p in &held {
        free(&fixed, p, 1000, &a);
    }
    device.clear_sim_ops();
    let again = fixed.allocate(1000, &a).unwrap();
    assert_eq!(device.sim_ops(), vec![]);
    let on_b = fixed.allocate(1000, &b).unwrap();
    let ops = device.sim_ops();
    assert!(
        matches!(ops[..], [SimOp::Record { stream, event }, SimOp::Wait { stream: w, event: e }]
            if stream == a.id().0 && w == b.id().0 && e == event),
        "{ops:?}"
    );
    assert!(held.contains(&on_b));
    assert_eq!(
        fixed.held_bytes(),
        4 * 64 * KIB,
        "no growth: the blocks were reused"
    );
    free(&fixed, again, 1000, &a);
    free(&fixed, on_b, 1000, &b);
}

#[test]
fn arena_reuses_on_its_stream_freely_and_elsewhere_only_after_defragmenting() {
    let device = Device::simulated(1 << 30);
    let arena = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(4 * MIB),
            superblock_size: MIB,
            dump_on_failure: None,
        },
    )
    .unwrap();
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let big: Vec<u64> = (0..4).map(|_| arena.allocate(MIB, &a).unwrap()).collect();
    device.clear_sim_ops();
    for &p in &big {
        free(&arena, p, MIB, &a);
    }
    let again = arena.allocate(MIB, &a).unwrap();
    free(&arena, again, MIB, &a);
    assert_eq!(
        device.sim_ops(),
        vec![],
        "no ordering for the freeing stream"
    );
    assert_eq!(arena.global_free_bytes(), 0);
    // B finds the global arena empty: defragmentation waits for A, then B gets A's memory.
    let on_b = arena.allocate(3 * MIB, &b).unwrap();
    assert_eq!(
        device.sim_ops(),
        vec![SimOp::StreamSync { stream: a.id().0 }]
    );
    assert_eq!(arena.free_bytes(), MIB);
    free(&arena, on_b, 3 * MIB, &b);
}
