//! `_sc_call`: one step of scpipe on the parts of a Python AnnData, through the same step
//! functions as `scpipe run` (`sc_pipeline::steps`), or the whole recipe through its runner.
//!
//! The step runs on a thread of its own while the caller waits without the GIL and wakes every
//! 50 ms for Python's signals: Ctrl-C raises `KeyboardInterrupt` at once and the step's result
//! is dropped when it ends, so the user's AnnData is left as it was before the call (the step
//! works on its own copy of the parts, which the Python side writes back only on success).

use super::model_out::Sections;
use super::{gpu, model_in, model_out};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sc_kernels::aggregate::{AggFuncs, Aggregates, LEFT_OUT};
use sc_kernels::dpt::BranchingParams;
use sc_kernels::draw_graph::Fa2Params;
use sc_kernels::filter::{CellFilter, GeneFilter};
use sc_kernels::harmony::{HarmonyFlavor, HarmonyParams};
use sc_kernels::hvg::Flavor;
use sc_kernels::ingest::TransformParams;
use sc_kernels::kmeans::KMeansParams;
use sc_kernels::leiden::LeidenParams;
use sc_kernels::neighbors::bbknn::BbknnParams;
use sc_kernels::neighbors::ivf::IvfParams;
use sc_kernels::neighbors::KnnMethod;
use sc_kernels::normalize::NormalizeParams;
use sc_kernels::pearson::PearsonParams;
use sc_kernels::rank_genes::logreg::LogregParams;
use sc_kernels::rank_genes::{Method, RankGenesParams};
use sc_kernels::scale::ScaleParams;
use sc_kernels::score_genes::ScoreGenesParams;
use sc_kernels::scrublet::{Preparation, ScrubletParams};
use sc_kernels::tsne::TsneParams;
use sc_kernels::umap::{Init, UmapParams};
use sc_pipeline::anndata::Matrix;
use sc_pipeline::run::{GpuRun, PipelineConfig};
use sc_pipeline::steps::{
    self, AggregateAxis, HarmonyOptions, HvgOptions, LeidenOptions, MitoPrefix, ScrubletOptions,
};
use sc_pipeline::AnnData;
use std::sync::mpsc;
use std::time::Duration;

/// What a call computes, its parameters parsed while the GIL is held.
enum Call {
    Qc {
        qc_vars: Vec<String>,
        percent_top: Option<Vec<usize>>,
        log1p: bool,
    },
    FilterCells(CellFilter),
    FilterGenes(GeneFilter),
    Normalize(NormalizeParams),
    Log1p(Option<f64>),
    Hvg(HvgOptions),
    /// The obs columns to regress on.
    RegressOut(Vec<String>),
    /// The residuals; with `check_values`, whether X held only whole numbers is read first, in
    /// the same call (scanpy's raw-count warning without a second round trip).
    Pearson {
        params: PearsonParams,
        check_values: bool,
    },
    /// Whether X holds only whole numbers (the raw-count warnings), read where X lies.
    WholeNumbers,
    Scrublet {
        options: ScrubletOptions,
        /// `adata_sim`'s matrix and doublet parents, when the caller simulated them.
        simulated: Option<Box<(Matrix, Vec<[u32; 2]>)>>,
    },
    SimulateDoublets {
        ratio: f64,
        umi_subsampling: f64,
        seed: u64,
    },
    HvgPearson {
        theta: f64,
        clip: Option<f64>,
        n_top_genes: usize,
        batch_key: Option<String>,
    },
    ScoreGenes {
        /// Columns of the listed genes and of the gene pool, resolved by the Python side.
        genes: Vec<usize>,
        pool: Vec<usize>,
        params: ScoreGenesParams,
        score_name: String,
    },
    Aggregate {
        /// Each row's group, or `LEFT_OUT`.
        groups: Vec<u32>,
        n_groups: usize,
        funcs: AggFuncs,
        dof: u32,
        axis: AggregateAxis,
    },
    /// ComBat on X: each cell's batch, the batches, numeric covariates.
    Combat {
        groups: Vec<u32>,
        n_groups: usize,
        covariates: Vec<Vec<f64>>,
    },
    Scale(ScaleParams),
    Pca(usize),
    Harmony(HarmonyOptions),
    Neighbors {
        n_neighbors: usize,
        use_rep: Option<String>,
        method: KnnMethod,
    },
    Umap(UmapParams),
    /// t-SNE of `obsm['rep']` into `obsm[key]`.
    Tsne {
        params: TsneParams,
        key: String,
    },
    /// ForceAtlas2 of the graph from `obsm['start']` when given, else from numpy's draws of
    /// `seed`, into `obsm['X_draw_graph_{key_ext or 'fa'}']`.
    DrawGraph {
        params: Fa2Params,
        seed: u32,
        key_ext: Option<String>,
    },
    /// Diffusion pseudotime from `obsm['X_diffmap']`: its eigenvalues (one per component
    /// used) and the root cell (none: only the branchings); the branchings when asked.
    Dpt {
        evals: Vec<f32>,
        root: Option<usize>,
        branching: Option<BranchingParams>,
    },
    /// Densities of `obsm['xy']` per group into `obs[key]`.
    EmbeddingDensity {
        groups: Vec<u32>,
        n_groups: usize,
        key: String,
    },
    /// PAGA's connectivities of the groups over `obsp['distances']`.
    Paga {
        groups: Vec<u32>,
        n_groups: usize,
    },
    /// The diffusion map of the graph: (n_comps, seed).
    Diffmap(usize, u64),
    /// The batch-balanced graph of `obsm['rep']` (the representation the Python side chose):
    /// each cell's batch, the batches, bbknn's parameters.
    Bbknn {
        groups: Vec<u32>,
        n_groups: usize,
        params: BbknnParams,
    },
    /// The new cells mapped onto a reference (its parts gathered by the Python side).
    Ingest(Box<steps::IngestReference>),
    /// k-means of `obsm['rep']` (the representation the Python side chose) into `obs[key]`.
    KMeans {
        params: KMeansParams,
        key: String,
    },
    /// (resolution's parameters, obs column) pairs.
    Leiden(Vec<(LeidenParams, String)>),
    Markers {
        groupby: String,
        params: RankGenesParams,
    },
    /// `rank_genes_groups(method='logreg')`.
    MarkersLogreg {
        groupby: String,
        params: LogregParams,
        n_genes: Option<usize>,
    },
    Recipe(Box<PipelineConfig>),
}

