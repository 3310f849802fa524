//! kNN on the GPU. Exact: candidates ranked by tensor cores (FP16, with the bound's
//! certificate) against the CUDA cores' f32 scan, on the same data in one process; the
//! neighbour sets compared row by row. Approximate (`--ivf`): the inverted file at each asked
//! shape, its time and its recall against the exact kNN over every cell (and the sampled
//! recall the pipeline reports), its tensor-core scan against its f32 scan (without
//! `--no-f32`), their neighbour sets compared.
//!
//! .gpu/bin/bench-knn [--cells 200000,1000000] [--dims 50] [--k 15] [--runs 3]
//!     [--h5ad FILE (its obsm X_pca, instead of workload C's points)]
//!     [--raw FILE (little-endian f32, --dims columns, instead)] [--json OUT]
//!     [--no-f32 (the exact kNN only as the pipeline runs it)]
//!     [--exact f32,auto,tensor,pruned,pruned:LISTS/PROBES[@SHARE],... (the exact kNN's variants, each
//!     compared with the first: the f32 scan, as the pipeline runs it, tensor cores over all
//!     pairs, tensor cores within pruned lists with the default or the given lists and pass-1
//!     probes, all pairs scanned above SHARE of them kept; default f32,auto)]
//!     [--ivf default,1000/50,1000/r0.9,default+b16,... (n_lists/n_probes, or the probes chosen
//!     for a recall; default: the pipeline's; +bN: the tensor scan's pass 1 over N lists)]
//!     [--gpus 1,2,4 (each --ivf shape split across that many GPUs of this host, each count
//!     timed once after a warm-up; without the exact kNN, the recall sampled)]
//!     [--compare-f32 (with --gpus: first the f32 and the tensor scan on one GPU, compared)]
//!     [--plan (each --ivf shape's index only: its probes and the references a cell's search
//!     scans, without the exact kNN or the search; for sizing at atlas scale)]
//!
//! Per data set and search: one untimed run, then `--runs` timed runs (the kNN on data already
//! on the device, indices and distances downloaded); the median. Then the two exact results:
//! rows whose index lists differ, and of those, rows that differ other than by ties (a
//! neighbour swapped for another at the same distance).

use sc_kernels::gpu::GpuContext;
use sc_kernels::neighbors::ivf::{self, IvfParams, SampleKnn};
use sc_kernels::neighbors::pruned::PrunedParams;
use sc_kernels::neighbors::{knn_exact_gpu_with, Knn, Products};
use sc_kernels::DenseMatrix;
use sc_pipeline::run::allocator::{build, AllocatorChoice};
use serde_json::json;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("knn: {e}");
        std::process::exit(1);
    }
}

fn data_sets(args: &[String]) -> Result<Vec<(String, DenseMatrix<f32>)>, String> {
    if let Some(path) = benches::flag_value(args, "--h5ad") {
        let a = sc_pipeline::io::read_h5ad(&path).map_err(|e| e.to_string())?;
        let pcs = a
            .obsm
            .get("X_pca")
            .ok_or(format!("{path} has no obsm X_pca"))?;
        let values: Vec<f32> = match &pcs.data {
            sc_pipeline::anndata::ArrayData::F32(v) => v.clone(),
            sc_pipeline::anndata::ArrayData::F64(v) => v.iter().map(|&x| x as f32).collect(),
            other => return Err(format!("X_pca holds {}", other.type_name())),
        };
        let x = DenseMatrix::new(pcs.shape[0], pcs.shape[1], values).map_err(|e| e.to_string())?;
        return Ok(vec![(format!("{path} X_pca"), x)]);
    }
    let dims: usize = benches::flag_value(args, "--dims")
        .map_or(Ok(50), |v| v.parse())
        .map_err(|e| format!("--dims: {e}"))?;
    if let Some(path) = benches::flag_value(args, "--raw") {
        let bytes = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
        let values: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let n = values.len() / dims;
        let x = DenseMatrix::new(n, dims, values).map_err(|e| format!("{path}: {e}"))?;
        return Ok(vec![(format!("{path} ({n} x {dims})"), x)]);
    }
    let cells = benches::flag_value(args, "--cells").unwrap_or("200000,1000000".into());
    cells
        .split(',')
        .map(|c| {
            let n: usize = c.parse().map_err(|e| format!("--cells {c}: {e}"))?;
            Ok((
                format!("workload C {n} x {dims}"),
                benches::workload_c_points(n, dims).0,
            ))
        })
        .collect()
}

