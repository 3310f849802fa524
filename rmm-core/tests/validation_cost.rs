//! What the pool's checked mode (`PoolOptions::validate_deallocations`) costs: the random
//! allocate/free trace of BENCHMARKS.md section A (SplitMix64, seed 42 + thread, each thread on its
//! own stream), on a simulated device, with the check off and on. A measurement, not a check, so
//! it is ignored by default:
//!
//! ```text
//! cargo test --release -p rmm-core --test validation_cost -- --ignored --nocapture
//! ```
//!
//! It prints the best of 5 runs in ns per event (allocation or free) for each case.

use rmm_core::testing::SplitMix64;
use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource, Stream};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const STEPS: usize = 100_000;
const MAX_USAGE: usize = 1 << 30;

/// (slot, size): size 0 frees the slot, else allocates `size` bytes into it.
fn trace(thread: usize, max_size: usize) -> (Vec<(u32, u32)>, usize) {
    let mut rng = SplitMix64::new(42 + thread as u64);
    let (mut live, mut used, mut ops, mut slots) = (Vec::new(), 0usize, Vec::new(), 0u32);
    for _ in 0..STEPS {
        let size = 1 + (rng.next() % max_size as u64) as usize;
        if !live.is_empty() && ((rng.next() & 1) == 1 || used + size > MAX_USAGE) {
            let k = (rng.next() % live.len() as u64) as usize;
            let (slot, bytes): (u32, usize) = live.swap_remove(k);
            ops.push((slot, 0));
            used -= bytes;
        } else {
            ops.push((slots, size as u32));
            live.push((slots, size));
            slots += 1;
            used += size;
        }
    }
    ops.extend(live.iter().map(|&(slot, _)| (slot, 0)));
    (ops, slots as usize)
}

fn run(
    pool: &dyn MemoryResource,
    traces: &[(Vec<(u32, u32)>, usize)],
    streams: &[Stream],
) -> Duration {
    let barrier = Barrier::new(traces.len());
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = traces
            .iter()
            .zip(streams)
            .map(|((ops, slots), stream)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut ptrs = vec![0u64; *slots];
                    let mut sizes = vec![0u32; *slots];
                    barrier.wait();
                    let start = Instant::now();
                    for &(slot, size) in ops {
                        let slot = slot as usize;
                        if size == 0 {
                            // SAFETY: the slot holds a live block of this size from `pool`.
                            unsafe { pool.deallocate(ptrs[slot], sizes[slot] as usize, stream) }
                                .unwrap();
                        } else {
                            ptrs[slot] = pool.allocate(size as usize, stream).unwrap();
                            sizes[slot] = size;
                        }
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let start = spans.iter().map(|s| s.0).min().unwrap();
    let end = spans.iter().map(|s| s.1).max().unwrap();
    end - start
}

#[test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn checked_mode_cost() {
    println!("threads  max size  unchecked ns/op  checked ns/op  ratio");
    for threads in [1usize, 2] {
        for max_size in [1usize << 10, 64 << 10, 1 << 20] {
            let traces: Vec<_> = (0..threads).map(|t| trace(t, max_size)).collect();
            let events: usize = traces.iter().map(|t| t.0.len()).sum();
            let mut best = [Duration::MAX; 2];
            for round in 0..5 {
                for (i, validate) in [false, true].into_iter().enumerate() {
                    // Alternate the order so neither case always runs on a warmer machine.
                    let i = if round % 2 == 0 { i } else { 1 - i };
                    let validate = if round % 2 == 0 { validate } else { !validate };
                    let device = Device::simulated(16 << 30);
                    let pool = PoolResource::new(
                        CudaResource::new(&device),
                        PoolOptions {
                            initial_pool_size: Some(threads * (MAX_USAGE + (256 << 20))),
                            maximum_pool_size: None,
                            validate_deallocations: validate,
                        },
                    )
                    .unwrap();
                    let streams: Vec<_> =
                        (0..threads).map(|_| device.new_stream().unwrap()).collect();
                    run(&pool, &traces, &streams); // warm-up: lists and maps at their size
                    best[i] = best[i].min(run(&pool, &traces, &streams));
                }
            }
            let ns = best.map(|d| d.as_nanos() as f64 / events as f64);
            println!(
                "{threads:7}  {:>8}  {:15.1}  {:13.1}  {:5.2}",
                rmm_core::human_bytes(max_size),
                ns[0],
                ns[1],
                ns[1] / ns[0]
            );
        }
    }
}