/// What a call hands back beside the model: numbers a step returns rather than writes
/// (`normalize_total`'s per-cell factors, which the Python side stores under `key_added`;
/// `aggregate`'s tables, from which it builds a new AnnData).
#[derive(Default)]
struct Extra {
    norm_factor: Option<Vec<f64>>,
    whole_numbers: Option<bool>,
    aggregates: Option<Aggregates>,
    /// What ended logreg's fit short of `tol`, which Python gives as scikit-learn's warning.
    logreg_shortfall: Option<String>,
}

/// Runs `step` with `params` on `parts` (see [`model_in`]), on `device` ("cpu" or "gpu");
/// returns the model afterwards (see [`model_out`]), X in it when `return_x`. `in_place`: a
/// value-only step (`normalize_total`, `log1p`) writes into X's own values on the GPU (as
/// rapids-singlecell does), and X does not come back; it checks its input before its one
/// write, and is waited for to its end (milliseconds), so Ctrl-C cannot leave X half written.
#[pyfunction]
#[pyo3(signature = (step, parts, params, device, return_x, progress=false, in_place=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _sc_call<'py>(
    py: Python<'py>,
    step: &str,
    parts: &Bound<'py, PyDict>,
    params: &Bound<'py, PyDict>,
    device: &str,
    return_x: bool,
    progress: bool,
    in_place: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let call = parse(step, params)?;
    if in_place && !matches!(call, Call::Normalize(_) | Call::Log1p(_)) {
        return Err(PyValueError::new_err(format!(
            "{step} cannot work in place on X (only normalize_total and log1p do)"
        )));
    }
    let gpu = match device {
        "cpu" => None,
        "gpu" => Some(gpu::current()?),
        other => {
            return Err(PyValueError::new_err(format!(
                "device must be 'cpu' or 'gpu', not '{other}'"
            )))
        }
    };
    let started = std::time::Instant::now();
    // X goes back where it came from (a host X uploaded for the step comes back to the host).
    let x_on_device = match parts.get_item("X")? {
        Some(x) => model_in::device_part(&x)?,
        None => false,
    };
    let passed_obsp: Vec<String> = match parts.get_item("obsp")? {
        Some(graphs) => graphs
            .cast::<PyDict>()?
            .keys()
            .iter()
            .map(|k| k.extract())
            .collect::<PyResult<_>>()?,
        None => Vec::new(),
    };
    let lend_x = reads_x_only(&call) || in_place;
    // A step that only reads X, on the GPU: a host X goes straight there (no host copy).
    let upload_x = gpu.is_some() && reads_x_only(&call) && reads_x_on_device(&call);
    let adata = model_in::anndata(parts, gpu.as_ref().map(|g| &g.ctx), lend_x, upload_x)?;
    if in_place && !matches!(adata.x, sc_pipeline::anndata::Matrix::Device(_)) {
        return Err(PyValueError::new_err(format!(
            "{step} works in place only on a GPU X (scpipe.get.anndata_to_GPU)"
        )));
    }
    // Lent arrays must outlive the step, also when Ctrl-C returns before it ends.
    let keep_alive = parts.clone().unbind();
    let parts_in = started.elapsed().as_secs_f64();
    let (tx, rx) = mpsc::channel();
    let step_name = step.to_string();
    // Waited on without the GIL, which needs a receiver that may cross threads.
    let rx = parking_lot::Mutex::new(rx);
    std::thread::Builder::new()
        .name(format!("scpipe {step}"))
        .spawn(move || {
            let mut adata = adata;
            let start = std::time::Instant::now();
            let mut r = run(&call, &mut adata, gpu.as_deref(), progress)
                .map(|extra| (adata, extra, start.elapsed().as_secs_f64()));
            // Nothing may read lent memory once the parts can go.
            if let Some(g) = &gpu {
                if let Err(e) = g.ctx.synchronize() {
                    r = Err(sc_pipeline::Error::Device(format!("{step_name}: {e}")));
                }
            }
            drop(keep_alive);
            let _ = tx.send(r);
        })
        .map_err(|e| PyRuntimeError::new_err(format!("starting the step's thread: {e}")))?;
    let (adata, extra, step_seconds) = loop {
        match py.detach(|| rx.lock().recv_timeout(Duration::from_millis(50))) {
            Ok(r) => break r.map_err(super::errors::to_py)?,
            Err(mpsc::RecvTimeoutError::Timeout) if !in_place => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(format!(
                    "{step}: the step's thread ended without a result (it panicked)"
                )))
            }
        }
    };
    let sections = Sections {
        x: return_x && !in_place,
        x_on_device,
        raw: step == "recipe",
        passed_obsp,
    };
    let before_out = std::time::Instant::now();
    let out = model_out::parts(py, adata, sections)?;
    // Where a call's time went (scpipe.settings.progress prints it).
    out.set_item(
        "timings",
        (parts_in, step_seconds, before_out.elapsed().as_secs_f64()),
    )?;
    if let Some(f) = extra.norm_factor {
        out.set_item("norm_factor", f.into_pyarray(py))?;
    }
    if let Some(a) = extra.aggregates {
        out.set_item("aggregate", aggregates(py, a)?)?;
    }
    if let Some(w) = extra.whole_numbers {
        out.set_item("whole_numbers", w)?;
    }
    if let Some(why) = extra.logreg_shortfall {
        out.set_item("logreg_shortfall", why)?;
    }
    Ok(out)
}

