//! Many threads at once on the simulated device: each of 8 threads allocates on its own stream and
//! hands its blocks to the next thread, which frees them on *its* stream. No two live blocks may
//! overlap, and every byte must come back.

mod common;

use common::{Block, Live};
use rmm_core::testing::SplitMix64;
use rmm_core::{
    ArenaOptions, ArenaResource, BinningResource, CudaResource, Device, FixedSizeResource,
    MemoryResource, PoolOptions, PoolResource,
};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};

const THREADS: usize = 8;
const ALLOCATIONS: usize = 3_000;
const MIB: usize = 1 << 20;
/// Blocks in flight between two threads at most (bounds the memory live at once).
const IN_FLIGHT: usize = 64;

/// Runs the hand-over workload with requests of 1 ..= `max_size` bytes.
fn hand_over(r: Arc<dyn MemoryResource>, max_size: usize) {
    let live = Arc::new(Mutex::new(Live::default()));
    let barrier = Arc::new(Barrier::new(THREADS));
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::sync_channel::<Block>(IN_FLIGHT))
        .unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, inbox)| {
            let next = senders[(t + 1) % THREADS].clone();
            let (r, live, barrier) = (r.clone(), live.clone(), barrier.clone());
            std::thread::spawn(move || {
                let stream = r.device().new_stream().unwrap();
                let mut rng = SplitMix64::new(1000 + t as u64);
                let free_one = |b: Block| {
                    live.lock().unwrap().remove_ptr(b.ptr);
                    // SAFETY: a live block of `r`, handed over by the thread that allocated it.
                    unsafe { r.deallocate(b.ptr, b.bytes, &stream) }.unwrap();
                };
                barrier.wait();
                for _ in 0..ALLOCATIONS {
                    let bytes = 1 + rng.below(max_size as u64) as usize;
                    let ptr = r.allocate(bytes, &stream).unwrap();
                    live.lock()
                        .unwrap()
                        .insert(Block {
                            ptr,
                            bytes,
                            stream: t,
                        })
                        .unwrap();
                    let mut block = Block {
                        ptr,
                        bytes,
                        stream: t,
                    };
                    // While the next thread is behind, free what this one was handed (every
                    // thread does, so a full ring still moves).
                    loop {
                        match next.try_send(block) {
                            Ok(()) => break,
                            Err(mpsc::TrySendError::Full(b)) => {
                                block = b;
                                while let Ok(b) = inbox.try_recv() {
                                    free_one(b);
                                }
                                std::thread::yield_now();
                            }
                            Err(mpsc::TrySendError::Disconnected(_)) => {
                                panic!("the next thread stopped early")
                            }
                        }
                    }
                    while let Ok(b) = inbox.try_recv() {
                        free_one(b);
                    }
                }
                drop(next);
                // Keep freeing what the previous thread hands over until it is done too.
                for b in inbox.iter() {
                    free_one(b);
                }
            })
        })
        .collect();
    drop(senders);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(live.lock().unwrap().len(), 0);
}

#[test]
fn pool_under_eight_threads() {
    let device = Device::simulated(8 << 30);
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(16 * MIB, None),
        )
        .unwrap(),
    );
    hand_over(pool.clone(), MIB);
    assert_eq!(pool.free_bytes(), pool.pool_size());
    let size = pool.pool_size();
    assert_eq!(pool.release().unwrap(), size);
}

#[test]
fn arena_under_eight_threads() {
    let device = Device::simulated(8 << 30);
    let arena = Arc::new(
        ArenaResource::new(
            CudaResource::new(&device),
            ArenaOptions {
                arena_size: Some(2 << 30),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    hand_over(arena.clone(), MIB);
    assert_eq!(arena.free_bytes(), 2 << 30);
    arena.defragment().unwrap();
    assert_eq!(arena.largest_free_block(), 2 << 30);
}

#[test]
fn fixed_size_under_eight_threads() {
    let device = Device::simulated(8 << 30);
    let fixed = Arc::new(FixedSizeResource::new(CudaResource::new(&device), 64 << 10, 32).unwrap());
    hand_over(fixed.clone(), 64 << 10);
    assert_eq!(fixed.free_bytes(), fixed.held_bytes());
}

#[test]
fn binning_under_eight_threads() {
    let device = Device::simulated(8 << 30);
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(64 * MIB, None),
        )
        .unwrap(),
    );
    let binning = Arc::new(BinningResource::with_range(pool.clone(), 16, 20).unwrap());
    hand_over(binning.clone(), 2 * MIB);
    drop(binning);
    assert_eq!(pool.free_bytes(), pool.pool_size());
}
