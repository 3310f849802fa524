//! Allocate + free latency of each base resource (cuda, managed, async, pinned host) at a few
//! sizes, with criterion. Each timed iteration is one allocate and one deallocate on a created
//! stream; the batch ends with a stream synchronisation, so deferred driver work is counted.
//!
//! `cargo bench -p benches --bench base_resources` (on the GPU machine:
//! `.gpu/bin/bench-base_resources --bench`). Without a GPU it measures the simulated device.
//! Set `BENCH_JSON=path` to also write the figures as JSON.

use benches::{describe_device, print_table};
use criterion::{criterion_group, Criterion};
use rmm_core::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static RESULTS: Mutex<Vec<(String, usize, f64)>> = Mutex::new(Vec::new());

fn device() -> Device {
    benches::bench_device(&std::env::args().collect::<Vec<_>>(), 64 << 30)
        .expect("a device to benchmark")
}

fn base_resources(c: &mut Criterion) {
    let device = device();
    let resources: Vec<SharedResource> = vec![
        Arc::new(CudaResource::new(&device)),
        Arc::new(ManagedResource::new(&device)),
        Arc::new(
            AsyncResource::new(
                &device,
                AsyncResourceOptions {
                    initial_pool_size: Some(1 << 30),
                    ..Default::default()
                },
            )
            .unwrap(),
        ),
        Arc::new(PinnedHostResource::new(&device)),
    ];
    let stream = device.new_stream().unwrap();
    let mut group = c.benchmark_group("allocate+free");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for r in &resources {
        for &bytes in &[1usize << 10, 1 << 20, 64 << 20] {
            let id = format!("{}/{}", r.name(), human_bytes(bytes).replace(' ', ""));
            let mut best = f64::INFINITY;
            group.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let p = r.allocate(bytes, &stream).unwrap();
                        // SAFETY: just allocated on this stream, unused.
                        unsafe { r.deallocate(p, bytes, &stream).unwrap() };
                    }
                    stream.synchronize().unwrap();
                    let t = start.elapsed();
                    best = best.min(t.as_nanos() as f64 / iters as f64);
                    t
                })
            });
            RESULTS.lock().unwrap().push((r.name(), bytes, best));
        }
    }
    group.finish();
}

criterion_group!(benches, base_resources);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let device = device();
    let results = RESULTS.lock().unwrap();
    println!(
        "\nallocate+free pair latency (best batch mean, ns) on {}",
        device.name().unwrap_or_default()
    );
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(n, b, ns)| vec![n.clone(), human_bytes(*b), format!("{ns:.0}")])
        .collect();
    print_table(&["resource", "size", "ns/pair"], &rows);
    if let Ok(path) = std::env::var("BENCH_JSON") {
        let json = serde_json::json!({
            "benchmark": "base_resources allocate+free",
            "device": describe_device(&device),
            "results": results.iter().map(|(n, b, ns)| serde_json::json!({"resource": n, "bytes": b, "ns_per_pair": ns})).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap())
            .expect("write BENCH_JSON");
    }
}
