//! Does a download on a GPU's copy lane overlap work on the GPU's own stream? The output is
//! written from the GPU while neighbors runs, and its copies were measured to make no progress
//! during the kNN (benches/results/LOG.md, 2026-11-26). This times a 4 GiB lane download alone and
//! while the main stream runs one thing, one case per process (what the driver has loaded
//! matters):
//!
//! - `spin`: a kernel that spins ~1.5 s on every SM; the main thread waits on its stream.
//! - `spin-load`: the same, and meanwhile the main thread loads a module it never loaded.
//! - `spin-launch`: as `spin-load`, and launches a kernel of that module behind the spin.
//! - `spin-pageable-d2h` / `spin-pageable-h2d`: the spin, then a 4 MiB copy between the device
//!   and pageable host memory queued behind it (the driver's calls, waited for afterwards).
//! - `spin-pinned-d2h`: the spin, then a 128 MiB download through pinned staging buffers.
//! - `spin-pin`: the spin, then a new context's pinned staging buffers made (pinned memory).
//! - `neighbors`: `neighbors_on_device` on 600,000 random cells x 50 dimensions, its first run.
//! - `neighbors-warm`: the same after one run on 2,000 cells (its kernels loaded and run).
//! - `neighbors-modules`: the same after loading every module of the pipeline.
//! - `neighbors-kernels`: the same after loading every module and each of its kernels
//!   (`GpuContext::load_kernels`, as the pipeline's warm-up does).
//!
//! .gpu/bin/bench-copy_overlap CASE [GiB]

use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use sc_kernels::gpu::module_cache::KernelSource;
use sc_kernels::gpu::{DeviceVec, GpuContext};
use sc_kernels::neighbors::{neighbors_on_device, NeighborsParams};
use sc_pipeline::run::allocator::{build, AllocatorChoice};
use std::time::{Duration, Instant};

const SPIN: &str = r#"
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
"#;

fn main() {
    if let Err(e) = run() {
        eprintln!("copy_overlap: {e}");
        std::process::exit(1);
    }
}

type Res<T> = Result<T, String>;

