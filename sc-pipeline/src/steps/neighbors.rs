//! `neighbors` (scanpy's `pp.neighbors`, `method='umap'`): k nearest neighbours (euclidean,
//! the cell itself included) on `obsm['X_pca']`, exact or within an inverted file
//! (`--neighbors-method`), and UMAP connectivities.
//!
//! Writes `obsp['distances']`, `obsp['connectivities']` and `uns['neighbors']` with scanpy's
//! keys: `connectivities_key`, `distances_key` and `params` (`n_neighbors`, `method`, `metric`,
//! `random_state`, `use_rep`).

use super::kernel_error;
use super::step::{no_device_bytes, Phase, Step, StepEnv};
use crate::anndata::Value;
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::neighbors::ivf::{self, IvfStats};
use sc_kernels::neighbors::{Knn, KnnMethod, NeighborsParams, NeighborsResult, Scan};
use sc_kernels::DenseMatrix;
use std::sync::Arc;

/// Whether the GPU kNN takes the shape.
fn fits_gpu(rep: &DenseMatrix<f32>, k: usize) -> bool {
    rep.n_cols <= sc_kernels::neighbors::GPU_MAX_DIMS && k <= sc_kernels::neighbors::GPU_MAX_K
}

/// The kNN with the cells' rows split across `gpus` (each GPU holds the whole representation,
/// searches for its range of rows), the connectivities then on the first GPU.
fn neighbors_across_gpus(
    gpus: &[Arc<GpuContext>],
    rep: &DenseMatrix<f32>,
    params: &NeighborsParams,
) -> sc_kernels::Result<NeighborsResult> {
    let n = rep.n_rows;
    let k = sc_kernels::neighbors::effective_k(n, params)?;
    if let Some(p) = params.method.ivf_for(n) {
        return ivf_across_gpus(gpus, rep, k, &p, params);
    }
    let parts = sc_kernels::gpu::on_each_gpu(gpus, |r, ctx| {
        let rows = sc_kernels::comm::rank_rows(n, gpus.len(), r);
        sc_kernels::neighbors::knn_rows_gpu(ctx, rep, k, rows)
    })?;
    let scan = parts.iter().map(|p| p.2).reduce(Scan::join);
    let (mut indices, mut distances) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
    for (i, d, _) in parts {
        indices.extend(i);
        distances.extend(d);
    }
    let knn = Knn {
        n_obs: n,
        k,
        indices,
        distances,
    };
    let scan = scan.unwrap_or(Scan::F32);
    sc_kernels::neighbors::neighbors_from_knn_gpu(&gpus[0], knn, scan, params)
}

/// The inverted file's kNN with its blocks split across `gpus` (each builds the same index from
/// the whole representation), the connectivities then on the first GPU.
fn ivf_across_gpus(
    gpus: &[Arc<GpuContext>],
    rep: &DenseMatrix<f32>,
    k: usize,
    ivf: &ivf::IvfParams,
    params: &NeighborsParams,
) -> sc_kernels::Result<NeighborsResult> {
    let (knn, stats) = ivf::knn_ivf_across(gpus, rep, k, ivf)?;
    sc_kernels::neighbors::neighbors_from_knn_gpu(&gpus[0], knn, Scan::Ivf(stats), params)
}

/// The pipeline's row: kNN on `X_pca` (or `--harmony`'s corrected embedding), its work split
/// across the GPUs when there are several.
pub(crate) const ROW: Step = Step {
    name: "neighbors",
    phase: Phase::CellGraph,
    enabled: |c| c.n_neighbors.is_some(),
    run: run_step,
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &sc_kernels::neighbors::KERNELS,
    check_input,
    check_budget,
    beside: false,
    waits_for_beside: false,
};

/// The row's budget check: [`check_device_budget`] for the input's cells and genes.
fn check_budget(a: &AnnData, config: &crate::steps::PipelineConfig, budget: u64) -> Result<()> {
    check_device_budget(config, a.n_obs(), a.n_vars(), budget)
}

