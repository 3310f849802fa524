//! GPU pipeline benchmark (benches/WORKLOADS.md section B, GPU side): in one process, reads an h5ad file
//! and runs the GPU pipeline (every step on the device through `rmm-core`)
//! `--runs` times; run 1 is cold (first use of every kernel module and GPU library, from the
//! disk cache or compiled), later runs are warm, as rapids-singlecell's harness measures it.
//! Each run reads the file again, so every run's "read input" and "move X to the GPU" count.
//!
//! .gpu/bin/bench-gpu_pipeline FILE.h5ad [--runs N] [--allocator pool|async|cuda|managed|binning|arena]
//!     [--neighbors] [--harmony KEY] [--json-prefix PREFIX]      (writes PREFIX1.json, PREFIX2.json, ... in `scpipe --report`'s format)

use sc_pipeline::report::{RunReport, StepTimer};
use sc_pipeline::run::allocator::{build, AllocatorChoice};
use sc_pipeline::run::{run_pipeline_on, GpuRun, PipelineConfig, Silent};
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("gpu_pipeline: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut input = None;
    let (mut runs, mut prefix, mut allocator) = (2usize, None, AllocatorChoice::Pool);
    // rapids-singlecell's harness has no neighbors step (it needs cuML): left out unless asked.
    let mut config = PipelineConfig {
        n_neighbors: None,
        ..PipelineConfig::default()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            f if benches::pipeline_flag(&mut config, f, &mut args)? => {}
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).ok_or("--runs N")?,
            "--json-prefix" => prefix = Some(args.next().ok_or("--json-prefix PREFIX")?),
            "--allocator" => {
                let v = args.next().ok_or("--allocator NAME")?;
                allocator = <AllocatorChoice as clap::ValueEnum>::from_str(&v, true)?;
            }
            _ if input.is_none() && !a.starts_with("--") => input = Some(a),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let Some(input) = input else {
        println!("gpu_pipeline: no input file given (usage in the file's header); nothing to do");
        return Ok(());
    };
    if !rmm_cuda::gpu_available() {
        println!("gpu_pipeline: no GPU; nothing to measure");
        return Ok(());
    }
    let device = rmm_core::Device::cuda(0).map_err(|e| e.to_string())?;
    let resource = build(allocator, &device, None, None)
        .map_err(|e| e.to_string())?
        .resource;
    let stream = device.new_stream().map_err(|e| e.to_string())?;
    let gpu = GpuRun::new(&device, &stream, resource).map_err(|e| e.to_string())?;
    gpu.warm_up(Some(&config));
    for run in 1..=runs {
        let start = Instant::now();
        let timer = StepTimer::start("read input");
        let mut adata = sc_pipeline::io::read_h5ad(&input).map_err(|e| e.to_string())?;
        let read = timer.finish(adata.n_obs(), adata.n_vars(), "");
        let mut report = RunReport {
            input: input.clone(),
            device: "gpu".into(),
            threads: rayon::current_num_threads(),
            gpu_name: device.name().ok(),
            allocator: Some(format!("{allocator:?}").to_lowercase()),
            ..Default::default()
        };
        report.steps.push(read);
        report.steps.extend(
            run_pipeline_on(&mut adata, &config, Some(&gpu), &mut Silent)
                .map_err(|e| e.to_string())?,
        );
        report.total_seconds = start.elapsed().as_secs_f64();
        report.gpu = Some(gpu.totals());
        println!("run {run} ({}):", if run == 1 { "cold" } else { "warm" });
        print!("{}", report.table());
        if let Some(p) = &prefix {
            let path = format!("{p}{run}.json");
            std::fs::write(&path, report.to_json()).map_err(|e| format!("{path}: {e}"))?;
        }
    }
    Ok(())
}
