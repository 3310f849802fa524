//! The adaptors on a simulated device: what each one adds, and its error paths.

use rmm_core::adaptors::{parse_log, replay_file, replay_log, LogAction, LOG_HEADER};
use rmm_core::{
    reinitialize, AlignedAdaptor, CudaResource, Device, FailureCallbackAdaptor, LimitingAdaptor,
    LoggingAdaptor, ManagedResource, MemoryError, MemoryResource, PoolOptions, PoolResource,
    PrefetchAdaptor, ReinitializeOptions, SharedResource, StatisticsAdaptor, Stream,
    TrackingAdaptor,
};
use rmm_cuda::SimOp;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, s: &Stream) {
    // SAFETY: tests free only blocks they allocated from `r` with these sizes.
    unsafe { r.deallocate(ptr, bytes, s) }.unwrap();
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rmm_core_{}_{name}", std::process::id()))
}

#[test]
fn limiting_refuses_past_the_limit_and_says_so() {
    let device = Device::simulated(1 << 30);
    let limited = LimitingAdaptor::new(CudaResource::new(&device), MIB);
    let s = device.default_stream();
    let a = limited.allocate(700 * KIB, &s).unwrap();
    assert_eq!(limited.allocated_bytes(), 700 * KIB);
    let err = limited.allocate(400 * KIB, &s).unwrap_err();
    let MemoryError::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(
        (oom.held, oom.free, oom.maximum),
        (Some(700 * KIB), Some(324 * KIB), Some(MIB))
    );
    assert!(err.to_string().contains("byte limit of 1.00 MiB"), "{err}");
    assert_eq!(
        limited.allocated_bytes(),
        700 * KIB,
        "a refusal reserves nothing"
    );
    free(&limited, a, 700 * KIB, &s);
    let b = limited.allocate(MIB, &s).unwrap();
    free(&limited, b, MIB, &s);
    assert_eq!(limited.allocated_bytes(), 0);
}

#[test]
fn statistics_scopes_push_and_pop_like_rmm() {
    let device = Device::simulated(1 << 30);
    let stats = StatisticsAdaptor::new(CudaResource::new(&device));
    let s = device.default_stream();
    let a = stats.allocate(1000, &s).unwrap();
    let outer = stats.push_counters();
    assert_eq!((outer.bytes.value, outer.bytes.peak), (1000, 1000));
    assert_eq!(stats.bytes_counter().value, 0, "a new scope starts at zero");
    let b = stats.allocate(500, &s).unwrap();
    let c = stats.allocate(300, &s).unwrap();
    free(&stats, b, 500, &s);
    let inner = stats.pop_counters().unwrap();
    assert_eq!(
        (inner.bytes.value, inner.bytes.peak, inner.bytes.total),
        (300, 800, 800)
    );
    assert_eq!(inner.allocations.total, 2);
    let now = stats.statistics();
    assert_eq!(
        (now.bytes.value, now.bytes.peak, now.bytes.total),
        (1300, 1800, 1800)
    );
    assert_eq!(now.allocations.value, 2);
    assert!(stats.pop_counters().is_err(), "the outermost scope stays");
    assert_eq!(stats.depth(), 1);
    free(&stats, a, 1000, &s);
    free(&stats, c, 300, &s);
    assert_eq!(stats.bytes_counter().value, 0);
}

