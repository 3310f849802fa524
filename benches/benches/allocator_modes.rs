//! Allocator modes on the neighbors and harmony workloads (benches/WORKLOADS.md section C).
//!
//! For each N: N cells x D components in 8 cell types and 4 batches (each batch shifts every
//! component; the same data for every mode), then for each workload and each allocator mode: a
//! fresh resource behind a `TimelineAdaptor`, one untimed run, then `--runs` timed runs. Per mode:
//! the median wall time, the peak of live bytes, allocations and bytes allocated per run, and
//! for pool, binning (its pool) and arena the fragmentation at the peak (1 - largest free block
//! / free bytes). Managed memory runs only where the peak of the cuda mode fits in free memory
//! (never oversubscribed). Writes `OUT/modes.json` and one SVG of live bytes over one run per
//! (workload, N, mode).
//!
//! .gpu/bin/bench-allocator_modes [--cells 200000,1000000] [--dims 50] [--k 15]
//!     [--modes cuda,managed,async,pool,binning,arena] [--workloads neighbors,harmony]
//!     [--runs 3] [--out DIR] [--cpu-knn] [--dump-data DIR]
//!
//! `--cpu-knn` also times the CPU exact kNN (our CPU twin) on the same data; `--dump-data DIR`
//! writes `DIR/points_N.f32` (raw little-endian, N x D) for the torch comparison script.

use rmm_core::adaptors::{Timeline, TimelineAdaptor};
use rmm_core::{CudaResource, Device, SharedResource};
use sc_kernels::gpu::GpuContext;
use sc_kernels::neighbors::{neighbors_on_device, NeighborsParams};
use sc_kernels::DenseMatrix;
use sc_pipeline::run::allocator::{build, AllocatorChoice};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("allocator_modes: {e}");
        std::process::exit(1);
    }
}

struct Args {
    cells: Vec<usize>,
    dims: usize,
    k: usize,
    modes: Vec<AllocatorChoice>,
    workloads: Vec<String>,
    runs: usize,
    out: std::path::PathBuf,
    cpu_knn: bool,
    dump: Option<std::path::PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        cells: vec![200_000, 1_000_000],
        dims: 50,
        k: 15,
        modes: vec![],
        workloads: vec!["neighbors".into(), "harmony".into()],
        runs: 3,
        out: "allocator_modes".into(),
        cpu_knn: false,
        dump: None,
    };
    let mut modes = "cuda,managed,async,pool,binning,arena".to_string();
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let list = |v: String| -> Vec<String> { v.split(',').map(|s| s.trim().to_string()).collect() };
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--cells" => {
                a.cells = list(val()?)
                    .iter()
                    .map(|s| s.parse().map_err(|_| format!("--cells: '{s}'")))
                    .collect::<Result<_, _>>()?
            }
            "--dims" => a.dims = val()?.parse().map_err(|_| "--dims N")?,
            "--k" => a.k = val()?.parse().map_err(|_| "--k N")?,
            "--runs" => a.runs = val()?.parse().map_err(|_| "--runs N")?,
            "--modes" => modes = val()?,
            "--workloads" => a.workloads = list(val()?),
            "--out" => a.out = val()?.into(),
            "--dump-data" => a.dump = Some(val()?.into()),
            "--cpu-knn" => a.cpu_knn = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    for m in list(modes) {
        a.modes
            .push(<AllocatorChoice as clap::ValueEnum>::from_str(&m, true)?);
    }
    if a.runs == 0 || a.dims == 0 {
        return Err("--runs and --dims must be at least 1".into());
    }
    for w in &a.workloads {
        if !["neighbors", "harmony"].contains(&w.as_str()) {
            return Err(format!("unknown workload '{w}' (neighbors, harmony)"));
        }
    }
    Ok(a)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One workload run on `ctx` (everything it allocates is freed when it returns).
fn run_once(
    workload: &str,
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    batches: &[u32],
    k: usize,
) -> Result<(), String> {
    match workload {
        "neighbors" => {
            let xd = ctx.upload(&x.data).map_err(|e| e.to_string())?;
            let params = NeighborsParams {
                n_neighbors: k,
                ..NeighborsParams::default()
            };
            neighbors_on_device(ctx, &xd, x.n_rows, x.n_cols, k, &params)
                .map_err(|e| e.to_string())?;
        }
        "harmony" => {
            let params = sc_kernels::harmony::HarmonyParams::default();
            sc_kernels::harmony::harmony_integrate_gpu(ctx, x, batches, 4, &params)
                .map_err(|e| e.to_string())?;
        }
        other => return Err(format!("unknown workload {other}")),
    }
    ctx.synchronize().map_err(|e| e.to_string())
}

