//! CPU pipeline benchmark (benches/WORKLOADS.md section B, CPU side): reads an h5ad file of synthetic
//! counts and runs the scanpy recipe step by step, timing each step, next to scanpy 1.12's
//! figures on a 2-core machine (benches/WORKLOADS.md, "scanpy on a 2-core machine").
//!
//! cargo bench -p benches --bench cpu_pipeline -- [--cells N] [--genes G] [--seed S]
//!     [--input FILE.h5ad] [--flavor cell_ranger|seurat|seurat_v3] [--json PATH]
//!
//! Without `--input`, the file is generated first (not timed) as `scpipe generate` writes it,
//! under the system's temporary directory, and reused by later runs with the same parameters.

use sc_pipeline::report::{StepRecord, StepTimer};
use sc_pipeline::run::{run_pipeline, PipelineConfig, Silent};
use sc_pipeline::steps::{Flavor, HvgOptions};
use sc_pipeline::synthetic::{generate, SyntheticParams};
use std::path::PathBuf;
use std::time::Instant;

/// scanpy 1.12.4 on a 2-core machine, 100,000 x 20,000 synthetic counts, seconds
/// (benches/WORKLOADS.md, "scanpy on a 2-core machine"). Keys are our step names.
const SCANPY_2CORE: &[(&str, f64)] = &[
    ("read input", 8.1),
    ("filter_genes", 5.5),
    ("normalize_total", 0.62),
    ("log1p", 0.19),
    ("highly_variable_genes seurat", 1.54),
    ("highly_variable_genes cell_ranger", 0.62),
    ("subset to HVG (raw frozen)", 1.7),
    ("scale", 9.4),
    ("pca", 158.0),
    ("neighbors", 13.0),
];
const SCANPY_2CORE_TOTAL: f64 = 199.0;

struct Args {
    cells: usize,
    genes: usize,
    seed: u64,
    input: Option<PathBuf>,
    flavor: Flavor,
    json: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        cells: 100_000,
        genes: 20_000,
        seed: 0,
        input: None,
        flavor: Flavor::CellRanger,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--cells" => {
                a.cells = value("--cells")?
                    .parse()
                    .map_err(|e| format!("--cells: {e}"))?
            }
            "--genes" => {
                a.genes = value("--genes")?
                    .parse()
                    .map_err(|e| format!("--genes: {e}"))?
            }
            "--seed" => {
                a.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--input" => a.input = Some(PathBuf::from(value("--input")?)),
            "--json" => a.json = Some(PathBuf::from(value("--json")?)),
            "--flavor" => {
                a.flavor = Flavor::from_name(&value("--flavor")?).map_err(|e| e.to_string())?
            }
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

fn scanpy_seconds(step: &str, flavor: Flavor) -> Option<f64> {
    let key = if step == "highly_variable_genes" {
        format!("{step} {}", flavor.name())
    } else {
        step.to_string()
    };
    SCANPY_2CORE
        .iter()
        .find(|(k, _)| *k == key)
        .map(|&(_, s)| s)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cpu_pipeline: {e}");
            std::process::exit(2);
        }
    };
    let input = args.input.clone().unwrap_or_else(|| {
        let path = std::env::temp_dir().join(format!(
            "scpipe-bench-{}x{}-seed{}.h5ad",
            args.cells, args.genes, args.seed
        ));
        if !path.exists() {
            eprintln!("generating {} ...", path.display());
            let t = Instant::now();
            let adata = generate(&SyntheticParams::new(args.cells, args.genes, args.seed))
                .expect("generate");
            sc_pipeline::io::write_h5ad(&adata, &path).expect("write the benchmark file");
            eprintln!("generated in {:.1} s", t.elapsed().as_secs_f64());
        }
        path
    });

    let start = Instant::now();
    let timer = StepTimer::start("read input");
    let mut adata = sc_pipeline::io::read_h5ad(&input).expect("read the benchmark file");
    let nnz = adata.x.stored_values();
    let mut records: Vec<StepRecord> = vec![timer.finish(
        adata.n_obs(),
        adata.n_vars(),
        format!("{nnz} stored values"),
    )];
    let config = PipelineConfig {
        hvg: Some(HvgOptions {
            flavor: args.flavor,
            ..HvgOptions::default()
        }),
        ..PipelineConfig::default()
    };
    records.extend(run_pipeline(&mut adata, &config, &mut Silent).expect("pipeline"));
    let total = start.elapsed().as_secs_f64();

    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "cpu_pipeline: {} ({} cells x {} genes, {nnz} stored values), {threads} threads",
        input.display(),
        records[0].n_obs,
        records[0].n_vars
    );
    println!(
        "{:<28} {:>10} {:>12} {:>9} {:>9} {:>9}",
        "step", "ours s", "scanpy 2c s", "speed-up", "cells", "peak GiB"
    );
    let mut rows = Vec::new();
    // scanpy's figures are for 100,000 x 20,000 only: other sizes get no comparison.
    let comparable = records[0].n_obs == 100_000 && records[0].n_vars == 20_000;
    if !comparable {
        println!("(scanpy's 2-core figures are for 100,000 x 20,000: no comparison at this size)");
    }
    for r in &records {
        let reference = scanpy_seconds(&r.step, args.flavor).filter(|_| comparable);
        let speedup = reference.map(|s| s / r.seconds.max(1e-9));
        println!(
            "{:<28} {:>10.3} {:>12} {:>9} {:>9} {:>9}",
            r.step,
            r.seconds,
            reference.map_or("-".into(), |s| format!("{s:.2}")),
            speedup.map_or("-".into(), |s| format!("{s:.1}x")),
            r.n_obs,
            r.peak_rss_bytes.map_or("-".into(), |b| format!(
                "{:.2}",
                b as f64 / (1u64 << 30) as f64
            )),
        );
        rows.push(serde_json::json!({
            "step": r.step, "seconds": r.seconds, "scanpy_2core_seconds": reference,
            "n_obs": r.n_obs, "n_vars": r.n_vars, "peak_rss_bytes": r.peak_rss_bytes, "note": r.note,
        }));
    }
    if comparable {
        let speedup = format!("{:.1}x", SCANPY_2CORE_TOTAL / total);
        println!(
            "{:<28} {:>10.3} {:>12.1} {:>9}",
            "total", total, SCANPY_2CORE_TOTAL, speedup
        );
    } else {
        println!("{:<28} {:>10.3}", "total", total);
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "benchmark": "cpu_pipeline",
            "input": input.display().to_string(),
            "n_obs": records[0].n_obs, "n_vars": records[0].n_vars, "nnz": nnz,
            "threads": threads, "hvg_flavor": args.flavor.name(),
            "steps": rows, "total_seconds": total,
            "scanpy_2core_total_seconds": comparable.then_some(SCANPY_2CORE_TOTAL),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).expect("write --json");
    }
}