/// `aggregate`'s tables as `n_groups x n_cols` numpy arrays by scanpy's function names, with
/// `counts` (rows per group).
fn aggregates<'py>(py: Python<'py>, a: Aggregates) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let shape = [a.n_groups, a.n_cols];
    let table = |v: Vec<f64>| v.into_pyarray(py).reshape(shape);
    for (name, v) in [
        ("sum", a.sum),
        ("mean", a.mean),
        ("var", a.var),
        ("median", a.median),
    ] {
        if let Some(v) = v {
            d.set_item(name, table(v)?)?;
        }
    }
    if let Some(v) = a.count_nonzero {
        let v: Vec<i64> = v.into_iter().map(|c| c as i64).collect();
        d.set_item("count_nonzero", v.into_pyarray(py).reshape(shape)?)?;
    }
    let counts: Vec<i64> = a.counts.into_iter().map(|c| c as i64).collect();
    d.set_item("counts", counts.into_pyarray(py))?;
    Ok(d)
}

/// Whether the step only reads X (which a GPU step may then read in the user's own memory).
fn reads_x_only(call: &Call) -> bool {
    matches!(
        call,
        Call::Qc { .. }
            | Call::FilterCells(_)
            | Call::FilterGenes(_)
            | Call::Hvg(_)
            | Call::Pca(_)
            | Call::Markers { .. }
            | Call::MarkersLogreg { .. }
            | Call::Scrublet { .. }
            | Call::SimulateDoublets { .. }
            | Call::ScoreGenes { .. }
            | Call::HvgPearson { .. }
            | Call::Aggregate { .. }
            | Call::Ingest(_)
            | Call::WholeNumbers
    )
}

/// Whether the step reads X on the GPU (when it runs there), which then gets X there first.
/// The graph steps do not read X; Pearson residuals (which replace X: on the GPU only where X
/// already is), aggregate, combat, logreg, scrublet on given doublets and the
/// recipe (which places X itself) work on the host's X.
fn reads_x_on_device(call: &Call) -> bool {
    !matches!(
        call,
        Call::Harmony(_)
            | Call::Combat { .. }
            | Call::Pearson { .. }
            | Call::WholeNumbers
            | Call::Scrublet {
                simulated: Some(_),
                ..
            }
            | Call::SimulateDoublets { .. }
            | Call::Aggregate { .. }
            | Call::MarkersLogreg { .. }
            | Call::Neighbors { .. }
            | Call::Umap(_)
            | Call::KMeans { .. }
            | Call::Ingest(_)
            | Call::Bbknn { .. }
            | Call::Diffmap(..)
            | Call::Dpt { .. }
            | Call::EmbeddingDensity { .. }
            | Call::Paga { .. }
            | Call::Tsne { .. }
            | Call::DrawGraph { .. }
            | Call::Leiden(_)
            | Call::Recipe(_)
    )
}

/// The recipe's steps on standard error as they end (`scpipe.settings.progress`).
struct Progress;

impl sc_pipeline::run::StepObserver for Progress {
    fn started(&mut self, _: &str) {}
    fn finished(&mut self, r: &sc_pipeline::report::StepRecord) {
        eprintln!(
            "scpipe: recipe: {} in {:.3} s  {}",
            r.step, r.seconds, r.note
        );
    }
}

