//! Error paths of the fixed-size, binning and arena resources: what is refused, and what the
//! out-of-memory errors say. (The pool's are in `pool_properties.rs`.)

use rmm_core::{
    ArenaOptions, ArenaResource, BinningResource, CudaResource, Device, FixedSizeResource,
    MemoryError, MemoryResource, SharedResource, Stream, TrackingAdaptor,
};
use std::sync::Arc;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, s: &Stream) {
    // SAFETY: tests free only blocks they allocated from `r` with these sizes.
    unsafe { r.deallocate(ptr, bytes, s) }.unwrap();
}

#[test]
fn fixed_size_refuses_requests_larger_than_its_block() {
    let device = Device::simulated(1 << 30);
    let fixed = FixedSizeResource::new(CudaResource::new(&device), MIB, 4).unwrap();
    let s = device.new_stream().unwrap();
    let err = fixed.allocate(MIB + 1, &s).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!((oom.requested, oom.maximum), (MIB + 1, Some(MIB)));
    assert!(
        err.to_string()
            .contains("larger than the block size 1.00 MiB"),
        "{err}"
    );
    // Exactly the block size is fine.
    let p = fixed.allocate(MIB, &s).unwrap();
    free(&fixed, p, MIB, &s);
    assert!(matches!(
        unsafe { fixed.deallocate(p, 2 * MIB, &s) },
        Err(MemoryError::InvalidDeallocation(_))
    ));
}

#[test]
fn fixed_size_takes_fewer_blocks_when_the_upstream_refuses_then_says_so() {
    // 1 MiB device: 8 blocks of 256 KiB (2 MiB) are refused, 4 are granted.
    let device = Device::simulated(MIB);
    let fixed = FixedSizeResource::new(CudaResource::new(&device), 256 * KIB, 8).unwrap();
    assert_eq!(fixed.held_bytes(), MIB);
    let s = device.new_stream().unwrap();
    let held: Vec<u64> = (0..4)
        .map(|_| fixed.allocate(100 * KIB, &s).unwrap())
        .collect();
    let err = fixed.allocate(100 * KIB, &s).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!((oom.held, oom.free), (Some(MIB), Some(0)));
    assert!(
        err.to_string().contains("refused a block of 256.00 KiB"),
        "{err}"
    );
    for p in held {
        free(&fixed, p, 100 * KIB, &s);
    }
    assert_eq!(fixed.free_bytes(), MIB);
}

#[test]
fn a_fixed_size_resource_needs_a_block_size() {
    let device = Device::simulated(MIB);
    assert!(matches!(
        FixedSizeResource::new(CudaResource::new(&device), 0, 1),
        Err(MemoryError::InvalidArgument(_))
    ));
}

#[test]
fn arena_exhaustion_defragments_retries_and_then_reports_with_a_dump() {
    let device = Device::simulated(1 << 30);
    let dump = std::env::temp_dir().join(format!("rmm_arena_dump_{}.log", std::process::id()));
    let arena = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(8 * MIB),
            superblock_size: MIB,
            dump_on_failure: Some(dump.clone()),
        },
    )
    .unwrap();
    let (a, b) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    // Fill the arena from A, free half of it on A (it stays in A's arena).
    let blocks: Vec<u64> = (0..8).map(|_| arena.allocate(MIB, &a).unwrap()).collect();
    for &p in blocks.iter().step_by(2) {
        free(&arena, p, MIB, &a);
    }
    assert_eq!(arena.global_free_bytes(), 0);
    // One MiB fits after defragmentation (B gets A's freed memory) ...
    let small = arena.allocate(MIB, &b).unwrap();
    assert!(blocks.iter().step_by(2).any(|&p| p == small));
    // ... two do not: the free memory is in 1 MiB pieces.
    let err = arena.allocate(2 * MIB, &b).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(oom.held, Some(8 * MIB));
    assert_eq!(oom.free, Some(3 * MIB));
    assert_eq!(oom.largest_free_block, Some(MIB));
    assert_eq!(oom.maximum, Some(8 * MIB));
    let text = err.to_string();
    assert!(
        text.contains("no room in the arena after defragmentation"),
        "{text}"
    );
    assert!(text.contains("state written to"), "{text}");
    let report = std::fs::read_to_string(&dump).unwrap();
    assert!(
        report.contains("out of memory allocating 2.00 MiB"),
        "{report}"
    );
    assert!(report.contains("fragmentation 66.67%"), "{report}");
    std::fs::remove_file(&dump).unwrap();
    // Too large for the arena at all.
    let err = arena.allocate(9 * MIB, &b).unwrap_err();
    assert!(
        err.to_string().contains("larger than the whole arena"),
        "{err}"
    );
    free(&arena, small, MIB, &b);
    for &p in blocks.iter().skip(1).step_by(2) {
        free(&arena, p, MIB, &a);
    }
    arena.defragment().unwrap();
    assert_eq!(arena.largest_free_block(), 8 * MIB);
}