#[test]
fn tracking_lists_leaks_with_their_stacks_and_refuses_bad_frees() {
    let device = Device::simulated(1 << 30);
    let tracking = TrackingAdaptor::new(CudaResource::new(&device), true);
    let s = device.new_stream().unwrap();
    assert!(tracking
        .leak_report()
        .contains("no outstanding allocations"));
    let a = tracking.allocate(1234, &s).unwrap();
    let b = tracking.allocate(99, &s).unwrap();
    assert_eq!(tracking.allocated_bytes(), 1333);
    free(&tracking, b, 99, &s);
    let leaks = tracking.outstanding_allocations();
    assert_eq!(leaks.len(), 1);
    assert_eq!(
        (leaks[0].ptr, leaks[0].bytes, leaks[0].stream),
        (a, 1234, s.id())
    );
    assert!(leaks[0].backtrace.is_some());
    let report = tracking.leak_report();
    assert!(report.contains("1 outstanding allocations"), "{report}");
    assert!(report.contains(&format!("{a:#x}: 1234 bytes")), "{report}");
    let err = unsafe { tracking.deallocate(a, 1000, &s) }.unwrap_err();
    assert!(
        err.to_string().contains("allocated with 1234 bytes"),
        "{err}"
    );
    let err = unsafe { tracking.deallocate(b, 99, &s) }.unwrap_err();
    assert!(
        err.to_string().contains("not an outstanding allocation"),
        "{err}"
    );
    free(&tracking, a, 1234, &s);
    assert_eq!(tracking.allocated_bytes(), 0);
}

#[test]
fn tracking_keeps_bad_frees_from_an_unchecked_pool() {
    let device = Device::simulated(1 << 30);
    // The pool's own checked mode off, as in release builds: the adaptor is the only guard.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions {
            validate_deallocations: false,
            ..PoolOptions::sized(4 * MIB, Some(4 * MIB))
        },
    )
    .unwrap();
    let tracking = TrackingAdaptor::new(pool, false);
    let s = device.new_stream().unwrap();
    let a = tracking.allocate(3000, &s).unwrap();
    let b = tracking.allocate(256, &s).unwrap();
    let free_before = tracking.upstream().free_bytes();
    let refused = |ptr: u64, bytes: usize, what: &str| {
        // SAFETY: each of these frees is wrong on purpose; the adaptor must stop it.
        let err = unsafe { tracking.deallocate(ptr, bytes, &s) }.unwrap_err();
        assert!(
            matches!(&err, MemoryError::InvalidDeallocation(m) if m.contains(what)),
            "{err}"
        );
        assert!(
            err.to_string().contains("did not pass the free on"),
            "{err}"
        );
    };
    refused(a, 300, "allocated with 3000 bytes");
    refused(a, 0, "allocated with 3000 bytes");
    refused(a + 256, 256, "not an outstanding allocation");
    refused(0, 256, "not an outstanding allocation");
    free(&tracking, b, 256, &s);
    refused(b, 256, "freed already");
    assert_eq!(
        tracking.upstream().free_bytes(),
        free_before + 256,
        "the pool saw the one good free only"
    );
    // Nothing is corrupted: the pool hands out distinct blocks and takes everything back.
    let c = tracking.allocate(256, &s).unwrap();
    let d = tracking.allocate(256, &s).unwrap();
    assert!(c != d && c != a && d != a);
    for (p, n) in [(a, 3000), (c, 256), (d, 256)] {
        free(&tracking, p, n, &s);
    }
    assert_eq!(tracking.allocated_bytes(), 0);
    assert_eq!(tracking.upstream().free_bytes(), 4 * MIB);
    // Zero bytes: the null pointer comes and goes without a record.
    assert_eq!(tracking.allocate(0, &s).unwrap(), 0);
    free(&tracking, 0, 0, &s);
    assert!(tracking.outstanding_allocations().is_empty());
}