/// An inverted file that a GPU run's device budget cannot hold for the input's `n_obs` cells
/// (of `n_vars` genes) is refused before any step, naming what it needs and what to change;
/// the exact kNN and runs on the CPU are not checked here.
fn check_device_budget(
    config: &crate::steps::PipelineConfig,
    n_obs: usize,
    n_vars: usize,
    budget: u64,
) -> Result<()> {
    let (Some(k), Some(p)) = (config.n_neighbors, config.knn_method.ivf_for(n_obs)) else {
        return Ok(());
    };
    let shape = p.settle(n_obs).map_err(kernel_error("neighbors"))?;
    let dims = config.n_comps.unwrap_or(n_vars).min(n_vars);
    let bytes = ivf::device_bytes(n_obs, dims, k.min(n_obs), shape.n_lists);
    if bytes <= budget {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    Err(Error::param(
        "neighbors",
        format!(
            "the inverted file of {n_obs} cells x {dims} dimensions needs {:.2} GiB of device \
             memory, more than the run's {:.2} GiB budget: raise --device-memory-limit (or \
             --pool-max), or run on the CPU (--device cpu)",
            gib(bytes),
            gib(budget)
        ),
    ))
}

/// An inverted file the input's cells cannot hold (more lists than cells, more probes than
/// lists) is refused before any step; filtering may still lower the cells below it.
fn check_input(a: &AnnData, config: &crate::steps::PipelineConfig) -> Result<()> {
    match (config.n_neighbors, config.knn_method.ivf_for(a.n_obs())) {
        (Some(_), Some(p)) => p
            .settle(a.n_obs())
            .map(|_| ())
            .map_err(kernel_error("neighbors")),
        _ => Ok(()),
    }
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let k = env
        .config
        .n_neighbors
        .expect("the row runs only with n_neighbors");
    let rep = env.config.neighbors_use_rep.as_deref();
    let scan = neighbors_on(a, k, rep, env.config.knn_method, env.gpus)?;
    Ok(format!(
        "n_neighbors={k}, {}, euclidean, on {}{}{}",
        match scan {
            Scan::Ivf(s) => ivf_note(&s),
            _ => "exact".to_string(),
        },
        rep.unwrap_or("X_pca"),
        match (env.gpus.len(), scan) {
            (0 | 1, _) => String::new(),
            (g, Scan::Ivf(_)) => format!(", lists split across {g} GPUs"),
            (g, _) => format!(", kNN rows split across {g} GPUs"),
        },
        scan_note(scan, a.n_obs()),
    ))
}

/// What the step's note says of an inverted file's search.
fn ivf_note(s: &IvfStats) -> String {
    let descent = match (s.descent_rounds, s.descent_declined) {
        (0, None) => String::new(),
        (0, Some(g)) => format!(
            ", NN-descent not run (a round would raise the sample's recall by {g:.3}, under {})",
            ivf::DESCENT_MIN_GAIN
        ),
        (r, _) => format!(
            ", {r} round{} of NN-descent ({} neighbours replaced)",
            if r == 1 { "" } else { "s" },
            s.descent_replaced
        ),
    };
    let recall = match (s.recall, s.scan_recall) {
        (Some(r), Some(scan)) if s.descent_rounds > 0 => format!(
            ", recall@{} {:.3} on {} cells ({:.3} after the scan)",
            r.k, r.value, r.cells, scan.value
        ),
        (Some(r), _) => format!(", recall@{} {:.3} on {} cells", r.k, r.value, r.cells),
        (None, _) => String::new(),
    };
    let chosen = match s.target_recall {
        Some(t) => format!(" (the fewest for recall {t} on the sample)"),
        None => String::new(),
    };
    let bound = match s.bound_probes {
        Some(b) if b < s.n_probes => format!(", bounds from the nearest {b}"),
        _ => String::new(),
    };
    let tensor = match s.f32_queries {
        None => String::new(),
        Some(0) => format!(", on tensor cores{bound}"),
        Some(q) => format!(
            ", on tensor cores{bound} ({q} cells not certified by the FP16 bound, scanned again \
             in f32)"
        ),
    };
    format!(
        "ivf ({} lists, {} probed{chosen}, {} cells scanned per cell{tensor}{descent}{recall})",
        s.n_lists,
        s.n_probes,
        s.refs_per_cell.round(),
    )
}

/// What the step's note says of how the candidates were ranked.
fn scan_note(scan: Scan, n_cells: usize) -> String {
    match scan {
        Scan::Cpu | Scan::F32 | Scan::Ivf(_) => String::new(),
        Scan::Pruned(p) => format!(
            ", candidates on tensor cores {} ({:.1}% of the pairs kept by the bounds of {} \
             lists{})",
            match p.all_pairs {
                true => "over all pairs after a bound from the nearest lists",
                false => "within the lists the bounds keep",
            },
            100.0 * p.refs_per_cell / n_cells.max(1) as f64,
            p.n_lists,
            match p.f32_queries {
                0 => String::new(),
                q => format!(", {q} cells not certified by the FP16 bound, scanned again in f32"),
            }
        ),
        Scan::Tensor { f32_queries: 0 } => ", candidates on tensor cores".into(),
        Scan::Tensor { f32_queries } => format!(
            ", candidates on tensor cores ({f32_queries} cells not certified by the FP16 bound, \
             scanned again in f32)"
        ),
    }
}

/// Computes the neighbourhood graph with `n_neighbors` neighbours per cell, on the GPU when X
/// lives there (the same result as the CPU's, see `sc_kernels::neighbors::gpu`), from
/// `obsm[use_rep]` when named (scanpy's `use_rep`), else `X_pca`, or X itself when it has at most 50 genes.
pub fn neighbors(adata: &mut AnnData, n_neighbors: usize, use_rep: Option<&str>) -> Result<()> {
    let gpus: Vec<_> = super::x_gpu(adata).into_iter().collect();
    let method = NeighborsParams::default().method;
    neighbors_on(adata, n_neighbors, use_rep, method, &gpus).map(|_| ())
}

/// [`neighbors`] searched by `method` on the given GPUs (none: the CPU), wherever X is; with
/// several, each searches the neighbours of a share of the cells. Says how the kNN's
/// candidates were ranked.
pub fn neighbors_on(
    adata: &mut AnnData,
    n_neighbors: usize,
    use_rep: Option<&str>,
    method: KnnMethod,
    gpus: &[Arc<GpuContext>],
) -> Result<Scan> {
    const STEP: &str = "neighbors";
    if n_neighbors < 2 {
        return Err(Error::param(
            STEP,
            format!("n_neighbors = {n_neighbors}: at least 2 (the cell itself counts)"),
        ));
    }
    if n_neighbors > adata.n_obs() {
        return Err(Error::param(
            STEP,
            format!(
                "n_neighbors = {n_neighbors} exceeds the {} cells",
                adata.n_obs()
            ),
        ));
    }
    let (rep, rep_name) = super::representation(adata, use_rep, "neighbors")?;
    let params = NeighborsParams {
        n_neighbors,
        method,
        ..NeighborsParams::default()
    };
    let result = match gpus {
        [ctx] if fits_gpu(&rep, n_neighbors) => {
            sc_kernels::neighbors::neighbors_gpu(ctx, &rep, &params)
        }
        [_, _, ..] if fits_gpu(&rep, n_neighbors) => neighbors_across_gpus(gpus, &rep, &params),
        _ => sc_kernels::neighbors::neighbors(&rep, &params),
    }
    .map_err(kernel_error(STEP))?;
    let scan = result.scan;
    adata.obsp.insert("distances".into(), result.distances);
    adata
        .obsp
        .insert("connectivities".into(), result.connectivities);
    let mut p = vec![
        ("n_neighbors", Value::int(n_neighbors as i64)),
        ("method", Value::str("umap")),
        ("metric", Value::str("euclidean")),
        ("random_state", Value::int(0)),
    ];
    if rep_name != "X" {
        p.push(("use_rep", Value::str(&rep_name)));
    }
    adata.uns.insert(
        "neighbors".into(),
        Value::dict([
            ("connectivities_key", Value::str("connectivities")),
            ("distances_key", Value::str("distances")),
            ("params", Value::dict(p)),
        ]),
    );
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::PipelineConfig;

    #[test]
    fn an_index_the_budget_cannot_hold_is_refused_before_the_run() {
        let config = PipelineConfig::default();
        const GIB: u64 = 1 << 30;
        // 1 M cells x 50 PCs: about 1.1 GiB.
        let e = check_device_budget(&config, 1_000_000, 20_000, GIB / 2).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("neighbors") && msg.contains("--device-memory-limit"),
            "{msg}"
        );
        assert!(check_device_budget(&config, 1_000_000, 20_000, 8 * GIB).is_ok());
        // Below the inverted file's size, and with the exact kNN asked for: not checked here.
        assert!(check_device_budget(&config, 100_000, 20_000, 1).is_ok());
        let exact = PipelineConfig {
            knn_method: KnnMethod::Exact,
            ..config.clone()
        };
        assert!(check_device_budget(&exact, 1_000_000, 20_000, 1).is_ok());
        let off = PipelineConfig {
            n_neighbors: None,
            ..config
        };
        assert!(check_device_budget(&off, 1_000_000, 20_000, 1).is_ok());
    }
}