/// The step on the model; X goes to `gpu` first for the steps that read it. `progress`: the
/// recipe reports each of its steps.
fn run(
    call: &Call,
    adata: &mut AnnData,
    gpu: Option<&GpuRun>,
    progress: bool,
) -> sc_pipeline::Result<Extra> {
    let ctx = gpu.map(|g| g.ctx.clone());
    let x_to_device = reads_x_on_device(call);
    if let (Some(c), true) = (&ctx, x_to_device) {
        if !matches!(adata.x, Matrix::Device(_)) {
            adata.to_device(c)?;
        }
    }
    let mut extra = Extra::default();
    match call {
        Call::Qc {
            qc_vars,
            percent_top,
            log1p,
        } => {
            let vars: Vec<&str> = qc_vars.iter().map(String::as_str).collect();
            let top = percent_top
                .clone()
                .unwrap_or_else(|| steps::default_percent_top(adata.n_vars()));
            steps::calculate_qc_metrics(adata, &vars, &top, *log1p)?;
        }
        Call::FilterCells(f) => {
            steps::filter_cells(adata, *f)?;
        }
        Call::FilterGenes(f) => {
            steps::filter_genes(adata, *f)?;
        }
        Call::Normalize(p) => {
            let r = steps::normalize_total(adata, p)?;
            if p.per_cell {
                extra.norm_factor = Some(r.norm_factor);
            }
        }
        Call::Log1p(base) => steps::log1p(adata, *base)?,
        Call::Hvg(o) => {
            steps::highly_variable_genes(adata, o)?;
        }
        Call::RegressOut(keys) => steps::regress_out(adata, keys)?,
        Call::Pearson {
            params,
            check_values,
        } => {
            if *check_values {
                extra.whole_numbers = Some(steps::x_holds_whole_numbers(adata)?);
            }
            steps::normalize_pearson_residuals(adata, params)?
        }
        Call::WholeNumbers => extra.whole_numbers = Some(steps::x_holds_whole_numbers(adata)?),
        Call::Scrublet {
            options,
            simulated: None,
        } => {
            steps::scrublet(adata, options, ctx.as_deref())?;
        }
        Call::Scrublet {
            options,
            simulated: Some(sim),
        } => {
            let (sim, parents) = sim.as_ref();
            steps::scrublet_on_simulated(
                adata,
                sim.to_csr()?.as_ref(),
                parents.clone(),
                &options.params,
                ctx.as_deref(),
            )?;
        }
        Call::HvgPearson {
            theta,
            clip,
            n_top_genes,
            batch_key,
        } => {
            steps::highly_variable_genes_pearson_residuals(
                adata,
                *theta,
                *clip,
                *n_top_genes,
                batch_key.as_deref(),
            )?;
        }
        Call::ScoreGenes {
            genes,
            pool,
            params,
            score_name,
        } => {
            steps::score_genes(adata, genes, pool, params, score_name)?;
        }
        Call::SimulateDoublets {
            ratio,
            umi_subsampling,
            seed,
        } => {
            *adata = steps::scrublet_simulate_doublets(adata, *ratio, *umi_subsampling, *seed)?;
        }
        Call::Aggregate {
            groups,
            n_groups,
            funcs,
            dof,
            axis,
        } => {
            extra.aggregates = Some(steps::aggregate(
                adata, groups, *n_groups, *funcs, *dof, *axis,
            )?);
        }
        Call::Combat {
            groups,
            n_groups,
            covariates,
        } => steps::combat(adata, groups, *n_groups, covariates, ctx.as_deref())?,
        Call::Scale(p) => steps::scale(adata, p)?,
        Call::Pca(n) => {
            steps::pca(adata, *n)?;
        }
        Call::Harmony(o) => {
            steps::harmony_integrate_on(adata, &o.key, &o.params, ctx.as_ref())?;
        }
        Call::Neighbors {
            n_neighbors,
            use_rep,
            method,
        } => {
            let gpus: Vec<_> = ctx.into_iter().collect();
            steps::neighbors_on(adata, *n_neighbors, use_rep.as_deref(), *method, &gpus)?;
        }
        Call::Umap(p) => {
            steps::umap_on(adata, p, ctx.as_deref())?;
        }
        Call::Tsne { params, key } => {
            steps::tsne_on(adata, Some("rep"), params, key, ctx.as_deref())?
        }
        Call::DrawGraph {
            params,
            seed,
            key_ext,
        } => {
            let start = match adata.obsm.remove("start").map(|a| a.data) {
                None => None,
                Some(sc_pipeline::anndata::ArrayData::F64(xy)) => Some(xy),
                Some(other) => {
                    return Err(sc_pipeline::Error::InvalidParameter {
                        step: "draw_graph",
                        problem: format!("the start holds {} values, not f64", other.type_name()),
                    })
                }
            };
            let start = match &start {
                Some(xy) => steps::DrawGraphStart::Given(xy, *seed),
                None => steps::DrawGraphStart::Numpy(*seed),
            };
            steps::draw_graph(adata, params, start, key_ext.as_deref(), ctx.as_deref())?;
        }
        Call::EmbeddingDensity {
            groups,
            n_groups,
            key,
        } => steps::embedding_density(adata, "xy", groups, *n_groups, key, ctx.as_deref())?,
        Call::Paga { groups, n_groups } => {
            steps::paga(adata, "distances", groups, *n_groups, ctx.as_deref())?;
        }
        Call::Dpt {
            evals,
            root,
            branching,
        } => {
            steps::dpt(
                adata,
                "X_diffmap",
                evals,
                *root,
                branching.as_ref(),
                ctx.as_deref(),
            )?;
        }
        Call::Diffmap(n_comps, seed) => steps::diffmap(adata, *n_comps, *seed, ctx.as_deref())?,
        Call::KMeans { params, key } => {
            steps::kmeans(adata, Some("rep"), None, params, key, ctx.as_deref())?;
        }
        Call::Ingest(reference) => steps::ingest(adata, reference, ctx.as_deref())?,
        Call::Bbknn {
            groups,
            n_groups,
            params,
        } => steps::bbknn(
            adata,
            Some("rep"),
            None,
            groups,
            *n_groups,
            params,
            ctx.as_deref(),
        )?,
        Call::Leiden(runs) => {
            for (p, key) in runs {
                steps::leiden_on(adata, p, key, ctx.as_deref())?;
            }
        }
        Call::Markers { groupby, params } => {
            steps::rank_genes_groups_on(adata, groupby, params, ctx.as_ref())?;
        }
        Call::MarkersLogreg {
            groupby,
            params,
            n_genes,
        } => {
            let outcome =
                steps::rank_genes_groups_logreg(adata, groupby, params, *n_genes, ctx.as_deref())?;
            extra.logreg_shortfall = outcome.shortfall(params);
        }
        Call::Recipe(config) => {
            let mut observer: Box<dyn sc_pipeline::run::StepObserver> = if progress {
                Box::new(Progress)
            } else {
                Box::new(sc_pipeline::run::Silent)
            };
            sc_pipeline::run::run_pipeline_on(adata, config, gpu, observer.as_mut())?;
        }
    }
    Ok(extra)
}

