//! The hand-over stress test, for any resource on any device: `threads` threads each allocate on
//! their own stream and hand every block to the next thread, which frees it on *its* stream. No two
//! live blocks may overlap; at the end none may be left.

use super::live_set::LiveSet;
use super::SplitMix64;
use crate::MemoryResource;
use parking_lot::Mutex;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};

const STOPPED_EARLY: &str = "the next thread stopped early";

/// Blocks in flight between two threads at most (bounds the memory live at once).
pub const IN_FLIGHT: usize = 64;

/// The most blocks a resource can have live at once under [`hand_over`] with `threads` threads:
/// each thread's queue to the next, the block it is trying to hand on, and the one it is freeing.
pub fn most_live_blocks(threads: usize) -> usize {
    threads * (IN_FLIGHT + 2)
}

struct Block {
    ptr: u64,
    bytes: usize,
}

/// What a hand-over run saw.
#[derive(Debug, Clone, Copy)]
pub struct HandOverStats {
    /// The most bytes live at once (as requested), over all threads.
    pub peak_live_bytes: usize,
    /// The most blocks live at once, over all threads.
    pub peak_live_blocks: usize,
}

/// Runs the hand-over workload: `allocations` requests of 1 ..= `max_size` bytes per thread.
pub fn hand_over(
    r: Arc<dyn MemoryResource>,
    threads: usize,
    allocations: usize,
    max_size: usize,
) -> Result<(), String> {
    hand_over_measured(r, threads, allocations, max_size).map(|_| ())
}

/// [`hand_over`], returning what the run saw (to bound what the resource held against it).
pub fn hand_over_measured(
    r: Arc<dyn MemoryResource>,
    threads: usize,
    allocations: usize,
    max_size: usize,
) -> Result<HandOverStats, String> {
    let live = Arc::new(Mutex::new(LiveSet::default()));
    let barrier = Arc::new(Barrier::new(threads));
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
        .map(|_| mpsc::sync_channel::<Block>(IN_FLIGHT))
        .unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, inbox)| {
            let next = senders[(t + 1) % threads].clone();
            let (r, live, barrier) = (r.clone(), live.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let stream = r
                    .device()
                    .new_stream()
                    .map_err(|e| format!("new stream: {e}"))?;
                let mut rng = SplitMix64::new(1000 + t as u64);
                let free_one = |b: Block| -> Result<(), String> {
                    live.lock().remove(b.ptr, b.bytes);
                    // SAFETY: a live block of `r`, handed over by the thread that allocated it.
                    unsafe { r.deallocate(b.ptr, b.bytes, &stream) }
                        .map_err(|e| format!("deallocate: {e}"))
                };
                barrier.wait();
                for _ in 0..allocations {
                    let bytes = 1 + rng.below(max_size as u64) as usize;
                    let ptr = r
                        .allocate(bytes, &stream)
                        .map_err(|e| format!("allocate({bytes}): {e}"))?;
                    live.lock().insert(ptr, bytes)?;
                    let mut block = Block { ptr, bytes };
                    // While the next thread is behind, free what this one was handed (every
                    // thread does, so a full ring still moves).
                    loop {
                        match next.try_send(block) {
                            Ok(()) => break,
                            Err(mpsc::TrySendError::Full(b)) => {
                                block = b;
                                while let Ok(b) = inbox.try_recv() {
                                    free_one(b)?;
                                }
                                std::thread::yield_now();
                            }
                            Err(mpsc::TrySendError::Disconnected(_)) => {
                                return Err(STOPPED_EARLY.into())
                            }
                        }
                    }
                    while let Ok(b) = inbox.try_recv() {
                        free_one(b)?;
                    }
                }
                drop(next);
                // Keep freeing what the previous thread hands over until it is done too.
                for b in inbox.iter() {
                    free_one(b)?;
                }
                stream
                    .synchronize()
                    .map_err(|e| format!("synchronize: {e}"))
            })
        })
        .collect();
    drop(senders);
    // Report the root cause: a thread that failed on its own, not one that only saw its
    // neighbour stop.
    let mut errors: Vec<String> = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("a worker thread panicked".into()),
        }
    }
    errors.sort_by_key(|e| e == STOPPED_EARLY);
    if let Some(first) = errors.into_iter().next() {
        return Err(first);
    }
    let live = live.lock();
    let left = live.len();
    if left == 0 {
        Ok(HandOverStats {
            peak_live_bytes: live.peak_bytes(),
            peak_live_blocks: live.peak_blocks(),
        })
    } else {
        Err(format!(
            "{left} blocks still live after every thread finished"
        ))
    }
}