#[test]
fn arena_arguments_and_foreign_pointers_are_refused() {
    let device = Device::simulated(1 << 30);
    let small = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(MIB / 2),
            ..Default::default()
        },
    );
    assert!(matches!(small, Err(MemoryError::InvalidArgument(_))));
    let arena = ArenaResource::new(
        CudaResource::new(&device),
        ArenaOptions {
            arena_size: Some(4 * MIB),
            ..Default::default()
        },
    )
    .unwrap();
    let s = device.default_stream();
    let err = unsafe { arena.deallocate(0x1000, 256, &s) }.unwrap_err();
    assert!(matches!(err, MemoryError::InvalidDeallocation(_)), "{err}");
    // The upstream refusing the arena itself is an out-of-memory error.
    let err = ArenaResource::new(
        CudaResource::new(&Device::simulated(MIB)),
        ArenaOptions {
            arena_size: Some(4 * MIB),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
}

#[test]
fn binning_routes_by_size_and_refuses_duplicate_bins() {
    let device = Device::simulated(8 << 30);
    let upstream = Arc::new(TrackingAdaptor::new(CudaResource::new(&device), false));
    let mut binning = BinningResource::new(upstream.clone());
    binning.add_bin(256 * KIB, None).unwrap();
    let custom = Arc::new(TrackingAdaptor::new(CudaResource::new(&device), false));
    binning
        .add_bin(64 * KIB, Some(custom.clone() as SharedResource))
        .unwrap();
    assert_eq!(binning.bin_sizes(), vec![64 * KIB, 256 * KIB]);
    assert!(matches!(
        binning.add_bin(64 * KIB, None),
        Err(MemoryError::InvalidArgument(_))
    ));
    let s = device.new_stream().unwrap();
    // The default bin preallocated one chunk of 128 blocks from the upstream.
    assert_eq!(upstream.outstanding_allocations().len(), 1);
    let a = binning.allocate(10 * KIB, &s).unwrap(); // custom 64 KiB bin
    let b = binning.allocate(100 * KIB, &s).unwrap(); // fixed 256 KiB bin
    let c = binning.allocate(5 * MIB, &s).unwrap(); // upstream
    assert_eq!(custom.outstanding_allocations().len(), 1);
    assert_eq!(upstream.outstanding_allocations().len(), 2);
    assert_eq!(
        upstream
            .outstanding_allocations()
            .iter()
            .find(|r| r.ptr == c)
            .unwrap()
            .bytes,
        5 * MIB
    );
    for (p, n) in [(a, 10 * KIB), (b, 100 * KIB), (c, 5 * MIB)] {
        free(&binning, p, n, &s);
    }
    assert_eq!(custom.outstanding_allocations().len(), 0);
    // A bin on another device is refused.
    let elsewhere: SharedResource = Arc::new(CudaResource::new(&Device::simulated(MIB)));
    assert!(binning.add_bin(MIB, Some(elsewhere)).is_err());
    assert!(BinningResource::with_range(upstream, 22, 18).is_err());
}