fn run() -> Res<()> {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let Some(case) = args.next() else {
        println!("copy_overlap: no case given (usage in the file's header); nothing to do");
        return Ok(());
    };
    let gib: usize = args
        .next()
        .map_or(Ok(4), |g| g.parse().map_err(|e| format!("{e}")))?;
    if !rmm_cuda::gpu_available() {
        println!("copy_overlap: no GPU; nothing to measure");
        return Ok(());
    }
    let s = |e: &dyn std::fmt::Display| e.to_string();
    let device = rmm_core::Device::cuda(0).map_err(|e| s(&e))?;
    let resource = build(AllocatorChoice::Pool, &device, None, None)
        .map_err(|e| s(&e))?
        .resource;
    let stream = device.new_stream().map_err(|e| s(&e))?;
    let ctx = GpuContext::new(&device, &stream, resource.clone()).map_err(|e| s(&e))?;
    ctx.copy_lane()
        .and_then(GpuContext::prepare_transfers)
        .map_err(|e| s(&e))?;
    let src: DeviceVec<u8> = ctx.zeros(gib << 30).map_err(|e| s(&e))?;
    let mut dst = vec![1u8; gib << 30];
    ctx.synchronize().map_err(|e| s(&e))?;
    let spin_src = KernelSource {
        name: "copy_overlap_spin",
        source: SPIN,
    };
    // The spin kernel loaded and run once, so that only the case's own work differs.
    launch_spin(&ctx, spin_src, "spin", 1000)?;
    ctx.synchronize().map_err(|e| s(&e))?;
    let alone = lane_copy(&ctx, &src, &mut dst)?;
    println!("{case}: lane download of {gib} GiB alone {alone:.3} s");

    let points = |n: usize, d: usize, seed: u64| -> Vec<f32> {
        let mut x = seed;
        (0..n * d)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect()
    };
    let params = NeighborsParams::default();
    let (n, d, k) = (600_000, 50, params.n_neighbors);
    let x = match case.as_str() {
        "neighbors" | "neighbors-warm" | "neighbors-modules" | "neighbors-kernels" => {
            for m in sc_kernels::warm_up::all_modules() {
                match case.as_str() {
                    "neighbors-modules" => ctx.load_module(m).map(drop),
                    "neighbors-kernels" => ctx.load_kernels(m),
                    _ => Ok(()),
                }
                .map_err(|e| s(&e))?;
            }
            if case == "neighbors-warm" {
                let small = ctx.upload(&points(2000, d, 1)).map_err(|e| s(&e))?;
                neighbors_on_device(&ctx, &small, 2000, d, k, &params).map_err(|e| s(&e))?;
            }
            Some(ctx.upload(&points(n, d, 2)).map_err(|e| s(&e))?)
        }
        c if c.starts_with("spin") => None,
        other => return Err(format!("unknown case {other}")),
    };
    let small: DeviceVec<u8> = ctx.zeros(4 << 20).map_err(|e| s(&e))?;
    let staged: DeviceVec<u8> = ctx.zeros(128 << 20).map_err(|e| s(&e))?;
    ctx.synchronize().map_err(|e| s(&e))?;

    let t0 = Instant::now();
    let (main_s, lane) = std::thread::scope(|sc| {
        let lane = sc.spawn(|| {
            // The main stream's work is queued by then.
            std::thread::sleep(Duration::from_millis(50));
            let start = t0.elapsed().as_secs_f64();
            lane_copy(&ctx, &src, &mut dst).map(|secs| (start, secs))
        });
        let main = (|| -> Res<f64> {
            match &x {
                Some(x) => {
                    neighbors_on_device(&ctx, x, n, d, k, &params).map_err(|e| s(&e))?;
                }
                None => {
                    launch_spin(&ctx, spin_src, "spin", 3_000_000_000)?;
                    // Queued behind the spin on the main stream.
                    let stream = ctx.stream();
                    let mut host = vec![0u8; small.len()];
                    match case.as_str() {
                        // SAFETY (both): `small` holds host.len() bytes, and the stream is
                        // synchronised before `host` is touched again.
                        "spin-pageable-d2h" => unsafe {
                            stream
                                .copy_to_host_async(&mut host, small.ptr())
                                .map_err(|e| s(&e))?
                        },
                        "spin-pageable-h2d" => unsafe {
                            stream
                                .copy_from_host_async(small.ptr(), &host)
                                .map_err(|e| s(&e))?
                        },
                        "spin-pinned-d2h" => {
                            ctx.download(&staged).map_err(|e| s(&e))?;
                        }
                        "spin-pin" => {
                            // A new context's pinned staging buffers, made behind the spin.
                            let other = device.new_stream().map_err(|e| s(&e))?;
                            GpuContext::new(&device, &other, resource.clone())
                                .and_then(|c| c.prepare_transfers())
                                .map_err(|e| s(&e))?;
                        }
                        _ => {}
                    }
                    if case == "spin-load" || case == "spin-launch" {
                        // A module this process never loaded: compiled, then loaded while the
                        // spin runs.
                        let fresh: &'static str = Box::leak(
                            format!("{SPIN}\n// {:?}\n", Instant::now()).into_boxed_str(),
                        );
                        let src = KernelSource {
                            name: "copy_overlap_fresh",
                            source: fresh,
                        };
                        let f = ctx.function(src, "spin").map_err(|e| s(&e))?;
                        if case == "spin-launch" {
                            let cycles = 1000i64;
                            let mut l = ctx.launcher(&f);
                            l.arg(&cycles);
                            ctx.launch(l, LaunchConfig::for_num_elems(1), "spin")
                                .map_err(|e| s(&e))?;
                        }
                        println!(
                            "{case}: module loaded at {:.3} s",
                            t0.elapsed().as_secs_f64()
                        );
                    }
                    println!(
                        "{case}: main thread's call returned at {:.3} s",
                        t0.elapsed().as_secs_f64()
                    );
                    ctx.synchronize().map_err(|e| s(&e))?;
                }
            }
            Ok(t0.elapsed().as_secs_f64())
        })();
        let lane = lane.join().expect("the lane thread does not panic");
        (main, lane)
    });
    let (main_s, (lane_start, lane_s)) = (main_s?, lane?);
    println!(
        "{case}: main stream done at {main_s:.3} s; lane download from {lane_start:.3} s took \
         {lane_s:.3} s (alone {alone:.3} s): {}",
        if lane_start + lane_s < main_s - 0.1 {
            "overlapped"
        } else {
            "waited"
        }
    );
    Ok(())
}

/// Seconds to download `src` into `dst` on the copy lane.
fn lane_copy(ctx: &GpuContext, src: &DeviceVec<u8>, dst: &mut [u8]) -> Res<f64> {
    let t = Instant::now();
    ctx.bind_to_thread().map_err(|e| e.to_string())?;
    ctx.copy_lane()
        .and_then(|l| l.download_bytes_into(src, 0, dst))
        .map_err(|e| e.to_string())?;
    Ok(t.elapsed().as_secs_f64())
}

/// Queues `name(cycles)` of `src` on every SM (4 blocks of 256 threads each).
fn launch_spin(ctx: &GpuContext, src: KernelSource, name: &str, cycles: i64) -> Res<()> {
    let f = ctx.function(src, name).map_err(|e| e.to_string())?;
    let mut l = ctx.launcher(&f);
    l.arg(&cycles);
    let cfg = LaunchConfig {
        grid_dim: (ctx.multiprocessors() * 4, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    ctx.launch(l, cfg, name).map_err(|e| e.to_string())
}