/// `params[key]`, `None` when absent or `None`.
fn opt<'py, T: FromPyObjectOwned<'py>>(p: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<T>> {
    match p.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<T>().map_err(|e| {
            let e: PyErr = e.into();
            PyValueError::new_err(format!("{key}: {e}"))
        })?)),
        _ => Ok(None),
    }
}

/// `params[key]`, which the Python side always passes.
fn req<'py, T: FromPyObjectOwned<'py>>(p: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
    opt(p, key)?.ok_or_else(|| PyValueError::new_err(format!("{key} must be given")))
}

fn parse(step: &str, p: &Bound<'_, PyDict>) -> PyResult<Call> {
    Ok(match step {
        "calculate_qc_metrics" => Call::Qc {
            qc_vars: req(p, "qc_vars")?,
            percent_top: opt(p, "percent_top")?,
            log1p: req(p, "log1p")?,
        },
        "filter_cells" => Call::FilterCells(one_bound(
            p,
            [
                ("min_counts", |v| CellFilter::MinCounts(v)),
                ("min_genes", |v| CellFilter::MinGenes(v as u64)),
                ("max_counts", |v| CellFilter::MaxCounts(v)),
                ("max_genes", |v| CellFilter::MaxGenes(v as u64)),
            ],
        )?),
        "filter_genes" => Call::FilterGenes(one_bound(
            p,
            [
                ("min_counts", |v| GeneFilter::MinCounts(v)),
                ("min_cells", |v| GeneFilter::MinCells(v as u64)),
                ("max_counts", |v| GeneFilter::MaxCounts(v)),
                ("max_cells", |v| GeneFilter::MaxCells(v as u64)),
            ],
        )?),
        "normalize_total" => Call::Normalize(NormalizeParams {
            target_sum: opt(p, "target_sum")?,
            exclude_highly_expressed: req(p, "exclude_highly_expressed")?,
            max_fraction: req(p, "max_fraction")?,
            per_cell: req(p, "per_cell")?,
        }),
        "log1p" => Call::Log1p(opt(p, "base")?),
        "highly_variable_genes" => Call::Hvg(hvg_options(p)?),
        "regress_out" => Call::RegressOut(req(p, "keys")?),
        "whole_numbers" => Call::WholeNumbers,
        "normalize_pearson_residuals" => Call::Pearson {
            params: PearsonParams {
                theta: req(p, "theta")?,
                clip: opt(p, "clip")?,
            },
            check_values: opt(p, "check_values")?.unwrap_or(false),
        },
        "scrublet" => Call::Scrublet {
            options: ScrubletOptions {
                params: scrublet_params(p)?,
                batch_key: opt(p, "batch_key")?,
            },
            simulated: match p.get_item("sim")? {
                Some(m) if !m.is_none() => {
                    let flat: Vec<u32> = model_in::index_array(
                        &req::<Bound<'_, PyAny>>(p, "sim_parents")?,
                        "adata_sim.obsm['doublet_parents']",
                    )?;
                    let parents = flat.chunks_exact(2).map(|c| [c[0], c[1]]).collect();
                    Some(Box::new((
                        model_in::matrix(&m, "adata_sim.X", None, false)?,
                        parents,
                    )))
                }
                _ => None,
            },
        },
        "hvg_pearson_residuals" => Call::HvgPearson {
            theta: req(p, "theta")?,
            clip: opt(p, "clip")?,
            n_top_genes: req(p, "n_top_genes")?,
            batch_key: opt(p, "batch_key")?,
        },
        "score_genes" => Call::ScoreGenes {
            genes: req(p, "genes")?,
            pool: req(p, "pool")?,
            params: ScoreGenesParams {
                ctrl_as_ref: req(p, "ctrl_as_ref")?,
                ctrl_size: req(p, "ctrl_size")?,
                n_bins: req(p, "n_bins")?,
                random_state: req(p, "random_state")?,
            },
            score_name: req(p, "score_name")?,
        },
        "scrublet_simulate_doublets" => Call::SimulateDoublets {
            ratio: req(p, "sim_doublet_ratio")?,
            umi_subsampling: req(p, "synthetic_doublet_umi_subsampling")?,
            seed: req(p, "random_seed")?,
        },
        "aggregate" => {
            let groups = group_codes(p)?;
            let funcs: Vec<String> = req(p, "func")?;
            Call::Aggregate {
                groups,
                n_groups: req(p, "n_groups")?,
                funcs: AggFuncs::from_names(&funcs)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
                dof: req(p, "dof")?,
                axis: match req::<String>(p, "axis")?.as_str() {
                    "obs" => AggregateAxis::Obs,
                    "var" => AggregateAxis::Var,
                    other => {
                        return Err(PyValueError::new_err(format!(
                            "axis must be 'obs' or 'var', not '{other}'"
                        )))
                    }
                },
            }
        }
        "combat" => Call::Combat {
            groups: group_codes(p)?,
            n_groups: req(p, "n_groups")?,
            covariates: req(p, "covariates")?,
        },
        "scale" => Call::Scale(ScaleParams {
            zero_center: req(p, "zero_center")?,
            max_value: opt(p, "max_value")?,
        }),
        "pca" => Call::Pca(req(p, "n_comps")?),
        "harmony_integrate" => Call::Harmony(HarmonyOptions {
            key: req(p, "key")?,
            params: harmony_params(p)?,
        }),
        "neighbors" => Call::Neighbors {
            n_neighbors: req(p, "n_neighbors")?,
            use_rep: opt(p, "use_rep")?,
            method: knn_method(&req::<String>(p, "algorithm")?)?,
        },
        "umap" => Call::Umap(umap_params(p)?),
        "tsne" => Call::Tsne {
            params: TsneParams {
                perplexity: req(p, "perplexity")?,
                early_exaggeration: req(p, "early_exaggeration")?,
                learning_rate: req(p, "learning_rate")?,
                max_iter: req(p, "max_iter")?,
                random_state: req(p, "random_state")?,
                ..Default::default()
            },
            key: req(p, "key_added")?,
        },
        "draw_graph" => Call::DrawGraph {
            params: Fa2Params {
                iterations: req(p, "iterations")?,
                ..Fa2Params::default()
            },
            seed: req(p, "random_state")?,
            key_ext: opt(p, "key_ext")?,
        },
        "embedding_density" => Call::EmbeddingDensity {
            groups: group_codes(p)?,
            n_groups: req(p, "n_groups")?,
            key: req(p, "key_added")?,
        },
        "paga" => Call::Paga {
            groups: group_codes(p)?,
            n_groups: req(p, "n_groups")?,
        },
        "dpt" => Call::Dpt {
            evals: req(p, "evals")?,
            root: opt(p, "iroot")?,
            branching: match req::<usize>(p, "n_branchings")? {
                0 => None,
                n_branchings => Some(BranchingParams {
                    n_branchings,
                    min_group_size: req(p, "min_group_size")?,
                    allow_kendall_tau_shift: req(p, "allow_kendall_tau_shift")?,
                }),
            },
        },
        "diffmap" => Call::Diffmap(req(p, "n_comps")?, req(p, "random_state")?),
        "bbknn" => Call::Bbknn {
            groups: group_codes(p)?,
            n_groups: req(p, "n_groups")?,
            params: BbknnParams {
                neighbors_within_batch: req(p, "neighbors_within_batch")?,
                trim: opt(p, "trim")?,
                ..BbknnParams::default()
            },
        },
        "ingest" => Call::Ingest(Box::new(ingest_reference(p)?)),
        "kmeans" => Call::KMeans {
            params: KMeansParams {
                n_clusters: req(p, "n_clusters")?,
                n_init: req(p, "n_init")?,
                max_iter: req(p, "max_iter")?,
                tol: req(p, "tol")?,
                random_state: req(p, "random_state")?,
            },
            key: req(p, "key_added")?,
        },
        "leiden" => {
            let resolutions: Vec<f64> = req(p, "resolutions")?;
            let keys: Vec<String> = req(p, "keys")?;
            let base = leiden_params(p)?;
            Call::Leiden(
                resolutions
                    .into_iter()
                    .zip(keys)
                    .map(|(resolution, key)| (LeidenParams { resolution, ..base }, key))
                    .collect(),
            )
        }
        "rank_genes_groups" => Call::Markers {
            groupby: req(p, "groupby")?,
            params: markers_params(p)?,
        },
        "rank_genes_groups_logreg" => Call::MarkersLogreg {
            groupby: req(p, "groupby")?,
            params: LogregParams {
                c: req(p, "C")?,
                tol: req(p, "tol")?,
                max_iter: req(p, "max_iter")?,
            },
            n_genes: opt(p, "n_genes")?,
        },
        "recipe" => Call::Recipe(Box::new(recipe_config(p)?)),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown scpipe step '{other}'"
            )))
        }
    })
}

