//! Random allocations: allocator throughput, exactly as `benches/WORKLOADS.md` section A defines
//! it, beside the RMM 26.10 reference figures measured on an H100.
//!
//! ```text
//! cargo bench -p benches --bench random_allocations -- [--device sim] [--quick]
//!     [--only pool,arena,...] [--max-size BYTES] [--threads N] [--cross-stream] [--json PATH]
//! ```
//!
//! `--cross-stream`: each thread allocates on one stream and frees on a second one (RMM's
//! multi-stream case: the path of the sub-allocators' per-stream free lists and cross-stream
//! events); `benches/rmm/rmm_ra.cu ... cross` runs RMM on the same traces.
//!
//! One SplitMix64 trace per thread (seed 42 + thread index), generated before timing; each thread
//! allocates and frees on its own stream; only the allocate/deallocate calls run inside the timed
//! region. Figure: wall time of all threads together / number of events, best of 3 repetitions
//! after one untimed warm-up pass. The default device is CUDA device 0 (and the run fails without
//! one); `--device sim` runs on a simulated device, which measures the CPU cost of the algorithms
//! (its upstream is host memory, so growth costs differ from a GPU's).

use benches::{bench_resource, describe_device, flag_value, grid_trace, print_table, trace, Trace};
use rmm_core::MemoryResource;
use rmm_cuda::{Device, Stream};
use serde_json::json;
use std::sync::Barrier;
use std::time::{Duration, Instant};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

const STEPS: usize = 100_000;
const MAX_SIZES: [usize; 4] = [KIB, 64 * KIB, MIB, 4 * MIB];
const THREADS: [usize; 2] = [1, 4];
const TOTAL_USAGE: usize = 4 * GIB;
const REPETITIONS: usize = 3;

/// CPU time the calling thread has run, in ns (0 where unavailable). On a loaded machine wall
/// time includes waiting for a core; this does not, so it shows the algorithms' own cost.
#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: libc's clock_gettime (std links libc on Linux) writes one timespec into `t`.
    if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
        t.sec as u64 * 1_000_000_000 + t.nsec as u64
    } else {
        0
    }
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_ns() -> u64 {
    0
}

/// The span of one thread's timed loop.
struct Span {
    start: Instant,
    end: Instant,
    cpu_ns: u64,
}

/// Runs one trace, allocating on `stream` and freeing on `free_stream` (the same stream, or a
/// second one in the cross-stream case); returns the span of its allocate/deallocate loop.
fn replay<R: MemoryResource + ?Sized>(
    r: &R,
    trace: &Trace,
    stream: &Stream,
    free_stream: &Stream,
    ptrs: &mut [u64],
    sizes: &mut [u64],
) -> Result<Span, String> {
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    for op in &trace.ops {
        let slot = op.slot as usize;
        if op.size == 0 {
            // SAFETY: the slot holds a live block of this size from `r`; freeing it on another
            // stream than its allocation's is allowed (stream-ordered: reused after that stream).
            unsafe { r.deallocate(ptrs[slot], sizes[slot] as usize, free_stream) }
                .map_err(|e| format!("deallocate: {e}"))?;
            sizes[slot] = 0;
        } else {
            match r.allocate(op.size as usize, stream) {
                Ok(ptr) => ptrs[slot] = ptr,
                Err(e) => {
                    // Leave the resource as it was: free what this pass still holds.
                    for (ptr, size) in ptrs.iter().zip(sizes.iter_mut()) {
                        if *size != 0 {
                            // SAFETY: a live block of this size from `r`.
                            let _ = unsafe { r.deallocate(*ptr, *size as usize, free_stream) };
                            *size = 0;
                        }
                    }
                    return Err(format!("allocate({}): {e}", op.size));
                }
            }
            sizes[slot] = op.size;
        }
    }
    let end = Instant::now();
    Ok(Span {
        start,
        end,
        cpu_ns: thread_cpu_ns().saturating_sub(cpu_start),
    })
}

/// Wall time of one pass over all threads, and the CPU time they used.
struct Pass {
    wall: Duration,
    cpu_ns: u64,
}

