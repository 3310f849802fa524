//! Streamed against in-memory GPU execution of the same file, in one process: the file is read
//! once, the pipeline runs with X in device memory, then with X streamed from host memory under
//! a device memory limit (a limiting adaptor in front of the pool), and the two outputs are
//! compared. Prints both runs' per-step tables (seconds, device peak, bus GB/s) and the
//! comparison; `--json` writes them.
//!
//! .gpu/bin/bench-streamed FILE.h5ad [--limit 8GiB] [--neighbors] [--harmony KEY] [--json OUT]

use rmm_core::adaptors::LimitingAdaptor;
use rmm_core::SharedResource;
use sc_pipeline::anndata::Matrix;
use sc_pipeline::report::{RunReport, StepTimer};
use sc_pipeline::run::allocator::{build, parse_size, AllocatorChoice};
use sc_pipeline::run::memory_plan::Execution;
use sc_pipeline::run::{run_pipeline_on, GpuRun, PipelineConfig, Silent};
use sc_pipeline::AnnData;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("streamed: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let (mut input, mut json, mut limit) = (None, None, 8usize << 30);
    let mut config = PipelineConfig {
        n_neighbors: None,
        ..PipelineConfig::default()
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            f if benches::pipeline_flag(&mut config, f, &mut args)? => {}
            "--limit" => limit = parse_size(&args.next().ok_or("--limit SIZE")?)?,
            "--json" => json = Some(args.next().ok_or("--json OUT")?),
            _ if input.is_none() && !a.starts_with("--") => input = Some(a),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let Some(input) = input else {
        println!("streamed: no input file given (usage in the file's header); nothing to do");
        return Ok(());
    };
    if !rmm_cuda::gpu_available() {
        println!("streamed: no GPU; nothing to measure");
        return Ok(());
    }
    let device = rmm_core::Device::cuda(0).map_err(|e| e.to_string())?;
    let timer = StepTimer::start("read input");
    let adata = sc_pipeline::io::read_h5ad(&input).map_err(|e| e.to_string())?;
    let read = timer.finish(adata.n_obs(), adata.n_vars(), "");
    println!("read {input}: {:.1} s", read.seconds);
    let copy = AnnData {
        x: adata.x.try_clone().map_err(|e| e.to_string())?,
        obs: adata.obs.clone(),
        var: adata.var.clone(),
        ..AnnData::new(Matrix::Sparse(sc_kernels::CsrMatrix::zeros(0, 0)))
    };

    let report = |name: &str| RunReport {
        input: format!("{input} ({name})"),
        device: "gpu".into(),
        threads: rayon::current_num_threads(),
        gpu_name: device.name().ok(),
        allocator: Some("pool".into()),
        ..Default::default()
    };
    let pipeline = |mut a: AnnData, resource: SharedResource, budget: u64, execution: Execution| {
        let stream = device.new_stream().map_err(|e| e.to_string())?;
        let gpu = GpuRun::new(&device, &stream, resource)
            .map_err(|e| e.to_string())?
            .with_memory(budget, execution);
        gpu.warm_up(Some(&config));
        let start = Instant::now();
        let steps =
            run_pipeline_on(&mut a, &config, Some(&gpu), &mut Silent).map_err(|e| e.to_string())?;
        let seconds = start.elapsed().as_secs_f64();
        let peak = gpu.stats.statistics().bytes.peak as u64;
        let mut r = report(match execution {
            Execution::Streamed => "streamed",
            _ => "in memory",
        });
        r.steps = steps;
        r.total_seconds = seconds;
        r.gpu = Some(gpu.totals());
        Ok::<_, String>((a, r, peak))
    };

    let pool = || {
        build(AllocatorChoice::Pool, &device, None, None)
            .map(|b| b.resource)
            .map_err(|e| e.to_string())
    };
    let free = device.memory_info().map_err(|e| e.to_string())?.free as u64;
    let (memory, rep_memory, _) = pipeline(
        adata,
        pool()?,
        sc_pipeline::run::default_budget(free),
        Execution::InMemory,
    )?;
    println!("in memory:");
    print!("{}", rep_memory.table());

    let limited: SharedResource = Arc::new(LimitingAdaptor::new(pool()?, limit));
    let (streamed, rep_streamed, peak) = pipeline(copy, limited, limit as u64, Execution::Auto)?;
    println!("streamed, --device-memory-limit {} MiB:", limit >> 20);
    print!("{}", rep_streamed.table());
    println!(
        "device peak of the streamed run: {:.2} GiB (limit {:.2} GiB)",
        peak as f64 / (1u64 << 30) as f64,
        limit as f64 / (1u64 << 30) as f64
    );
    let cmp = compare(&streamed, &memory);
    println!("comparison: {cmp}");
    if let Some(path) = json {
        let out = format!(
            "{{\"in_memory\": {}, \"streamed\": {}, \"streamed_device_peak_bytes\": {peak}, \"limit_bytes\": {limit}, \"comparison\": {cmp}}}",
            rep_memory.to_json(),
            rep_streamed.to_json()
        );
        std::fs::write(&path, out).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// How the streamed output differs from the in-memory one, as a JSON object.
fn compare(s: &AnnData, m: &AnnData) -> String {
    let same_cells = s.obs.index == m.obs.index;
    let same_genes = s.var.index == m.var.index;
    let obs_equal: Vec<String> = [
        "n_genes_by_counts",
        "total_counts",
        "pct_counts_mt",
        "pct_counts_in_top_50_genes",
        "n_genes",
    ]
    .iter()
    .filter(|c| s.obs.column(c) == m.obs.column(c))
    .map(|c| format!("\"{c}\""))
    .collect();
    let raw_diff = match (s.raw.as_ref().map(|r| &r.x), m.raw.as_ref().map(|r| &r.x)) {
        (Some(Matrix::Sparse(a)), Some(Matrix::Sparse(b))) if a.indptr == b.indptr => {
            a.data
                .iter()
                .zip(&b.data)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count() as i64
        }
        _ => -1,
    };
    let x_diff = match (&s.x, &m.x) {
        (Matrix::Dense(a), Matrix::Dense(b)) if a.data.len() == b.data.len() => {
            a.data
                .iter()
                .zip(&b.data)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max) as f64
        }
        _ => f64::NAN,
    };
    let min_corr = |key: &str| -> f64 {
        let (Some(a), Some(b)) = (s.obsm.get(key), m.obsm.get(key)) else {
            return f64::NAN;
        };
        let (a, b) = (a.data.to_f64().unwrap(), b.data.to_f64().unwrap());
        let k = m.obsm[key].shape[1];
        (0..k)
            .map(|c| {
                let col = |v: &Vec<f64>| v.iter().skip(c).step_by(k).copied().collect::<Vec<_>>();
                let (x, y) = (col(&a), col(&b));
                let dot: f64 = x.iter().zip(&y).map(|(p, q)| p * q).sum();
                let nx = x.iter().map(|p| p * p).sum::<f64>().sqrt();
                let ny = y.iter().map(|p| p * p).sum::<f64>().sqrt();
                dot / (nx * ny)
            })
            .fold(f64::INFINITY, f64::min)
    };
    let neighbors_same = match (s.obsp.get("distances"), m.obsp.get("distances")) {
        (Some(a), Some(b)) if a.n_rows == b.n_rows => {
            (0..a.n_rows).filter(|&i| a.row(i).0 == b.row(i).0).count() as f64 / a.n_rows as f64
        }
        _ => f64::NAN,
    };
    let num = |v: f64| {
        if v.is_finite() {
            format!("{v}")
        } else {
            "null".into()
        }
    };
    format!(
        "{{\"same_cells\": {same_cells}, \"same_hvg\": {same_genes}, \"obs_columns_identical\": [{}], \"raw_values_differing\": {raw_diff}, \"x_max_abs_diff\": {}, \"x_pca_min_column_correlation\": {}, \"x_pca_harmony_min_column_correlation\": {}, \"neighbor_lists_identical_fraction\": {}}}",
        obs_equal.join(", "),
        num(x_diff),
        num(min_corr("X_pca")),
        num(min_corr("X_pca_harmony")),
        num(neighbors_same)
    )
}
