//! The steps after neighbors (umap, leiden, rank_genes_groups) on a file `scpipe run` wrote
//! (its graph, `.raw` and leiden labels), each timed `--repeat` times in this process on the CPU
//! (`--threads`, default all cores) and, with `--gpu`, each also on GPU 0 (their kernels compiled
//! before the timing; the markers' `.raw` copied to the GPU inside the timing, as in a run
//! whose writer holds `.raw` on the host). Prints one JSON line a measurement; `scanpy_graph_steps.py` times scanpy
//! on the same file.
//!
//! `cargo bench -p benches --bench graph_steps -- FILE.h5ad [--threads N] [--gpu] [--repeat R]`

use sc_pipeline::run::{DeviceOptions, GpuRun, MarkerOptions};
use sc_pipeline::steps;
use serde_json::json;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(path) = args.first().filter(|a| !a.starts_with("--")) else {
        eprintln!("graph_steps: give an h5ad written by `scpipe run` (skipped)");
        return;
    };
    let threads = benches::flag_value(&args, "--threads").map(|t| t.parse::<usize>().unwrap());
    let repeat: usize = benches::flag_value(&args, "--repeat").map_or(2, |r| r.parse().unwrap());
    if let Some(t) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .unwrap();
    }
    let threads = rayon::current_num_threads();
    let t = Instant::now();
    let mut a = sc_pipeline::io::read_h5ad(path).unwrap();
    eprintln!(
        "read {path} in {:.1} s: {} cells",
        t.elapsed().as_secs_f64(),
        a.n_obs()
    );
    let n = a.n_obs();
    let report = |step: &str, device: &str, run: usize, seconds: f64, note: String| {
        println!(
            "{}",
            json!({"step": step, "device": device, "threads": threads, "run": run,
                   "seconds": seconds, "cells": n, "note": note})
        )
    };
    let gpu = args.iter().any(|x| x == "--gpu").then(|| {
        let (run, _) = GpuRun::set_up(0, &DeviceOptions::default(), None).unwrap();
        for k in sc_kernels::umap::KERNELS
            .into_iter()
            .chain([sc_kernels::leiden::KERNELS])
            .chain(sc_kernels::rank_genes::KERNELS)
        {
            run.ctx.load_kernels(k).unwrap();
        }
        run
    });
    for r in 0..repeat {
        let t = Instant::now();
        let l = steps::umap_on(&mut a, &Default::default(), None).unwrap();
        report("umap", "cpu", r, t.elapsed().as_secs_f64(), l.init);
        if let Some(g) = &gpu {
            let t = Instant::now();
            let l = steps::umap_on(&mut a, &Default::default(), Some(&g.ctx)).unwrap();
            report("umap", "gpu", r, t.elapsed().as_secs_f64(), l.init);
        }
        let t = Instant::now();
        let p = steps::leiden(&mut a, &Default::default(), "leiden").unwrap();
        report(
            "leiden",
            "cpu",
            r,
            t.elapsed().as_secs_f64(),
            format!("{} clusters", p.n_communities),
        );
        if let Some(g) = &gpu {
            let t = Instant::now();
            let p = steps::leiden_on(&mut a, &Default::default(), "leiden_gpu", Some(&g.ctx));
            let p = p.unwrap();
            report(
                "leiden",
                "gpu",
                r,
                t.elapsed().as_secs_f64(),
                format!("{} clusters", p.n_communities),
            );
        }
        let m = MarkerOptions::default();
        let t = Instant::now();
        steps::rank_genes_groups(&mut a, "leiden", &m.params).unwrap();
        report(
            "rank_genes_groups",
            "cpu",
            r,
            t.elapsed().as_secs_f64(),
            m.params.method.to_string(),
        );
        if let Some(g) = &gpu {
            let t = Instant::now();
            steps::rank_genes_groups_on(&mut a, "leiden", &m.params, Some(&g.ctx)).unwrap();
            report(
                "rank_genes_groups",
                "gpu",
                r,
                t.elapsed().as_secs_f64(),
                m.params.method.to_string(),
            );
        }
    }
}