/// A writer whose bytes the test can read back.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn logging_writes_one_csv_line_per_event_and_the_log_replays() {
    let device = Device::simulated(1 << 30);
    let buf = SharedBuf::default();
    let logging = LoggingAdaptor::with_writer(
        LimitingAdaptor::new(CudaResource::new(&device), 4 * MIB),
        buf.clone(),
    )
    .unwrap();
    let (s1, s2) = (device.new_stream().unwrap(), device.new_stream().unwrap());
    let a = logging.allocate(3 * MIB, &s1).unwrap();
    assert!(logging.allocate(2 * MIB, &s2).is_err());
    let b = logging.allocate(KIB, &s2).unwrap();
    free(&logging, a, 3 * MIB, &s1);
    logging.flush().unwrap();
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], LOG_HEADER);
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[1].ends_with(&format!(",allocate,{a:#x},{},{:#x}", 3 * MIB, s1.id().0)),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains(",allocate failure,(nil),2097152,"),
        "{}",
        lines[2]
    );
    assert!(
        lines[4].contains(&format!(",free,{a:#x},{}", 3 * MIB)),
        "{}",
        lines[4]
    );
    let records = parse_log(text.as_bytes()).unwrap();
    assert_eq!(records[1].action, LogAction::AllocateFailure);

    // Replay against a pool: the same two allocations, one free, one block left to free.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(8 * MIB, None),
    )
    .unwrap();
    let report = replay_log(&records, &pool).unwrap();
    assert_eq!(
        (
            report.allocations,
            report.frees,
            report.logged_failures,
            report.left_live
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(report.peak_bytes, 3 * MIB + KIB);
    assert_eq!(
        pool.free_bytes(),
        pool.pool_size(),
        "the replay frees what the log left"
    );
    free(&logging, b, KIB, &s2);
}

#[test]
fn a_log_file_is_flushed_on_drop_and_replayed_from_disk() {
    let device = Device::simulated(1 << 30);
    let path = temp_path("log.csv");
    {
        let logging = LoggingAdaptor::new(CudaResource::new(&device), &path).unwrap();
        assert_eq!(logging.path(), Some(path.as_path()));
        let s = device.new_stream().unwrap();
        let ptrs: Vec<u64> = (1..=20)
            .map(|i| logging.allocate(i * 1000, &s).unwrap())
            .collect();
        for (i, p) in ptrs.into_iter().enumerate() {
            free(&logging, p, (i + 1) * 1000, &s);
        }
    }
    let pool =
        PoolResource::new(CudaResource::new(&device), PoolOptions::sized(MIB, None)).unwrap();
    let report = replay_file(&path, &pool).unwrap();
    assert_eq!(
        (report.allocations, report.frees, report.unmatched_frees),
        (20, 20, 0)
    );
    // A log RMM wrote replays too, including frees of memory allocated before it began.
    std::fs::write(
        &path,
        format!(
            "{LOG_HEADER}\n140,12:00:00.000001,allocate,0x7f1200000000,4096,0x0\n\
                 140,12:00:00.000002,free,0x7f1200000000,4096,0x0\n\
                 141,12:00:00.000003,free,0x7f9900000000,512,0x2\n"
        ),
    )
    .unwrap();
    let report = replay_file(&path, &pool).unwrap();
    assert_eq!(
        (report.allocations, report.frees, report.unmatched_frees),
        (1, 1, 1)
    );
    std::fs::remove_file(&path).unwrap();
    assert!(
        replay_file(&path, &pool).is_err(),
        "a missing log is an error"
    );
    assert!(LoggingAdaptor::new(CudaResource::new(&device), "/nonexistent/dir/log.csv").is_err());
}

#[test]
fn failure_callback_retries_after_freeing_memory() {
    let device = Device::simulated(1 << 30);
    let pool = Arc::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(MIB, Some(MIB)),
        )
        .unwrap(),
    );
    let s = device.default_stream();
    // A cache holding most of the pool, given back by the callback.
    let cached = Mutex::new(Some(pool.allocate(768 * KIB, &s).unwrap()));
    let calls = AtomicUsize::new(0);
    let retrying = FailureCallbackAdaptor::new(pool.clone(), |bytes, oom| {
        calls.fetch_add(1, Ordering::Relaxed);
        assert_eq!(oom.requested, bytes);
        match cached.lock().unwrap().take() {
            Some(p) => {
                free(&*pool, p, 768 * KIB, &device.default_stream());
                true
            }
            None => false,
        }
    });
    let p = retrying.allocate(512 * KIB, &s).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // Nothing left to free: the callback gives up and the error comes through.
    let err = retrying.allocate(768 * KIB, &s).unwrap_err();
    assert!(err.is_out_of_memory());
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    free(&retrying, p, 512 * KIB, &s);
}