/// `--ivf default,1000/50,1000/r0.9,...`: (name, parameters) per shape: `default`, or
/// LISTS/PROBES where PROBES may be `rT` (the fewest reaching recall T on the sample) and
/// LISTS `default`; either may end in `+bN` (the tensor scan's pass 1 over N lists).
fn ivf_specs(args: &[String]) -> Result<Vec<(String, IvfParams)>, String> {
    let Some(list) = benches::flag_value(args, "--ivf") else {
        return Ok(vec![]);
    };
    list.split(',')
        .map(|spec| {
            let bad = |e: &dyn std::fmt::Display| format!("--ivf {spec}: {e}");
            let (s, bound_probes) = match spec.split_once("+b") {
                Some((s, b)) => (s, Some(b.parse::<usize>().map_err(|e| bad(&e))?)),
                None => (spec, None),
            };
            if s == "default" {
                let params = IvfParams {
                    bound_probes,
                    ..IvfParams::default()
                };
                return Ok((spec.to_string(), params));
            }
            let (l, p) = s
                .split_once('/')
                .ok_or(format!("--ivf {spec}: LISTS/PROBES"))?;
            let n_lists = match l {
                "default" => None,
                l => Some(l.parse::<usize>().map_err(|e| bad(&e))?),
            };
            let (n_probes, target_recall) = match p.strip_prefix('r') {
                Some(t) => (None, Some(t.parse::<f64>().map_err(|e| bad(&e))?)),
                None => (Some(p.parse::<usize>().map_err(|e| bad(&e))?), None),
            };
            let params = IvfParams {
                n_lists,
                n_probes,
                target_recall,
                descent_rounds: None,
                bound_probes,
            };
            Ok((spec.to_string(), params))
        })
        .collect()
}

/// The exact kNN's variants to run (`--exact`, else `--no-f32`'s or the default's).
fn exact_variants(args: &[String]) -> Result<Vec<Products>, String> {
    let Some(list) = benches::flag_value(args, "--exact") else {
        return Ok(match args.iter().any(|a| a == "--no-f32") {
            true => vec![Products::Auto],
            false => vec![Products::F32, Products::Auto],
        });
    };
    list.split(',')
        .map(|v| match v {
            "f32" => Ok(Products::F32),
            "auto" => Ok(Products::Auto),
            "tensor" => Ok(Products::Tensor),
            "pruned" => Ok(Products::Pruned(PrunedParams::default())),
            other => {
                let bad =
                    || format!("--exact {other}: f32, auto, tensor, pruned or pruned:LISTS/PROBES");
                let (l, p) = other
                    .strip_prefix("pruned:")
                    .and_then(|s| s.split_once('/'))
                    .ok_or_else(bad)?;
                let n_lists = match l {
                    "default" => None,
                    l => Some(l.parse().map_err(|_| bad())?),
                };
                // PROBES or PROBES@SHARE (the kept share above which all pairs are scanned).
                let (p, share) = p.split_once('@').map_or((p, None), |(p, s)| (p, Some(s)));
                let first_probes = Some(p.parse().map_err(|_| bad())?);
                let all_pairs_above = share.map(|s| s.parse().map_err(|_| bad())).transpose()?;
                Ok(Products::Pruned(PrunedParams {
                    n_lists,
                    first_probes,
                    all_pairs_above,
                }))
            }
        })
        .collect()
}

/// One untimed run of `f`, then `runs` (at least 1) timed: (the first's seconds, the timed
/// runs' seconds, the last result).
fn timed<T>(
    runs: usize,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<(f64, Vec<f64>, T), String> {
    let t = Instant::now();
    f()?;
    let first = t.elapsed().as_secs_f64();
    let mut secs = vec![];
    let mut last = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        last = Some(f()?);
        secs.push(t.elapsed().as_secs_f64());
    }
    Ok((first, secs, last.expect("at least one run")))
}