const THREADS: usize = 8;
const ALLOCATIONS: usize = 3_000;
const MIB: usize = 1 << 20;

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// A pool under 8 threads: afterwards every byte is free and `release` returns the whole pool.
pub fn pool_under_eight_threads(device: &crate::Device) -> Result<(), String> {
    use crate::{CudaResource, PoolOptions, PoolResource};
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(device),
            PoolOptions::sized(16 * MIB, None),
        )
        .map_err(|e| e.to_string())?,
    );
    hand_over(pool.clone(), THREADS, ALLOCATIONS, MIB)?;
    check(pool.free_bytes() == pool.pool_size(), || {
        format!("{} of {} bytes free", pool.free_bytes(), pool.pool_size())
    })?;
    let size = pool.pool_size();
    let released = pool.release().map_err(|e| e.to_string())?;
    check(released == size, || {
        format!("release gave back {released} of {size} bytes")
    })
}

/// An arena under 8 threads: afterwards the arena is whole again after defragmentation.
pub fn arena_under_eight_threads(device: &crate::Device) -> Result<(), String> {
    use crate::{ArenaOptions, ArenaResource, CudaResource};
    let size = 2usize << 30;
    let options = ArenaOptions {
        arena_size: Some(size),
        ..Default::default()
    };
    let arena = Arc::new(
        ArenaResource::new(CudaResource::new(device), options).map_err(|e| e.to_string())?,
    );
    hand_over(arena.clone(), THREADS, ALLOCATIONS, MIB)?;
    check(arena.free_bytes() == size, || {
        format!("{} of {size} bytes free", arena.free_bytes())
    })?;
    arena.defragment().map_err(|e| e.to_string())?;
    check(arena.largest_free_block() == size, || {
        format!(
            "largest free block {} after defragment",
            arena.largest_free_block()
        )
    })
}

/// Fixed-size blocks under 8 threads: afterwards every block is free.
pub fn fixed_size_under_eight_threads(device: &crate::Device) -> Result<(), String> {
    use crate::{CudaResource, FixedSizeResource};
    let fixed = Arc::new(
        FixedSizeResource::new(CudaResource::new(device), 64 << 10, 32)
            .map_err(|e| e.to_string())?,
    );
    hand_over(fixed.clone(), THREADS, ALLOCATIONS, 64 << 10)?;
    check(fixed.free_bytes() == fixed.held_bytes(), || {
        format!(
            "{} of {} bytes free",
            fixed.free_bytes(),
            fixed.held_bytes()
        )
    })
}

/// Binning over a pool under 8 threads: once the bins are dropped, the pool is wholly free.
pub fn binning_under_eight_threads(device: &crate::Device) -> Result<(), String> {
    use crate::{BinningResource, CudaResource, PoolOptions, PoolResource};
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(device),
            PoolOptions::sized(64 * MIB, None),
        )
        .map_err(|e| e.to_string())?,
    );
    let binning =
        Arc::new(BinningResource::with_range(pool.clone(), 16, 20).map_err(|e| e.to_string())?);
    hand_over(binning.clone(), THREADS, ALLOCATIONS, 2 * MIB)?;
    drop(binning);
    check(pool.free_bytes() == pool.pool_size(), || {
        format!("{} of {} bytes free", pool.free_bytes(), pool.pool_size())
    })
}