/// `params['groups']`: each row's group code (int32 or int64; -1: none, `LEFT_OUT`).
fn group_codes(p: &Bound<'_, PyDict>) -> PyResult<Vec<u32>> {
    let codes: Vec<i64> = model_in::index_array(&req::<Bound<'_, PyAny>>(p, "groups")?, "groups")?;
    codes
        .into_iter()
        .map(|c| match c {
            -1 => Ok(LEFT_OUT),
            c => u32::try_from(c).map_err(|_| PyValueError::new_err(format!("group code {c}"))),
        })
        .collect()
}

/// The one bound of a filter that is given (scanpy takes exactly one).
fn one_bound<F: Copy, const N: usize>(
    p: &Bound<'_, PyDict>,
    bounds: [(&str, fn(f64) -> F); N],
) -> PyResult<F> {
    let mut given = Vec::new();
    for (name, make) in bounds {
        if let Some(v) = opt::<f64>(p, name)? {
            if !(v >= 0.0) {
                return Err(PyValueError::new_err(format!(
                    "{name} must be a number >= 0, not {v}"
                )));
            }
            given.push((name, make(v)));
        }
    }
    match given.as_slice() {
        [(_, f)] => Ok(*f),
        [] => Err(PyValueError::new_err(format!(
            "give one of {}",
            bounds.map(|b| b.0).join(", ")
        ))),
        _ => Err(PyValueError::new_err(format!(
            "only one of {} may be given at a time ({} were)",
            bounds.map(|b| b.0).join(", "),
            given.iter().map(|g| g.0).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The reference's parts for `ingest` (see `scpipe.tl.ingest`).
fn ingest_reference(p: &Bound<'_, PyDict>) -> PyResult<steps::IngestReference> {
    let matrix = |key: &str| -> PyResult<Option<sc_kernels::DenseMatrix<f32>>> {
        match p.get_item(key)? {
            Some(v) if !v.is_none() => Ok(Some(model_in::dense_f32(&v, key)?)),
            _ => Ok(None),
        }
    };
    let pca = match matrix("pca_basis")? {
        Some(basis) => Some(steps::ReferencePca {
            basis,
            genes: opt(p, "pca_genes")?,
            mean: match p.get_item("pca_mean")? {
                Some(m) if !m.is_none() => Some(
                    m.extract::<numpy::PyReadonlyArray1<'_, f64>>()
                        .map_err(|_| PyValueError::new_err("ingest: pca_mean must be float64"))?
                        .as_slice()?
                        .to_vec(),
                ),
                _ => None,
            },
        }),
        None => None,
    };
    let umap = match matrix("umap_layout")? {
        Some(layout) => Some((
            layout,
            TransformParams::new(
                req(p, "umap_a")?,
                req(p, "umap_b")?,
                req(p, "umap_random_state")?,
            ),
        )),
        None => None,
    };
    let names: Vec<String> = req(p, "label_names")?;
    let n_categories: Vec<usize> = req(p, "label_categories")?;
    // One int32 array of category codes (-1: none) per label.
    let codes = req::<Vec<Bound<'_, PyAny>>>(p, "label_codes")?
        .iter()
        .map(|a| model_in::index_array::<i32>(a, "ingest: label_codes"))
        .collect::<PyResult<Vec<_>>>()?;
    if names.len() != codes.len() || names.len() != n_categories.len() {
        return Err(PyValueError::new_err(
            "ingest: one code array and count per label",
        ));
    }
    Ok(steps::IngestReference {
        pca,
        representation: match opt::<usize>(p, "rep_pcs")? {
            Some(n) => steps::NewRepresentation::Pca(n),
            None => steps::NewRepresentation::Given,
        },
        cells: matrix("reference_rep")?
            .ok_or_else(|| PyValueError::new_err("ingest: reference_rep must be given"))?,
        k: req(p, "k")?,
        umap,
        map_pca: req(p, "map_pca")?,
        labels: names
            .into_iter()
            .zip(codes)
            .zip(n_categories)
            .map(|((n, c), k)| (n, c, k))
            .collect(),
    })
}

fn scrublet_params(p: &Bound<'_, PyDict>) -> PyResult<ScrubletParams> {
    Ok(ScrubletParams {
        sim_doublet_ratio: req(p, "sim_doublet_ratio")?,
        expected_doublet_rate: req(p, "expected_doublet_rate")?,
        stdev_doublet_rate: req(p, "stdev_doublet_rate")?,
        synthetic_doublet_umi_subsampling: req(p, "synthetic_doublet_umi_subsampling")?,
        prep: Preparation {
            mean_center: req(p, "mean_center")?,
            normalize_variance: req(p, "normalize_variance")?,
        },
        log_transform: req(p, "log_transform")?,
        n_prin_comps: req(p, "n_prin_comps")?,
        n_neighbors: opt(p, "n_neighbors")?,
        threshold: opt(p, "threshold")?,
        random_state: req(p, "random_state")?,
        neighbor_parents: req(p, "get_doublet_neighbor_parents")?,
    })
}

fn hvg_options(p: &Bound<'_, PyDict>) -> PyResult<HvgOptions> {
    let flavor: String = req(p, "flavor")?;
    let flavor = Flavor::from_name(&flavor).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let d = HvgOptions::default().cutoffs;
    Ok(HvgOptions {
        flavor,
        n_top_genes: opt(p, "n_top_genes")?,
        batch_key: opt(p, "batch_key")?,
        layer: None,
        cutoffs: steps::HvgCutoffs {
            min_mean: opt(p, "min_mean")?.unwrap_or(d.min_mean),
            max_mean: opt(p, "max_mean")?.unwrap_or(d.max_mean),
            min_disp: opt(p, "min_disp")?.unwrap_or(d.min_disp),
            max_disp: opt(p, "max_disp")?.unwrap_or(d.max_disp),
            span: opt(p, "span")?.unwrap_or(d.span),
            n_bins: opt(p, "n_bins")?.unwrap_or(d.n_bins),
        },
    })
}

fn harmony_params(p: &Bound<'_, PyDict>) -> PyResult<HarmonyParams> {
    let flavor: String = opt(p, "flavor")?.unwrap_or_else(|| "harmony2".into());
    let mut h = match flavor.as_str() {
        "harmony2" => HarmonyParams {
            flavor: HarmonyFlavor::Harmony2,
            ..HarmonyParams::default()
        },
        "harmony1" => HarmonyParams::harmony1(),
        other => {
            return Err(PyValueError::new_err(format!(
                "flavor must be 'harmony2' or 'harmony1', not '{other}'"
            )))
        }
    };
    h.n_clusters = opt(p, "n_clusters")?.or(h.n_clusters);
    // The parameters given, under their own names; the flavour's defaults for the others.
    macro_rules! given {
        ($($field:ident),*) => {
            $( h.$field = opt(p, stringify!($field))?.unwrap_or(h.$field); )*
        };
    }
    given!(
        theta,
        sigma,
        tau,
        block_proportion,
        max_iter_harmony,
        max_iter_clustering,
        tol_harmony,
        tol_clustering,
        ridge_lambda
    );
    h.seed = opt(p, "random_state")?.unwrap_or(h.seed);
    Ok(h)
}

/// "exact", "ivf" (the inverted file) or "auto" (exact below 200,000 cells).
fn knn_method(name: &str) -> PyResult<KnnMethod> {
    match name {
        "exact" | "brute" => Ok(KnnMethod::Exact),
        "ivf" | "ivfflat" => Ok(KnnMethod::Ivf(IvfParams::default())),
        "auto" => Ok(KnnMethod::Auto(IvfParams::default())),
        other => Err(PyValueError::new_err(format!(
            "algorithm must be 'auto', 'exact' (or 'brute') or 'ivf' (or 'ivfflat'), not '{other}'"
        ))),
    }
}

fn umap_params(p: &Bound<'_, PyDict>) -> PyResult<UmapParams> {
    let d = UmapParams::default();
    let init = match opt::<String>(p, "init_pos")?.as_deref() {
        None | Some("spectral") => Init::Spectral,
        Some("random") => Init::Random,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "init_pos must be 'spectral' or 'random' (or an obsm key, not supported yet), \
                 not '{other}'"
            )))
        }
    };
    Ok(UmapParams {
        min_dist: opt(p, "min_dist")?.unwrap_or(d.min_dist),
        spread: opt(p, "spread")?.unwrap_or(d.spread),
        n_components: opt(p, "n_components")?.unwrap_or(d.n_components),
        n_epochs: opt(p, "maxiter")?.or(d.n_epochs),
        learning_rate: opt(p, "alpha")?.unwrap_or(d.learning_rate),
        repulsion_strength: opt(p, "gamma")?.unwrap_or(d.repulsion_strength),
        negative_sample_rate: opt(p, "negative_sample_rate")?.unwrap_or(d.negative_sample_rate),
        init,
        random_state: opt(p, "random_state")?.unwrap_or(d.random_state),
    })
}

fn leiden_params(p: &Bound<'_, PyDict>) -> PyResult<LeidenParams> {
    let d = LeidenParams::default();
    Ok(LeidenParams {
        resolution: d.resolution,
        n_iterations: opt(p, "n_iterations")?.unwrap_or(d.n_iterations),
        random_state: opt(p, "random_state")?.unwrap_or(d.random_state),
        beta: opt(p, "beta")?.unwrap_or(d.beta),
        refine: opt(p, "refine")?.unwrap_or(d.refine),
    })
}

fn markers_params(p: &Bound<'_, PyDict>) -> PyResult<RankGenesParams> {
    let method: String = opt(p, "method")?.unwrap_or_else(|| "t-test".into());
    Ok(RankGenesParams {
        method: Method::from_name(&method).map_err(|e| PyValueError::new_err(e.to_string()))?,
        n_genes: opt(p, "n_genes")?,
        tie_correct: opt(p, "tie_correct")?.unwrap_or(false),
    })
}

/// The CLI's default flow (`scpipe run`'s [`PipelineConfig::default`]) with the options given.
fn recipe_config(p: &Bound<'_, PyDict>) -> PyResult<PipelineConfig> {
    let mut c = PipelineConfig::default();
    if let Some(prefix) = opt::<String>(p, "mito_prefix")? {
        c.qc_mito_prefix = Some(MitoPrefix::Given(prefix));
    }
    c.min_genes = opt(p, "min_genes")?.or(c.min_genes);
    c.min_cells = opt(p, "min_cells")?.or(c.min_cells);
    if let Some(t) = opt::<f64>(p, "target_sum")? {
        c.target_sum = Some(Some(t));
    }
    if let Some(h) = c.hvg.as_mut() {
        h.n_top_genes = opt(p, "n_top_genes")?.or(h.n_top_genes);
        if let Some(f) = opt::<String>(p, "flavor")? {
            h.flavor = Flavor::from_name(&f).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        h.batch_key = opt(p, "batch_key")?;
    }
    c.n_comps = opt(p, "n_comps")?.or(c.n_comps);
    if let Some(key) = opt::<String>(p, "harmony_key")? {
        c.harmony = Some(HarmonyOptions {
            key,
            params: HarmonyParams::default(),
        });
    }
    c.n_neighbors = opt(p, "n_neighbors")?.or(c.n_neighbors);
    if let Some(a) = opt::<String>(p, "algorithm")? {
        c.knn_method = knn_method(&a)?;
    }
    if let Some(r) = opt::<Vec<f64>>(p, "resolutions")? {
        c.leiden = Some(LeidenOptions {
            resolutions: r,
            ..LeidenOptions::default()
        });
    }
    if let Some(m) = c.markers.as_mut() {
        m.params.tie_correct = opt(p, "tie_correct")?.unwrap_or(m.params.tie_correct);
        if opt::<bool>(p, "markers")? == Some(false) {
            c.markers = None;
        }
    }
    Ok(c)
}