/// `--gpus`: each shape's kNN split across each count of GPUs (contexts and pools made once,
/// kernels loaded by a warm-up on the first cells), the time of one run with the uploads.
fn across_gpus(
    name: &str,
    x: &DenseMatrix<f32>,
    k: usize,
    counts: &str,
    specs: &[(String, IvfParams)],
    compare_f32: bool,
) -> Result<Vec<serde_json::Value>, String> {
    let counts: Vec<usize> = counts
        .split(',')
        .map(|c| c.parse().map_err(|e| format!("--gpus {c}: {e}")))
        .collect::<Result<_, _>>()?;
    let most = counts.iter().copied().max().unwrap_or(1);
    let gpus = (0..most)
        .map(|i| {
            let device = rmm_core::Device::cuda(i).map_err(|e| format!("GPU {i}: {e}"))?;
            let stream = device.new_stream().map_err(|e| e.to_string())?;
            let resource = build(AllocatorChoice::Pool, &device, None, None)
                .map_err(|e| e.to_string())?
                .resource;
            GpuContext::new(&device, &stream, resource)
                .map(std::sync::Arc::new)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, String>>()?;
    let head = x.n_rows.min(50_000);
    let warm = DenseMatrix::new(head, x.n_cols, x.data[..head * x.n_cols].to_vec())
        .map_err(|e| e.to_string())?;
    let mut out = vec![];
    for (spec, p) in specs {
        ivf::knn_ivf_across(&gpus, &warm, k, p).map_err(|e| e.to_string())?;
        if compare_f32 {
            out.extend(ivf_products_on_one_gpu(name, &gpus[0], x, k, spec, p)?);
        }
        let mut one = None;
        for &g in &counts {
            let t = Instant::now();
            let (_, s) = ivf::knn_ivf_across(&gpus[..g], x, k, p).map_err(|e| e.to_string())?;
            let secs = t.elapsed().as_secs_f64();
            let base = *one.get_or_insert(secs);
            let recall = s.recall.map_or(f64::NAN, |r| r.value);
            println!(
                "{name}, k {k}: ivf {spec} on {g} GPU(s): {secs:.3} s ({:.2}x one GPU); {} lists, {} probes (pass 1 over {:?}), {:.0} refs per cell, f32 re-scans {:?}, recall@{k} {recall:.4} sampled",
                base / secs, s.n_lists, s.n_probes, s.bound_probes, s.refs_per_cell, s.f32_queries
            );
            out.push(
                json!({"data": name, "n": x.n_rows, "d": x.n_cols, "k": k, "ivf": spec,
                "gpus": g, "seconds": secs, "speedup": base / secs, "n_lists": s.n_lists,
                "n_probes": s.n_probes, "bound_probes": s.bound_probes,
                "refs_per_cell": s.refs_per_cell, "f32_queries": s.f32_queries,
                "recall_sampled": recall}),
            );
        }
    }
    Ok(out)
}

/// `--compare-f32` with `--gpus`: the inverted file on one GPU with the f32 scan, then with
/// the tensor scan (each timed once, the index built in both), the rows compared.
fn ivf_products_on_one_gpu(
    name: &str,
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    k: usize,
    spec: &str,
    p: &IvfParams,
) -> Result<Vec<serde_json::Value>, String> {
    let xd = ctx.upload(&x.data).map_err(|e| e.to_string())?;
    let mut runs = vec![];
    let mut out = vec![];
    for products in [Products::F32, Products::Auto] {
        let t = Instant::now();
        let part = ivf::knn_ivf_gpu_with(ctx, x, &xd, k, p, (0, 1), products)
            .map_err(|e| e.to_string())?;
        let (knn, s) = ivf::join_parts(x.n_rows, k, vec![part]).map_err(|e| e.to_string())?;
        let secs = t.elapsed().as_secs_f64();
        let recall = s.recall.map_or(f64::NAN, |r| r.value);
        println!(
            "{name}, k {k}: ivf {spec} {products:?} on one GPU: {secs:.3} s; {} lists, {} probes, {:.0} refs per cell, f32 re-scans {:?}, recall@{k} {recall:.4} sampled",
            s.n_lists, s.n_probes, s.refs_per_cell, s.f32_queries
        );
        out.push(
            json!({"data": name, "n": x.n_rows, "d": x.n_cols, "k": k, "ivf": spec,
            "products": format!("{products:?}"), "seconds": secs, "f32_queries": s.f32_queries,
            "n_lists": s.n_lists, "n_probes": s.n_probes, "recall_sampled": recall}),
        );
        runs.push((knn, secs));
    }
    let (differ, not_ties) = compare(&runs[0].0, &runs[1].0);
    println!(
        "{name}: ivf {spec}: f32 {:.2}x the tensor scan's time; rows differing {differ}, not by ties {not_ties}",
        runs[0].1 / runs[1].1
    );
    out.push(
        json!({"data": name, "ivf": spec, "tensor_speedup": runs[0].1 / runs[1].1,
        "rows_differing": differ, "rows_differing_not_ties": not_ties}),
    );
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (rows whose lists differ, rows that differ other than by ties).
fn compare(a: &Knn, b: &Knn) -> (usize, usize) {
    let (mut differ, mut not_ties) = (0, 0);
    for i in 0..a.n_obs {
        let ((ai, ad), (bi, bd)) = (a.row(i), b.row(i));
        if ai == bi && ad == bd {
            continue;
        }
        differ += 1;
        // Ties only: the same distances, and every index that differs sits at the row's largest
        // distance or at one shared by another neighbour of the row.
        let last = ad[a.k - 1];
        let ties = ad == bd
            && (0..a.k).all(|t| {
                ai[t] == bi[t] || ad[t] == last || ad.iter().filter(|&&v| v == ad[t]).count() > 1
            });
        if !ties {
            not_ties += 1;
        }
    }
    (differ, not_ties)
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if !rmm_cuda::gpu_available() {
        println!("knn: no GPU; nothing to measure");
        return Ok(());
    }
    let k: usize = benches::flag_value(&args, "--k")
        .map_or(Ok(15), |v| v.parse())
        .map_err(|e| format!("--k: {e}"))?;
    let runs: usize = benches::flag_value(&args, "--runs")
        .map_or(Ok(3), |v| v.parse())
        .map_err(|e| format!("--runs: {e}"))?;
    let device = rmm_core::Device::cuda(0).map_err(|e| e.to_string())?;
    let stream = device.new_stream().map_err(|e| e.to_string())?;
    let resource = build(AllocatorChoice::Pool, &device, None, None)
        .map_err(|e| e.to_string())?
        .resource;
    let ctx = GpuContext::new(&device, &stream, resource).map_err(|e| e.to_string())?;
    let mut results = vec![];
    for (name, x) in data_sets(&args)? {
        let (n, d) = (x.n_rows, x.n_cols);
        let xd = ctx.upload(&x.data).map_err(|e| e.to_string())?;
        if let Some(counts) = benches::flag_value(&args, "--gpus") {
            let compare_f32 = args.iter().any(|a| a == "--compare-f32");
            results.extend(across_gpus(
                &name,
                &x,
                k,
                &counts,
                &ivf_specs(&args)?,
                compare_f32,
            )?);
            continue;
        }
        if args.iter().any(|a| a == "--plan") {
            for (spec, p) in ivf_specs(&args)? {
                let t = Instant::now();
                let s = ivf::plan_ivf_gpu(&ctx, &x, &xd, k, &p).map_err(|e| e.to_string())?;
                let secs = t.elapsed().as_secs_f64();
                println!(
                    "{name}, k {k}: plan {spec}: {} lists, {} probes, {:.0} refs per cell ({:.4} of the cells); index built in {secs:.2} s",
                    s.n_lists, s.n_probes, s.refs_per_cell, s.refs_per_cell / n as f64
                );
                results.push(json!({"data": name, "n": n, "d": d, "k": k, "plan": spec,
                    "n_lists": s.n_lists, "n_probes": s.n_probes,
                    "refs_per_cell": s.refs_per_cell, "build_s": secs}));
            }
            continue;
        }
        let mut knns = vec![];
        let mut times = vec![];
        let variants = exact_variants(&args)?;
        for &products in &variants {
            let (first, secs, (knn, scan)) = timed(runs, || {
                let r = knn_exact_gpu_with(&ctx, &xd, n, d, k, products).map_err(|e| e.to_string());
                ctx.synchronize().map_err(|e| e.to_string())?;
                r
            })?;
            let m = median(secs.clone());
            println!("{name}, k {k}: {products:?}: {m:.3} s (first {first:.3} s, runs {secs:.3?}), {scan:?}");
            results.push(json!({"data": name, "n": n, "d": d, "k": k,
                "products": format!("{products:?}"), "median_s": m, "first_s": first,
                "runs_s": secs, "scan": format!("{scan:?}")}));
            knns.push(knn);
            times.push(m);
        }
        for (i, v) in variants.iter().enumerate().skip(1) {
            let (differ, not_ties) = compare(&knns[0], &knns[i]);
            println!(
                "{name}: {v:?} against {:?}: {:.2}x faster; rows differing {differ}, not by ties {not_ties}",
                variants[0],
                times[0] / times[i]
            );
            results.push(json!({"data": name, "variant": format!("{v:?}"),
                "against": format!("{:?}", variants[0]), "speedup": times[0] / times[i],
                "rows_differing": differ, "rows_differing_not_ties": not_ties}));
        }
        let exact = knns.pop().expect("the exact kNN ran");
        let exact_s = times.pop().expect("timed");
        for spec in ivf_specs(&args)? {
            let p = spec.1;
            let mut ivf_runs = vec![];
            let products: &[Products] = match args.iter().any(|a| a == "--no-f32") {
                true => &[Products::Auto],
                false => &[Products::F32, Products::Auto],
            };
            for &products in products {
                let (first, secs, (knn, stats)) = timed(runs, || {
                    let part = ivf::knn_ivf_gpu_with(&ctx, &x, &xd, k, &p, (0, 1), products)
                        .map_err(|e| e.to_string())?;
                    ivf::join_parts(n, k, vec![part]).map_err(|e| e.to_string())
                })?;
                let m = median(secs.clone());
                let every = SampleKnn {
                    cells: (0..n as u32).collect(),
                    k,
                    indices: exact.indices.clone(),
                    distances: exact.distances.clone(),
                };
                let full = ivf::recall(&every, &knn).value;
                let sampled = stats.recall.map_or(f64::NAN, |r| r.value);
                println!(
                    "{name}, k {k}: ivf {} {products:?} ({} lists, {} probes, {:.0} refs per cell, f32 re-scans {:?}): {m:.3} s (first {first:.3} s, runs {secs:.3?}); {:.2}x the exact {exact_s:.3} s; recall@{k} {full:.4} over every cell, {sampled:.4} sampled",
                    spec.0, stats.n_lists, stats.n_probes, stats.refs_per_cell, stats.f32_queries, exact_s / m
                );
                results.push(json!({"data": name, "n": n, "d": d, "k": k, "ivf": spec.0,
                    "products": format!("{products:?}"), "f32_queries": stats.f32_queries,
                    "n_lists": stats.n_lists, "n_probes": stats.n_probes,
                    "refs_per_cell": stats.refs_per_cell, "median_s": m, "first_s": first,
                    "runs_s": secs, "exact_s": exact_s, "speedup": exact_s / m,
                    "recall_all": full, "recall_sampled": sampled}));
                ivf_runs.push((knn, m));
            }
            if let [(f32_knn, f32_s), (tc_knn, tc_s)] = &ivf_runs[..] {
                let (differ, not_ties) = compare(f32_knn, tc_knn);
                println!(
                    "{name}: ivf {}: f32 {:.2}x the tensor scan's time; rows differing {differ}, not by ties {not_ties}",
                    spec.0,
                    f32_s / tc_s
                );
                results.push(
                    json!({"data": name, "ivf": spec.0, "tensor_speedup": f32_s / tc_s,
                    "rows_differing": differ, "rows_differing_not_ties": not_ties}),
                );
            }
        }
    }
    if let Some(out) = benches::flag_value(&args, "--json") {
        let doc = json!({"device": benches::describe_device(&device), "results": results});
        std::fs::write(&out, serde_json::to_string_pretty(&doc).unwrap())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