fn run() -> Result<(), String> {
    let args = parse()?;
    if !rmm_cuda::gpu_available() {
        println!("allocator_modes: no GPU; nothing to measure");
        return Ok(());
    }
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let device = Device::cuda(0).map_err(|e| e.to_string())?;
    let stream = device.new_stream().map_err(|e| e.to_string())?;
    let mut results = vec![];
    for &n in &args.cells {
        let t0 = Instant::now();
        let (x, batches) = benches::workload_c_points(n, args.dims);
        println!("N = {n}: data in {:.1} s", t0.elapsed().as_secs_f64());
        if let Some(dir) = &args.dump {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            let bytes: Vec<u8> = x.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(dir.join(format!("points_{n}.f32")), bytes)
                .map_err(|e| e.to_string())?;
        }
        if args.cpu_knn && args.workloads.iter().any(|w| w == "neighbors") {
            let params = NeighborsParams {
                n_neighbors: args.k,
                method: sc_kernels::neighbors::KnnMethod::Exact,
                ..NeighborsParams::default()
            };
            let t = Instant::now();
            sc_kernels::neighbors::neighbors(&x, &params).map_err(|e| e.to_string())?;
            let s = t.elapsed().as_secs_f64();
            println!(
                "  cpu neighbors ({} threads): {s:.3} s",
                rayon::current_num_threads()
            );
            results.push(json!({"workload": "neighbors", "cells": n, "mode": "cpu",
                "threads": rayon::current_num_threads(), "seconds": s}));
        }
        for workload in &args.workloads {
            let mut cuda_peak = None;
            for &mode in &args.modes {
                let name = format!("{mode:?}").to_lowercase();
                if mode == AllocatorChoice::Managed {
                    let free = device.memory_info().map_err(|e| e.to_string())?.free as u64;
                    match cuda_peak {
                        Some(p) if p < free / 10 * 9 => {}
                        _ => {
                            let why = format!(
                                "skipped: the cuda mode's peak ({cuda_peak:?} bytes) must be measured first and fit in 90% of free memory ({free} bytes)"
                            );
                            println!("  {workload} {name}: {why}");
                            results.push(json!({"workload": workload, "cells": n, "mode": name, "skipped": why}));
                            continue;
                        }
                    }
                }
                let sc_pipeline::run::allocator::Built { resource, probe } =
                    build(mode, &device, None, None).map_err(|e| e.to_string())?;
                let mut timeline = TimelineAdaptor::new(resource);
                if let Some(p) = probe {
                    timeline = timeline.with_probe(move || p());
                }
                let timeline = Arc::new(timeline);
                let shared: SharedResource = timeline.clone();
                let ctx = GpuContext::new(&device, &stream, shared).map_err(|e| e.to_string())?;
                run_once(workload, &ctx, &x, &batches, args.k)?; // untimed: first use
                let mut times = vec![];
                let mut last = Timeline::default();
                for _ in 0..args.runs {
                    timeline.reset();
                    let t = Instant::now();
                    run_once(workload, &ctx, &x, &batches, args.k)?;
                    times.push(t.elapsed().as_secs_f64());
                    last = timeline.timeline();
                }
                let secs = median(times.clone());
                if mode == AllocatorChoice::Cuda {
                    cuda_peak = Some(last.peak_bytes);
                }
                let frag = last.free_space_at_peak.map(|f| f.fragmentation());
                println!(
                    "  {workload} {name:8} {:9.1} ms  peak {:7.3} GiB  {:6} allocations  {:8.3} GiB allocated  fragmentation at peak {}",
                    secs * 1e3,
                    last.peak_bytes as f64 / (1u64 << 30) as f64,
                    last.allocations,
                    last.allocated_bytes as f64 / (1u64 << 30) as f64,
                    frag.map_or("n/a (no free list)".into(), |f| format!("{f:.4}"))
                );
                let svg = args.out.join(format!("{workload}_{n}_{name}.svg"));
                sc_pipeline::memory_timeline::write_svg(
                    &svg,
                    &format!("{workload}, {n} cells, {name}: memory over one run"),
                    &last,
                    &[],
                )
                .map_err(|e| e.to_string())?;
                results.push(json!({
                    "workload": workload, "cells": n, "dims": args.dims, "k": args.k,
                    "mode": name, "seconds_median": secs, "seconds": times,
                    "peak_bytes": last.peak_bytes, "allocations": last.allocations,
                    "allocated_bytes": last.allocated_bytes,
                    "free_at_peak": last.free_space_at_peak.map(|f| f.free_bytes),
                    "largest_free_block_at_peak": last.free_space_at_peak.map(|f| f.largest_free_block),
                    "fragmentation_at_peak": frag,
                    "plot": svg.file_name().map(|s| s.to_string_lossy().into_owned()),
                }));
                drop(ctx);
                drop(timeline);
                // Give the pool back before the next mode sizes its own from free memory.
                rmm_core::set_per_device_resource(&device, Arc::new(CudaResource::new(&device)))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let doc = json!({
        "gpu": device.name().ok(),
        "date": std::process::Command::new("date").arg("-u").arg("+%F").output().ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        "results": results,
    });
    std::fs::write(
        args.out.join("modes.json"),
        serde_json::to_string_pretty(&doc).unwrap(),
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}
