//! The expandable pool on a simulated device: growth in place, coalescing across growth steps,
//! memory given back from the end while live blocks stay, and its fragmentation against the
//! coalescing pool's on the GPU pipeline's real allocation logs.

use rmm_core::adaptors::parse_log;
use rmm_core::testing::fragmentation_at_peak;
use rmm_core::*;

const MIB: usize = 1 << 20;

#[test]
fn a_request_larger_than_any_growth_step_fits_once_enough_is_free() {
    let device = Device::simulated(1 << 30);
    let s = device.new_stream().unwrap();
    // Three growth steps of 64 MiB, freed: the plain pool holds three separate 64 MiB chunks.
    let plain = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(0, None)).unwrap();
    let expandable = PoolResource::expandable(&device, PoolOptions::sized(0, None)).unwrap();
    for pool in [&plain as &dyn MemoryResource, &expandable] {
        let blocks: Vec<u64> = (0..3)
            .map(|_| pool.allocate(64 * MIB, &s).unwrap())
            .collect();
        for b in blocks {
            // SAFETY: allocated above with this size.
            unsafe { pool.deallocate(b, 64 * MIB, &s).unwrap() };
        }
    }
    assert_eq!(
        expandable.largest_free_block(),
        192 * MIB,
        "one block across the steps"
    );
    assert!(plain.largest_free_block() < 192 * MIB);
    let held = expandable.pool_size();
    let big = expandable.allocate(192 * MIB, &s).unwrap();
    assert_eq!(expandable.pool_size(), held, "served without growing");
    unsafe { expandable.deallocate(big, 192 * MIB, &s).unwrap() };
}

#[test]
fn release_gives_back_the_free_end_and_live_blocks_stay() {
    let device = Device::simulated(1 << 30);
    let s = device.new_stream().unwrap();
    let pool = PoolResource::expandable(&device, PoolOptions::sized(0, None)).unwrap();
    let first = pool.allocate(10 * MIB, &s).unwrap();
    let rest: Vec<u64> = (0..4)
        .map(|_| pool.allocate(60 * MIB, &s).unwrap())
        .collect();
    let mapped = pool.upstream().mapped_bytes();
    assert_eq!(mapped, pool.pool_size());
    for b in rest {
        unsafe { pool.deallocate(b, 60 * MIB, &s).unwrap() };
    }
    let released = pool.release().unwrap();
    assert!(
        released > 0 && released % EXPANDABLE_UNIT == 0,
        "{released}"
    );
    assert_eq!(pool.upstream().mapped_bytes(), mapped - released);
    assert_eq!(
        device.memory_info().unwrap().free,
        (1 << 30) - pool.upstream().mapped_bytes()
    );
    // The live block did not move and is still usable; the pool grows again in place.
    assert!(pool.chunks().first().is_some_and(|c| c.0 <= first));
    let again = pool.allocate(100 * MIB, &s).unwrap();
    unsafe {
        pool.deallocate(again, 100 * MIB, &s).unwrap();
        pool.deallocate(first, 10 * MIB, &s).unwrap();
    }
    pool.release().unwrap();
    assert_eq!(pool.upstream().mapped_bytes(), 0);
}

#[test]
fn fragments_less_than_the_pool_and_no_more_than_recorded_on_the_pipeline_logs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/results");
    // The expandable pool's figures when recorded (issue 55: no worse): fragmentation at the
    // peak and MiB held. They were also at most half the coalescing pool's, until the quick
    // bins' size classes (57th session) took the pool's own on the streamed log from 0.556 to
    // 0.325.
    for (log, recorded, held) in [
        ("pipeline-200k-allocation-log.csv", 0.053, 6080),
        ("pipeline-200k-streamed-1GiB-allocation-log.csv", 0.240, 320),
    ] {
        let file = std::fs::File::open(dir.join(log)).unwrap();
        let records = parse_log(std::io::BufReader::new(file)).unwrap();
        // One simulated device each: what one pool holds does not limit the other.
        let device = Device::simulated(16 << 30);
        let plain =
            PoolResource::new(CudaResource::new(&device), PoolOptions::sized(0, None)).unwrap();
        let (p, plain_report) = fragmentation_at_peak(&records, &plain).unwrap();
        assert_eq!(plain_report.failed_allocations, 0);
        let device = Device::simulated(16 << 30);
        let expandable = PoolResource::expandable(&device, PoolOptions::sized(0, None)).unwrap();
        let (e, report) = fragmentation_at_peak(&records, &expandable).unwrap();
        assert_eq!(report.failed_allocations, 0);
        println!(
            "{log}: fragmentation at the peak {:.3} (pool, {} MiB held) vs {:.3} (expandable, {} MiB held)",
            p.at_peak,
            p.pool_size / MIB,
            e.at_peak,
            e.pool_size / MIB
        );
        assert!(e.at_peak < p.at_peak, "{log}: {e:?} vs {p:?}");
        assert!(e.pool_size < p.pool_size, "{log}: {e:?} vs {p:?}");
        assert!(
            e.at_peak <= recorded + 0.0005 && e.pool_size <= held * MIB,
            "{log}: {e:?}, recorded {recorded} with {held} MiB held"
        );
    }
}
