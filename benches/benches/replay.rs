//! A real allocation log replayed against each of our resources: the allocations and frees of a
//! GPU pipeline run (`scpipe run --allocation-log LOG.csv`, RMM's CSV format), in the logged
//! order, sizes and streams. `benches/rmm/rmm_replay.cu LOG.csv` replays the same file against
//! RMM's resources, configured alike, in the same device call.
//!
//! ```text
//! cargo bench -p benches --bench replay -- LOG.csv [--only pool,arena,...] [--json PATH]
//! ```
//!
//! Figure: time inside the allocate and deallocate calls / their number, best of 20 replays after
//! one untimed warm-up replay on the same resource (its growth); peak bytes live. Then the
//! fragmentation (`1 - largest free block / free bytes`) at the log's peak of the pool and of the
//! expandable pool, both grown from nothing by the replay.

use benches::{bench_resource, describe_device, flag_value, print_table};
use rmm_core::adaptors::{parse_log, replay_log};
use rmm_core::testing::fragmentation_at_peak;
use rmm_core::{CudaResource, PoolOptions, PoolResource};
use rmm_cuda::Device;
use serde_json::json;

const REPLAYS: usize = 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.iter().skip(1).find(|a| a.ends_with(".csv")) else {
        eprintln!("replay: give the allocation log (LOG.csv, from scpipe run --allocation-log)");
        std::process::exit(2);
    };
    let file = std::fs::File::open(path).unwrap_or_else(|e| {
        eprintln!("replay: cannot open {path}: {e}");
        std::process::exit(2);
    });
    let records = parse_log(std::io::BufReader::new(file)).unwrap_or_else(|e| {
        eprintln!("replay: {path}: {e}");
        std::process::exit(2);
    });
    let device = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("replay: no CUDA device 0 ({e})");
            std::process::exit(2);
        }
    };
    let only = flag_value(&args, "--only");
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for name in ["cuda", "async", "pool", "arena", "binning", "expandable"] {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|x| x == name))
        {
            continue;
        }
        let resource = match bench_resource(name, &device).expect("a benchmark resource") {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{name}: {e}");
                continue;
            }
        };
        let mut best = f64::INFINITY;
        let mut report = None;
        for rep in 0..=REPLAYS {
            match replay_log(&records, &*resource) {
                Ok(r) => {
                    let ops = (r.allocations + r.frees).max(1);
                    let ns = r.elapsed.as_nanos() as f64 / ops as f64;
                    if rep > 0 {
                        best = best.min(ns);
                    }
                    report = Some(r);
                }
                Err(e) => {
                    eprintln!("{name}: replay failed: {e}");
                    break;
                }
            }
        }
        let Some(r) = report else { continue };
        eprintln!(
            "{name:>8}: {best:8.1} ns/op over {} allocations and {} frees, peak {} bytes",
            r.allocations, r.frees, r.peak_bytes
        );
        rows.push(vec![
            name.to_string(),
            (r.allocations + r.frees).to_string(),
            format!("{best:.1}"),
            r.peak_bytes.to_string(),
            r.failed_allocations.to_string(),
        ]);
        results.push(json!({
            "resource": name, "allocations": r.allocations, "frees": r.frees,
            "ns_per_op": best, "peak_bytes": r.peak_bytes,
            "failed_allocations": r.failed_allocations,
        }));
    }
    print_table(
        &["resource", "calls", "ns/call", "peak bytes", "failed"],
        &rows,
    );
    // Fragmentation at the log's peak: the pool and the expandable pool, both grown from
    // nothing as the log asks.
    let mut fragmentation = Vec::new();
    let plain = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(0, None));
    let expandable = PoolResource::expandable(&device, PoolOptions::sized(0, None));
    let measured = [
        (
            "pool",
            plain.and_then(|p| fragmentation_at_peak(&records, &p)),
        ),
        (
            "expandable",
            expandable.and_then(|p| fragmentation_at_peak(&records, &p)),
        ),
    ];
    let mut frag_rows = Vec::new();
    for (name, m) in measured {
        match m {
            Ok((f, _)) => {
                frag_rows.push(vec![
                    name.to_string(),
                    format!("{:.3}", f.at_peak),
                    (f.free_bytes >> 20).to_string(),
                    (f.largest_free_block >> 20).to_string(),
                    (f.pool_size >> 20).to_string(),
                ]);
                fragmentation.push(json!({
                    "resource": name, "at_peak": f.at_peak, "free_bytes": f.free_bytes,
                    "largest_free_block": f.largest_free_block, "pool_size": f.pool_size,
                }));
            }
            Err(e) => eprintln!("{name}: fragmentation replay failed: {e}"),
        }
    }
    print_table(
        &[
            "grown from 0",
            "1 - largest/free at peak",
            "free MiB",
            "largest MiB",
            "held MiB",
        ],
        &frag_rows,
    );
    if let Some(out) = flag_value(&args, "--json") {
        let doc = json!({
            "log": path, "records": records.len(), "device": describe_device(&device),
            "results": results, "fragmentation": fragmentation,
        });
        std::fs::write(&out, serde_json::to_string_pretty(&doc).expect("json"))
            .unwrap_or_else(|e| eprintln!("replay: cannot write {out}: {e}"));
    }
}
