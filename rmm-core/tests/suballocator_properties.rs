//! Property tests of the fixed-size, arena and binning resources and of the limiting and
//! statistics adaptors, over random allocate/free traces on several streams.

mod common;

use common::{free_all, run, steps, Live};
use proptest::prelude::*;
use rmm_core::{
    aligned_size, ArenaOptions, ArenaResource, BinningResource, CudaResource, Device,
    FixedSizeResource, LimitingAdaptor, PoolOptions, PoolResource, StatisticsAdaptor, Stream,
};
use std::cell::Cell;
use std::sync::Arc;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn streams(device: &Device, n: usize) -> Vec<Stream> {
    (0..n).map(|_| device.new_stream().unwrap()).collect()
}

fn fail(e: String) -> TestCaseError {
    TestCaseError::fail(e)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Fixed-size blocks on a small device: growth halves until refused; nothing overlaps; every
    /// block comes back.
    #[test]
    fn fixed_size_random_traces(trace in steps(64 * KIB, 3, 300)) {
        let device = Device::simulated(4 * MIB);
        let fixed = FixedSizeResource::new(CudaResource::new(&device), 64 * KIB, 8).unwrap();
        let s = streams(&device, 3);
        let (mut live, _) = run(&fixed, &s, &trace, true, |_| Ok(())).map_err(fail)?;
        prop_assert!(fixed.held_bytes() <= 4 * MIB);
        free_all(&fixed, &s, &mut live).map_err(fail)?;
        prop_assert_eq!(fixed.free_bytes(), fixed.held_bytes());
    }

    /// The arena never hands out overlapping blocks, all memory comes back, and defragmentation
    /// coalesces it into the whole arena again.
    #[test]
    fn arena_random_traces(trace in steps(3 * MIB, 3, 300)) {
        let device = Device::simulated(1 << 30);
        let arena = ArenaResource::new(
            CudaResource::new(&device),
            ArenaOptions { arena_size: Some(48 * MIB), superblock_size: MIB, dump_on_failure: None },
        )
        .unwrap();
        let s = streams(&device, 3);
        let (mut live, _) = run(&arena, &s, &trace, true, |_| Ok(())).map_err(fail)?;
        free_all(&arena, &s, &mut live).map_err(fail)?;
        prop_assert_eq!(arena.free_bytes(), 48 * MIB);
        arena.defragment().unwrap();
        prop_assert_eq!(arena.global_free_bytes(), 48 * MIB);
        prop_assert_eq!(arena.largest_free_block(), 48 * MIB);
    }

    /// Binning over a pool: small requests in bins, large ones in the pool; all of it returns.
    #[test]
    fn binning_random_traces(trace in steps(8 * MIB, 2, 200)) {
        // The default bins take 128 blocks each up front (992 MiB over 2^18..2^22, as in RMM).
        let device = Device::simulated(8 << 30);
        let pool = Arc::new(PoolResource::new(CudaResource::new(&device), PoolOptions::sized(16 * MIB, None)).unwrap());
        let binning = BinningResource::with_range(pool.clone(), 18, 22).unwrap();
        let s = streams(&device, 2);
        let (mut live, refusals) = run(&binning, &s, &trace, false, |_| Ok(())).map_err(fail)?;
        prop_assert_eq!(refusals, 0);
        free_all(&binning, &s, &mut live).map_err(fail)?;
        drop(binning);
        prop_assert_eq!(pool.free_bytes(), pool.pool_size());
    }

    /// The limiting adaptor's count is the live bytes (rounded as handed out), never past the limit.
    #[test]
    fn limiting_counts_the_live_bytes(trace in steps(2 * MIB, 2, 300)) {
        let device = Device::simulated(1 << 30);
        let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(8 * MIB, None)).unwrap();
        let limiting = LimitingAdaptor::new(pool, 6 * MIB);
        let s = streams(&device, 2);
        let (mut live, _) = run(&limiting, &s, &trace, true, |live: &Live| {
            let want: usize = live.blocks().map(|b| aligned_size(b.bytes)).sum();
            if limiting.allocated_bytes() != want {
                return Err(format!("limiting counts {}, live is {want}", limiting.allocated_bytes()));
            }
            if want > 6 * MIB {
                return Err(format!("{want} bytes live past the limit"));
            }
            Ok(())
        })
        .map_err(fail)?;
        free_all(&limiting, &s, &mut live).map_err(fail)?;
        prop_assert_eq!(limiting.allocated_bytes(), 0);
    }

    /// Statistics: current is the live sum, peak its running maximum, total every byte handed out.
    #[test]
    fn statistics_follow_the_live_bytes(trace in steps(2 * MIB, 2, 300)) {
        let device = Device::simulated(1 << 30);
        let stats = StatisticsAdaptor::new(CudaResource::new(&device));
        let s = streams(&device, 2);
        let peak = Cell::new(0i64);
        let (mut live, _) = run(&stats, &s, &trace, false, |live: &Live| {
            let current = live.bytes() as i64;
            peak.set(peak.get().max(current));
            let b = stats.bytes_counter();
            let n = stats.allocations_counter();
            if b.value != current || b.peak != peak.get() || n.value != live.len() as i64 {
                return Err(format!("counters {b:?} {n:?}, live {current} bytes in {}", live.len()));
            }
            Ok(())
        })
        .map_err(fail)?;
        let handed_out: i64 = trace
            .iter()
            .map(|st| match st {
                common::Step::Alloc { bytes, .. } => *bytes as i64,
                _ => 0,
            })
            .sum();
        prop_assert_eq!(stats.bytes_counter().total, handed_out);
        free_all(&stats, &s, &mut live).map_err(fail)?;
        prop_assert_eq!(stats.bytes_counter().value, 0);
        prop_assert_eq!(stats.allocations_counter().value, 0);
    }
}