#[test]
fn aligned_hands_out_aligned_addresses_above_the_threshold() {
    let device = Device::simulated(1 << 30);
    let upstream = Arc::new(StatisticsAdaptor::new(
        PoolResource::new(
            CudaResource::new(&device),
            PoolOptions::sized(8 * MIB, None),
        )
        .unwrap(),
    ));
    let aligned = AlignedAdaptor::new(upstream.clone(), 64 * KIB, 4 * KIB).unwrap();
    assert!(AlignedAdaptor::new(upstream.clone(), 3000, 0).is_err());
    let s = device.new_stream().unwrap();
    let mut held = Vec::new();
    for i in 0..40usize {
        let bytes = 300 + i * 997;
        let p = aligned.allocate(bytes, &s).unwrap();
        let want = if bytes >= 4 * KIB { 64 * KIB } else { 256 };
        assert_eq!(p % want as u64, 0, "{bytes} bytes at {p:#x}");
        held.push((p, bytes));
    }
    for (p, bytes) in held {
        free(&aligned, p, bytes, &s);
    }
    assert_eq!(
        upstream.bytes_counter().value,
        0,
        "every upstream block went back"
    );
}

#[test]
fn prefetch_migrates_each_allocation_on_its_stream() {
    let device = Device::simulated(1 << 30);
    let prefetch = PrefetchAdaptor::new(ManagedResource::new(&device));
    let s = device.new_stream().unwrap();
    device.clear_sim_ops();
    let p = prefetch.allocate(10_000, &s).unwrap();
    assert_eq!(
        device.sim_ops(),
        vec![SimOp::Prefetch {
            ptr: p,
            bytes: 10_000,
            stream: s.id().0
        }]
    );
    free(&prefetch, p, 10_000, &s);
}

#[test]
fn reinitialize_builds_pools_and_logs() {
    let device = Device::simulated(256 * MIB);
    let built = reinitialize(ReinitializeOptions {
        pool_allocator: true,
        initial_pool_size: Some(16 * MIB),
        maximum_pool_size: Some(64 * MIB),
        devices: vec![device.clone()],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(built[0].name(), "pool(cuda)");
    assert_eq!(
        device.memory_info().unwrap().total - device.memory_info().unwrap().free,
        16 * MIB
    );
    assert_eq!(
        rmm_core::get_per_device_resource(&device).name(),
        "pool(cuda)"
    );

    let log = temp_path("reinit.csv");
    let built = reinitialize(ReinitializeOptions {
        pool_allocator: true,
        managed_memory: true,
        initial_pool_size: Some(MIB),
        devices: vec![device.clone()],
        logging: true,
        log_file_name: Some(log.clone()),
        ..Default::default()
    })
    .unwrap();
    let r: SharedResource = built[0].clone();
    assert_eq!(r.name(), "logging(pool(managed))");
    let s = device.default_stream();
    let p = r.allocate(1000, &s).unwrap();
    free(&*r, p, 1000, &s);
    drop((r, built));
    // Dropping the registry's handle flushes the log.
    reinitialize(ReinitializeOptions {
        devices: vec![device.clone()],
        ..Default::default()
    })
    .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    std::fs::remove_file(&log).unwrap();

    // A pool that cannot fit changes nothing.
    let err = reinitialize(ReinitializeOptions {
        pool_allocator: true,
        initial_pool_size: Some(1 << 40),
        devices: vec![device.clone()],
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    assert_eq!(rmm_core::get_per_device_resource(&device).name(), "cuda");
}