/// Runs every thread's trace at once, each on its own stream (and, cross-stream, freeing on a
/// second stream of its own: `streams` holds one or two per thread).
fn run_once<R: MemoryResource + ?Sized>(
    r: &R,
    traces: &[Trace],
    streams: &[Stream],
) -> Result<Pass, String> {
    let per_thread = streams.len() / traces.len();
    // One thread's trace on its streams (`pair`: its allocation stream, then its free stream),
    // started together with the others' when `barrier` is given.
    let run_trace = |t: &Trace, pair: &[Stream], barrier: Option<&Barrier>| {
        let (stream, free_stream) = (&pair[0], &pair[pair.len() - 1]);
        let mut ptrs = vec![0u64; t.slots];
        let mut sizes = vec![0u64; t.slots];
        if let Some(b) = barrier {
            b.wait();
        }
        let span = replay(r, t, stream, free_stream, &mut ptrs, &mut sizes);
        for s in pair {
            s.synchronize().map_err(|e| e.to_string())?;
        }
        span
    };
    let spans: Vec<Result<Span, String>> = if let [trace] = traces {
        // One trace runs on the calling thread, as RMM's harness runs it: a thread spawned per
        // pass starts on any core of a many-core host, with the pool's lists cold in its caches.
        vec![run_trace(trace, streams, None)]
    } else {
        let barrier = Barrier::new(traces.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = traces
                .iter()
                .zip(streams.chunks(per_thread))
                .map(|(t, pair)| {
                    let (run_trace, barrier) = (&run_trace, &barrier);
                    s.spawn(move || run_trace(t, pair, Some(barrier)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
                .collect()
        })
    };
    let spans: Vec<Span> = spans.into_iter().collect::<Result<_, _>>()?;
    let start = spans
        .iter()
        .map(|s| s.start)
        .min()
        .expect("one thread at least");
    let end = spans
        .iter()
        .map(|s| s.end)
        .max()
        .expect("one thread at least");
    Ok(Pass {
        wall: end - start,
        cpu_ns: spans.iter().map(|s| s.cpu_ns).sum(),
    })
}

/// What one case measured.
struct Measured {
    /// Best wall time per event (the benchmark's figure).
    ns_per_op: f64,
    /// CPU time per event of the best pass (all threads).
    cpu_ns_per_op: f64,
    events: usize,
}

/// Best of `REPETITIONS` after one warm-up pass.
fn measure<R: MemoryResource + ?Sized>(
    r: &R,
    device: &Device,
    threads: usize,
    steps: usize,
    max_size: usize,
    cross: bool,
) -> Result<Measured, String> {
    let max_usage = TOTAL_USAGE / threads;
    let traces: Vec<Trace> = (0..threads)
        .map(|t| trace(t, steps, max_size, max_usage))
        .collect();
    measure_traces(r, device, &traces, cross)
}

/// Best of `REPETITIONS` passes over `traces` (one thread each) after one warm-up pass.
fn measure_traces<R: MemoryResource + ?Sized>(
    r: &R,
    device: &Device,
    traces: &[Trace],
    cross: bool,
) -> Result<Measured, String> {
    let threads = traces.len();
    let streams: Vec<Stream> = (0..threads * (1 + cross as usize))
        .map(|_| device.new_stream().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let events: usize = traces.iter().map(|t| t.ops.len()).sum();
    run_once(r, traces, &streams)?;
    let mut best = Pass {
        wall: Duration::MAX,
        cpu_ns: 0,
    };
    for _ in 0..REPETITIONS {
        let pass = run_once(r, traces, &streams)?;
        if pass.wall < best.wall {
            best = pass;
        }
    }
    Ok(Measured {
        ns_per_op: best.wall.as_nanos() as f64 / events as f64,
        cpu_ns_per_op: best.cpu_ns as f64 / events as f64,
        events,
    })
}

/// RMM 26.10 on an H100 (ns per operation), benches/WORKLOADS.md section A.
fn reference(resource: &str, max_size: usize, threads: usize) -> Option<f64> {
    let row = MAX_SIZES.iter().position(|&m| m == max_size)? * 2 + (threads == 4) as usize;
    #[rustfmt::skip]
    const TABLE: [[f64; 5]; 8] = [
        // async, pool, arena, binning, fixed
        [933.0, 455.0, 263.0, 418.0, 329.0],
        [3688.0, 1235.0, 304.0, 1136.0, 900.0],
        [1336.0, 564.0, 415.0, 273.0, 236.0],
        [3936.0, 1499.0, 280.0, 1056.0, 843.0],
        [1064.0, 514.0, 416.0, 243.0, 231.0],
        [4215.0, 1600.0, 374.0, 626.0, 799.0],
        [1092.0, 429.0, 705.0, 389.0, f64::NAN],
        [4173.0, 1654.0, 3096.0, 516.0, f64::NAN],
    ];
    let col = match resource {
        "cuda" => {
            return match (max_size, threads) {
                (MIB, 1) => Some(7100.0),
                (m, 1) if m == 4 * MIB => Some(35000.0),
                _ => None,
            }
        }
        "async" => 0,
        "pool" => 1,
        "arena" => 2,
        "binning" => 3,
        "fixed" => 4,
        _ => return None,
    };
    Some(TABLE[row][col]).filter(|v| !v.is_nan())
}

/// One benchmark case: a resource built fresh for it, measured, then dropped.
fn run_case(
    name: &str,
    device: &Device,
    max_size: usize,
    threads: usize,
    steps: usize,
    cross: bool,
) -> Option<Result<Measured, String>> {
    let skip = match name {
        "cuda" => threads != 1 || max_size < MIB,
        "fixed" => max_size > MIB,
        _ => false,
    };
    if skip {
        return None;
    }
    let case_steps = if name == "cuda" { steps / 10 } else { steps };
    let resource = bench_resource(name, device)?;
    Some(
        resource
            .map_err(|e| e.to_string())
            .and_then(|r| measure(&*r, device, threads, case_steps, max_size, cross)),
    )
}

fn size_label(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes / KIB)
    }
}

/// RMM's own grid: {1k, 10k, 100k} allocations x a maximum size of {1 .. 4096} MiB, one thread,
/// at most 16,000 MiB live, with the resources as RMM's benchmark builds them (pool: half of the
/// free memory; arena: all of it but 64 MiB; binning: bins of 256 KiB to 4 MiB over such a pool;
/// async: a pool of the driver's). One line per cell; `--json PATH` writes them. `--memory
/// BYTES` stands for the free memory (a simulated device cannot reserve half of 80 GB here).
fn run_grid(device: &Device, args: &[String]) {
    use rmm_core::*;
    use std::sync::Arc;
    let free = match flag_value(args, "--memory") {
        Some(m) => m.parse().expect("--memory takes a byte count"),
        None => device.memory_info().map(|m| m.free).unwrap_or(0),
    };
    let half = align_up(free / 2, MIB);
    let only = flag_value(args, "--only");
    let mut results = Vec::new();
    for name in ["async", "pool", "arena", "binning"] {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|x| x == name))
        {
            continue;
        }
        let pool = || PoolResource::new(CudaResource::new(device), PoolOptions::sized(half, None));
        let resource: Result<SharedResource> = match name {
            "async" => AsyncResource::new(device, AsyncResourceOptions::default())
                .map(|r| Arc::new(r) as SharedResource),
            "pool" => pool().map(|r| Arc::new(r) as SharedResource),
            "arena" => ArenaResource::new(
                CudaResource::new(device),
                ArenaOptions {
                    arena_size: Some(align_up(free.saturating_sub(64 * MIB), MIB)),
                    ..Default::default()
                },
            )
            .map(|r| Arc::new(r) as SharedResource),
            _ => pool()
                .and_then(|p| BinningResource::with_range(Arc::new(p), 18, 22))
                .map(|r| Arc::new(r) as SharedResource),
        };
        let resource = match resource {
            Ok(r) => r,
            Err(e) => {
                eprintln!("grid {name}: cannot build the resource: {e}");
                continue;
            }
        };
        for n in [1000, 10_000, 100_000] {
            for max_mib in [1usize, 4, 64, 256, 1024, 4096] {
                let trace = grid_trace(n, max_mib * MIB, 16_000 * MIB);
                let events = trace.ops.len();
                match measure_traces(&*resource, device, std::slice::from_ref(&trace), false) {
                    Ok(m) => {
                        eprintln!(
                            "grid {name:>8} n={n:>6} max={max_mib:>4} MiB: {:9.1} ns/op",
                            m.ns_per_op
                        );
                        results.push(json!({"resource": name, "allocations": n,
                            "max_size_mib": max_mib, "events": events, "ns_per_op": m.ns_per_op}));
                    }
                    Err(e) => {
                        eprintln!("grid {name:>8} n={n:>6} max={max_mib:>4} MiB: FAILED: {e}");
                        results.push(json!({"resource": name, "allocations": n,
                            "max_size_mib": max_mib, "error": e}));
                    }
                }
            }
        }
    }
    if let Some(path) = flag_value(args, "--json") {
        let doc = json!({"benchmark": "random_allocations --grid", "device": describe_device(device),
            "max_usage_mib": 16_000, "seed": "42 (SplitMix64)", "results": results});
        if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()) {
            eprintln!("random_allocations: writing {path}: {e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let wants_sim = flag_value(&args, "--device").as_deref() == Some("sim")
        || args.iter().any(|a| a == "--device=sim");
    let device = if wants_sim {
        // An H100's 80 GB, simulated with lazily reserved host memory.
        Device::simulated(80 * GIB)
    } else {
        match Device::cuda(0) {
            Ok(d) => d,
            Err(e) => {
                eprintln!(
                    "random_allocations: no CUDA device 0 ({e}); pass `--device sim` to measure \
                     the allocators' CPU cost on a simulated device"
                );
                std::process::exit(2);
            }
        }
    };
    if args.iter().any(|a| a == "--grid") {
        run_grid(&device, &args);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let cross = args.iter().any(|a| a == "--cross-stream");
    let steps = if quick { STEPS / 10 } else { STEPS };
    let all = ["cuda", "async", "pool", "arena", "binning", "fixed"];
    let only = flag_value(&args, "--only");
    let chosen: Vec<&str> = all
        .iter()
        .copied()
        .filter(|r| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == *r))
        })
        .collect();

    let max_sizes: Vec<usize> = match flag_value(&args, "--max-size") {
        Some(m) => vec![m.parse().expect("--max-size takes a byte count")],
        None => MAX_SIZES.to_vec(),
    };
    let thread_counts: Vec<usize> = match flag_value(&args, "--threads") {
        Some(t) => vec![t.parse().expect("--threads takes a count")],
        None => THREADS.to_vec(),
    };

    let mut rows = Vec::new();
    let mut results = Vec::new();
    for &max_size in &max_sizes {
        for &threads in &thread_counts {
            for &name in &chosen {
                let Some(outcome) = run_case(name, &device, max_size, threads, steps, cross) else {
                    continue;
                };
                // The reference figures are of the one-stream workload.
                let reference = reference(name, max_size, threads).filter(|_| !cross);
                let case_steps = if name == "cuda" { steps / 10 } else { steps };
                match outcome {
                    Ok(Measured {
                        ns_per_op: ns,
                        cpu_ns_per_op: cpu,
                        events,
                    }) => {
                        eprintln!(
                            "{name:>8} {:>7} x{threads}: {ns:8.1} ns/op ({cpu:.1} ns of CPU per op)",
                            size_label(max_size)
                        );
                        let speedup = reference.map(|r| r / ns);
                        rows.push(vec![
                            name.to_string(),
                            size_label(max_size),
                            threads.to_string(),
                            format!("{ns:.1}"),
                            reference.map_or("-".into(), |r| format!("{r:.0}")),
                            speedup.map_or("-".into(), |s| format!("{s:.2}x")),
                        ]);
                        results.push(json!({
                            "resource": name, "max_size": max_size, "threads": threads,
                            "steps_per_thread": case_steps, "events": events, "ns_per_op": ns,
                            "cpu_ns_per_op": cpu,
                            "rmm_reference_ns_per_op": reference, "speedup_vs_rmm": speedup,
                        }));
                    }
                    Err(e) => {
                        eprintln!("{name} {} x{threads}: FAILED: {e}", size_label(max_size));
                        rows.push(vec![
                            name.to_string(),
                            size_label(max_size),
                            threads.to_string(),
                            "failed".into(),
                            reference.map_or("-".into(), |r| format!("{r:.0}")),
                            "-".into(),
                        ]);
                        results.push(json!({
                            "resource": name, "max_size": max_size, "threads": threads,
                            "error": e, "rmm_reference_ns_per_op": reference,
                        }));
                    }
                }
            }
        }
    }

    if let Some(path) = flag_value(&args, "--json") {
        let doc = json!({
            "benchmark": "random_allocations",
            "device": describe_device(&device),
            "parameters": {
                "steps_per_thread": steps,
                "cuda_steps_per_thread": steps / 10,
                "max_sizes": MAX_SIZES,
                "threads": THREADS,
                "max_usage_total": TOTAL_USAGE,
                "seed": "42 + thread index (SplitMix64)",
                "repetitions": REPETITIONS,
                "warmup_passes": 1,
                "alignment": rmm_cuda::ALIGNMENT,
                "quick": quick,
                "cross_stream": cross,
            },
            "reference": "RMM 26.10 C++, H100 (benches/WORKLOADS.md section A)",
            "results": results,
        });
        if let Err(e) = std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()) {
            eprintln!("random_allocations: writing {path}: {e}");
            std::process::exit(1);
        }
    }
    println!();
    print_table(
        &[
            "resource",
            "max_size",
            "threads",
            "ns/op",
            "RMM ns/op",
            "speed-up",
        ],
        &rows,
    );
}
