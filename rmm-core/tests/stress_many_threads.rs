//! The hand-over stress test (`rmm_core::testing::stress`) with many more threads than cores, on a
//! simulated device barely larger than the workload can ever have live. With 32 or 64 threads on
//! a few cores, threads are preempted mid-steal all the time, which provokes on two cores the races
//! that eight threads showed only on sixteen: a thread that finds every list empty because others
//! hold their blocks at that moment, blocks stolen into a list and stolen again before the thief
//! takes its own, a new chunk taken by other streams before the thread that grew it. Each of these
//! made the pool or the fixed-size resource grow although free memory would have served, until the
//! device refused, and then fail while holding plenty of free memory.
//!
//! Here the device holds what the workload can have live at most (fixed-size), or so (pool), so
//! growing instead of reusing runs into the device's limit, and what the resource holds at the end
//! is checked against what was live at once.

use rmm_core::testing::stress::{self, HandOverStats};
use rmm_core::{
    BinningResource, CudaResource, Device, FixedSizeResource, MemoryResource, PoolOptions,
    PoolResource,
};
use std::sync::Arc;

const MIB: usize = 1 << 20;
/// Rounds of each scenario (each on a fresh device): the races are likely, not certain, per round.
const ROUNDS: usize = 4;

fn run(
    r: Arc<dyn MemoryResource>,
    threads: usize,
    allocations: usize,
    max: usize,
) -> HandOverStats {
    stress::hand_over_measured(r, threads, allocations, max)
        .unwrap_or_else(|e| panic!("{threads} threads: {e}"))
}

#[test]
fn pool_reuses_other_streams_memory_before_growing() {
    let (threads, max) = (64, MIB / 2);
    // What can be live at most: the pool may take that much from the device, no more.
    let capacity = stress::most_live_blocks(threads) * max;
    for _ in 0..ROUNDS {
        let device = Device::simulated(capacity);
        let pool = Arc::new(
            PoolResource::new(
                CudaResource::new(&device),
                PoolOptions::sized(64 * MIB, None),
            )
            .unwrap(),
        );
        let seen = run(pool.clone(), threads, 1_500, max);
        // The pool doubles when it grows; more than twice what was ever needed (requests rounded
        // to 256 bytes, plus one request per thread between the workload's count and the pool's)
        // means it grew while free memory would have served.
        let needed = seen.peak_live_bytes + seen.peak_live_blocks * 256 + threads * max;
        assert!(
            pool.pool_size() <= 4 * needed,
            "the pool grew to {} MiB with at most {} MiB live",
            pool.pool_size() / MIB,
            needed / MIB
        );
        let size = pool.pool_size();
        assert_eq!(pool.free_bytes(), size);
        assert_eq!(
            pool.release().unwrap(),
            size,
            "release gives every chunk back"
        );
    }
}

#[test]
fn fixed_size_grows_only_when_no_block_is_free() {
    let (threads, block, per_chunk) = (64, 64 << 10, 32);
    // Every block that can be live at once, and one chunk: a resource that grows only when no
    // block is free anywhere never needs more.
    let capacity = (stress::most_live_blocks(threads) + per_chunk) * block;
    for _ in 0..ROUNDS {
        let device = Device::simulated(capacity);
        let fixed =
            Arc::new(FixedSizeResource::new(CudaResource::new(&device), block, per_chunk).unwrap());
        let seen = run(fixed.clone(), threads, 1_500, block);
        // It grows (by a chunk) only when every block it holds is live: with the workload's
        // count, plus one per thread inside allocate or deallocate.
        let bound = (seen.peak_live_blocks + threads + per_chunk) * block;
        assert!(
            fixed.held_bytes() <= bound,
            "{} blocks held with at most {} live",
            fixed.held_bytes() / block,
            seen.peak_live_blocks + threads
        );
        assert_eq!(fixed.free_bytes(), fixed.held_bytes());
    }
}

#[test]
fn binning_over_a_pool_never_fails_while_memory_is_free() {
    // The scenario that failed on sixteen cores with eight threads (bins of 64 KiB .. 1 MiB over a
    // pool, requests up to 2 MiB, an 8 GiB device), with 32 threads.
    let threads = 32;
    for _ in 0..ROUNDS {
        let device = Device::simulated(8 << 30);
        let pool = Arc::new(
            PoolResource::new(
                CudaResource::new(&device),
                PoolOptions::sized(64 * MIB, None),
            )
            .unwrap(),
        );
        let binning = Arc::new(BinningResource::with_range(pool.clone(), 16, 20).unwrap());
        run(binning.clone(), threads, 1_500, 2 * MIB);
        drop(binning);
        assert_eq!(pool.free_bytes(), pool.pool_size());
    }
}
