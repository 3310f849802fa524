//! The classic scanpy preprocessing flow as one configurable run, timing every step.
//!
//! Order (each step can be switched off): QC metrics (with the `mt` genes), filter cells,
//! filter genes, normalize_total, log1p, highly_variable_genes (seurat_v3, which needs the
//! counts, runs before normalize_total instead), freeze `.raw` (log-normalized, all genes that
//! passed the filters), subset to the highly variable genes, scale, pca, harmony_integrate
//! (only when configured), neighbors.

use crate::anndata::Matrix;
use crate::memory_plan::{self, Execution, MemoryPlan, Placement};
use crate::report::{DeviceStepStats, StepRecord, StepTimer};
use crate::steps::{self, CellFilter, GeneFilter, NormalizeParams, ScaleParams};
use crate::Error;
use crate::{AnnData, Result};
use rmm_core::{Device, SharedResource, StatisticsAdaptor, Stream};
use sc_kernels::gpu::GpuContext;
use sc_kernels::Communicator;
use std::sync::Arc;

/// Parameters of a run; [`PipelineConfig::default`] is BENCHMARKS.md section B.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Genes whose name starts with this prefix form the `mt` QC variable; `None`: no QC step.
    pub qc_mito_prefix: Option<String>,
    pub min_genes: Option<u64>,
    pub min_cells: Option<u64>,
    pub target_sum: Option<Option<f64>>,
    pub log1p: bool,
    pub hvg: Option<steps::HvgOptions>,
    /// Subset X to the highly variable genes (after freezing `.raw`).
    pub subset_hvg: bool,
    /// `scale(max_value=...)`; `Some(None)` scales without clipping, `None` skips the step.
    pub scale_max_value: Option<Option<f64>>,
    pub n_comps: Option<usize>,
    /// `harmony_integrate` after pca (`obsm['X_pca_harmony']`); `None` skips it.
    pub harmony: Option<steps::HarmonyOptions>,
    pub n_neighbors: Option<usize>,
    /// The `obsm` key neighbors uses (scanpy's `use_rep`); `None`: `X_pca` as scanpy decides.
    pub neighbors_use_rep: Option<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            qc_mito_prefix: Some("MT-".to_string()),
            min_genes: Some(200),
            min_cells: Some(10),
            target_sum: Some(Some(1e4)),
            log1p: true,
            hvg: Some(steps::HvgOptions::default()),
            subset_hvg: true,
            scale_max_value: Some(Some(10.0)),
            n_comps: Some(50),
            harmony: None,
            n_neighbors: Some(15),
            neighbors_use_rep: None,
        }
    }
}

/// Told when each step starts and ends (the command line draws progress from it).
pub trait StepObserver {
    fn started(&mut self, step: &str);
    fn finished(&mut self, record: &StepRecord);
}

/// An observer that does nothing.
pub struct Silent;
impl StepObserver for Silent {
    fn started(&mut self, _: &str) {}
    fn finished(&mut self, _: &StepRecord) {}
}

/// What a GPU run needs: the context every step runs on and the statistics adaptor that the
/// context's resource is (for each step's peak device memory and allocation count).
#[derive(Clone)]
pub struct GpuRun {
    pub ctx: Arc<GpuContext>,
    pub stats: Arc<StatisticsAdaptor<SharedResource>>,
    /// Device bytes the run may allocate (what the planner fits X into; the caller enforces
    /// it, e.g. with a `LimitingAdaptor` in the resource).
    pub memory_budget: u64,
    /// How X is held: in device memory or streamed (see [`crate::memory_plan`]).
    pub execution: Execution,
    /// The warm-up thread, joined when the last clone of the run is dropped.
    background: Arc<Background>,
}

/// A thread that uses the GPU: it must end before the process does (a thread inside a CUDA call
/// while the driver tears down at exit crashes the process), so dropping this joins it.
#[derive(Default)]
struct Background(parking_lot::Mutex<Option<std::thread::JoinHandle<sc_kernels::Result<()>>>>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(h) = self.0.lock().take() {
            // Its failure (if any) already surfaced, or will not matter, in the steps.
            let _ = h.join();
        }
    }
}

impl GpuRun {
    /// A context on `stream` whose every allocation goes through a statistics adaptor over
    /// `resource`.
    pub fn new(device: &Device, stream: &Stream, resource: SharedResource) -> Result<Self> {
        let stats = Arc::new(StatisticsAdaptor::new(resource));
        let shared: SharedResource = stats.clone();
        let ctx =
            GpuContext::new(device, stream, shared).map_err(|e| Error::Device(e.to_string()))?;
        let free = device
            .memory_info()
            .map_err(|e| Error::Device(format!("reading the GPU's free memory: {e}")))?
            .free;
        Ok(GpuRun {
            ctx: Arc::new(ctx),
            stats,
            memory_budget: default_budget(free as u64),
            execution: Execution::Auto,
            background: Arc::default(),
        })
    }

    /// The same run with another budget and placement rule.
    pub fn with_memory(mut self, budget: u64, execution: Execution) -> Self {
        self.memory_budget = budget;
        self.execution = execution;
        self
    }

    /// How this run holds `adata`'s X for `config`.
    pub fn plan(&self, adata: &AnnData, config: &PipelineConfig) -> MemoryPlan {
        memory_plan::plan(
            adata.n_obs(),
            adata.n_vars(),
            adata.x.stored_values(),
            config,
            self.memory_budget,
            self.execution,
        )
    }

    /// Starts loading the kernels and the GPU libraries on a background thread (see
    /// [`sc_kernels::gpu::warm_up_in_background`]); a failure there resurfaces in the step that
    /// needs what failed.
    /// With `config`, the PCA of the run is rehearsed at its size (see there).
    pub fn warm_up(&self, config: Option<&PipelineConfig>) {
        let pca_shape = config.and_then(|c| {
            let genes = c.hvg.as_ref().filter(|_| c.subset_hvg)?.n_top_genes?;
            Some((genes, c.n_comps?.min(genes.saturating_sub(1))))
        });
        let handle = sc_kernels::gpu::warm_up_in_background(&self.ctx, pca_shape);
        if let Some(previous) = self.background.0.lock().replace(handle) {
            let _ = previous.join();
        }
    }
}

/// The default device memory budget: this fraction of the memory free when the run starts
/// (the rest is left to the CUDA context's own growth and to other users of the GPU).
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.9;

/// [`DEFAULT_BUDGET_FRACTION`] of `free` bytes.
pub fn default_budget(free: u64) -> u64 {
    (free as f64 * DEFAULT_BUDGET_FRACTION) as u64
}

pub(crate) struct Runner<'a> {
    pub(crate) records: Vec<StepRecord>,
    pub(crate) observer: &'a mut dyn StepObserver,
    pub(crate) gpu: Option<GpuRun>,
}

impl Runner<'_> {
    fn step<T>(
        &mut self,
        name: &str,
        adata: &mut AnnData,
        f: impl FnOnce(&mut AnnData) -> Result<(T, String)>,
    ) -> Result<T> {
        let on_gpu = matches!(adata.x, Matrix::Device(_));
        self.step_on(name, on_gpu, adata, f)
    }

    pub(crate) fn step_on<T>(
        &mut self,
        name: &str,
        on_gpu: bool,
        adata: &mut AnnData,
        f: impl FnOnce(&mut AnnData) -> Result<(T, String)>,
    ) -> Result<T> {
        self.observer.started(name);
        let before = self
            .gpu
            .as_ref()
            .map(|g| (g.stats.push_counters(), g.ctx.transfers()));
        let timer = StepTimer::start(name);
        let result = f(adata);
        let synced = match &self.gpu {
            // Device work is asynchronous: the step ends when its stream is idle.
            Some(g) => g.ctx.synchronize().map_err(|e| Error::Gpu {
                step: "pipeline",
                problem: format!("{name}: {e}"),
            }),
            None => Ok(()),
        };
        let mut device_stats = None;
        if let (Some(g), Some((outer, t0))) = (&self.gpu, before) {
            let inner = g.stats.pop_counters().expect("pushed above");
            let t1 = g.ctx.transfers();
            device_stats = Some(DeviceStepStats {
                peak_bytes: (outer.bytes.value + inner.bytes.peak).max(0) as u64,
                allocations: inner.allocations.total.max(0) as u64,
                host_to_device_bytes: t1.host_to_device - t0.host_to_device,
                device_to_host_bytes: t1.device_to_host - t0.device_to_host,
            });
        }
        let (out, note) = result.map_err(|e| e.in_step(name))?;
        synced?;
        let mut record = timer.finish(adata.n_obs(), adata.n_vars(), note);
        record.device = Some(
            match &adata.x {
                Matrix::Device(d) if d.is_streamed() => "gpu-streamed",
                Matrix::Device(_) => "gpu",
                _ if on_gpu => "gpu",
                _ => "cpu",
            }
            .into(),
        );
        record.gpu = device_stats;
        self.observer.finished(&record);
        self.records.push(record);
        Ok(out)
    }
}

fn hvg_step(r: &mut Runner<'_>, adata: &mut AnnData, hvg: &steps::HvgOptions) -> Result<()> {
    r.step("highly_variable_genes", adata, |a| {
        let n = steps::highly_variable_genes(a, hvg)?;
        Ok((
            (),
            format!("flavor={}: {n} genes selected", hvg.flavor.name()),
        ))
    })
}

/// Runs the configured steps on `adata` (raw counts in X) on the CPU; returns one record per
/// step.
pub fn run_pipeline(
    adata: &mut AnnData,
    config: &PipelineConfig,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    run_pipeline_on(adata, config, None, observer)
}

/// Runs the configured steps; with `gpu`, X is moved to the GPU first, every step runs there,
/// and X and `.raw` come back to the host
/// at the end (ready to write).
pub fn run_pipeline_on(
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpu: Option<&GpuRun>,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    run_steps(adata, config, gpu, observer, true)
}

/// [`run_pipeline_on`]; without `to_host`, X and `.raw` stay where the steps left them (a
/// split run gathers the ranks' blocks from their GPUs straight into the stacked result).
pub(crate) fn run_steps(
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpu: Option<&GpuRun>,
    observer: &mut dyn StepObserver,
    to_host: bool,
) -> Result<Vec<StepRecord>> {
    let mut r = Runner {
        records: Vec::new(),
        observer,
        gpu: gpu.cloned(),
    };
    check_counts(adata)?;
    // X put on the GPU by the caller (a split run's rank) stays as it is.
    if let Some(g) = gpu.filter(|_| !matches!(adata.x, Matrix::Device(_))) {
        let plan = g.plan(adata, config);
        match plan.placement {
            Placement::InMemory => r.step_on("move X to the GPU", true, adata, |a| {
                let bytes = a.to_device(&g.ctx)?;
                Ok((
                    (),
                    format!(
                        "{:.2} GiB; {}",
                        bytes as f64 / (1u64 << 30) as f64,
                        plan.describe()
                    ),
                ))
            })?,
            Placement::Streamed { block_bytes } => {
                r.step_on("stream X from host memory", true, adata, |a| {
                    a.to_streamed(&g.ctx, block_bytes)?;
                    Ok(((), plan.describe()))
                })?
            }
        }
    }
    if let Some(prefix) = &config.qc_mito_prefix {
        r.step("calculate_qc_metrics", adata, |a| {
            let n_mt = steps::annotate_gene_prefix(a, "mt", prefix)?;
            let tops = steps::default_percent_top(a.n_vars());
            steps::calculate_qc_metrics(a, &["mt"], &tops, true)?;
            Ok(((), steps::mito_qc_note(n_mt, prefix, a.n_vars())))
        })?;
    }
    if let Some(min_genes) = config.min_genes {
        r.step("filter_cells", adata, |a| {
            let removed = steps::filter_cells(a, CellFilter::MinGenes(min_genes))?;
            // A split run's rank holds only its block: the steps after it judge the whole.
            if a.comm().size() == 1 {
                kept_enough(
                    "filter_cells",
                    "min_genes",
                    min_genes,
                    a.n_obs(),
                    removed,
                    "cell",
                    "gene",
                )?;
            }
            Ok((
                (),
                format!("min_genes={min_genes}: {removed} cells removed"),
            ))
        })?;
    }
    if let Some(min_cells) = config.min_cells {
        r.step("filter_genes", adata, |a| {
            let removed = steps::filter_genes(a, GeneFilter::MinCells(min_cells))?;
            kept_enough(
                "filter_genes",
                "min_cells",
                min_cells,
                a.n_vars(),
                removed,
                "gene",
                "cell",
            )?;
            Ok((
                (),
                format!("min_cells={min_cells}: {removed} genes removed"),
            ))
        })?;
    }
    // seurat_v3 needs the counts: it runs before normalisation (its results are per gene and
    // survive normalize_total and log1p), which spares a copy of X. The other flavours run on
    // the log-normalized data.
    let counts_hvg = config.hvg.as_ref().filter(|h| h.needs_counts());
    if let Some(hvg) = counts_hvg {
        hvg_step(&mut r, adata, hvg)?;
    }
    if let Some(target_sum) = config.target_sum {
        r.step("normalize_total", adata, |a| {
            let used = steps::normalize_total(
                a,
                &NormalizeParams {
                    target_sum,
                    ..Default::default()
                },
            )?;
            Ok(((), format!("target_sum={}", used.target_sum)))
        })?;
    }
    if config.log1p {
        r.step("log1p", adata, |a| {
            steps::log1p(a, None).map(|()| ((), String::new()))
        })?;
    }
    if let Some(hvg) = config.hvg.as_ref().filter(|h| !h.needs_counts()) {
        hvg_step(&mut r, adata, hvg)?;
    }
    if config.hvg.is_some() && config.subset_hvg {
        r.step("subset to HVG (raw frozen)", adata, |a| {
            let keep = steps::highly_variable_mask(a)?;
            let selected = keep.iter().filter(|&&k| k).count();
            if selected < 2 {
                return Err(Error::param(
                    "highly_variable_genes",
                    format!(
                        "selected {selected} of {} genes, too few to go on with (PCA needs 2); \
                         the data may have too few cells or genes for its dispersions",
                        keep.len()
                    ),
                ));
            }
            a.freeze_raw_and_select_var(&keep)?;
            Ok(((), ".raw = log-normalized, all filtered genes".to_string()))
        })?;
    }
    if let Some(max_value) = config.scale_max_value {
        r.step("scale", adata, |a| {
            steps::scale(
                a,
                &ScaleParams {
                    zero_center: true,
                    max_value,
                },
            )?;
            Ok((
                (),
                max_value.map_or("no clipping".into(), |m| format!("max_value={m}")),
            ))
        })?;
    }
    if let Some(n_comps) = config.n_comps {
        r.step("pca", adata, |a| {
            let used = steps::pca(a, n_comps)?;
            Ok(((), format!("n_comps={used}")))
        })?;
    }
    let graph_gpus: Vec<_> = gpu.map(|g| g.ctx.clone()).into_iter().collect();
    cell_graph_steps(&mut r, adata, config, &graph_gpus, &[])?;
    if gpu.is_some() && to_host {
        r.step("move results to the host", adata, |a| {
            a.to_host()?;
            Ok(((), "X and .raw".to_string()))
        })?;
    }
    Ok(r.records)
}

impl PipelineConfig {
    /// This configuration without the steps over the cell x cell structure (harmony and
    /// neighbors): what each rank of a split run runs, and what runs before the output's X and
    /// `.raw` are final.
    pub fn per_cell_steps(&self) -> PipelineConfig {
        PipelineConfig {
            harmony: None,
            n_neighbors: None,
            ..self.clone()
        }
    }

    /// Whether harmony or neighbors run.
    pub fn has_cell_graph_steps(&self) -> bool {
        self.harmony.is_some() || self.n_neighbors.is_some()
    }
}

/// The steps over the cell x cell structure of `config` on `adata` after
/// [`PipelineConfig::per_cell_steps`] ran: harmony (with its cells split across `gpus` when
/// `group` holds their communicators, else on the first GPU) and neighbors (split across
/// `gpus`); none: the CPU. `gpu` is the run whose device statistics the records show.
pub fn run_cell_graph_steps(
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpu: Option<&GpuRun>,
    gpus: &[Arc<GpuContext>],
    group: &[Arc<dyn Communicator>],
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    let mut r = Runner {
        records: Vec::new(),
        observer,
        gpu: gpu.cloned(),
    };
    cell_graph_steps(&mut r, adata, config, gpus, group)?;
    Ok(r.records)
}

/// Refuses a filter (`step`, parameter `param` = `min`) that kept fewer than two `item`s (each
/// needing counts in `min` `other`s), naming it and its flag: said there, where the cause is
/// known, instead of by a later step that only sees too few.
fn kept_enough(
    step: &'static str,
    param: &str,
    min: u64,
    kept: usize,
    removed: usize,
    item: &str,
    other: &str,
) -> Result<()> {
    if kept >= 2 {
        return Ok(());
    }
    Err(Error::param(
        step,
        format!(
            "{param}={min} keeps {kept} of {} {item}s (a {item} needs counts in {min} {other}s); \
             lower it (--{})",
            kept + removed,
            param.replace('_', "-")
        ),
    ))
}

/// The steps over the cell x cell structure (see [`run_cell_graph_steps`]).
pub(crate) fn cell_graph_steps(
    r: &mut Runner<'_>,
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpus: &[Arc<GpuContext>],
    group: &[Arc<dyn Communicator>],
) -> Result<()> {
    let on_gpu = !gpus.is_empty();
    if let Some(h) = &config.harmony {
        r.step_on("harmony_integrate", on_gpu, adata, |a| {
            let split = gpus.len() > 1 && group.len() == gpus.len();
            let s = if split {
                let ranks: Vec<_> = gpus.iter().cloned().zip(group.iter().cloned()).collect();
                steps::harmony_integrate_across(a, &h.key, &h.params, &ranks)?
            } else {
                steps::harmony_integrate_on(a, &h.key, &h.params, gpus.first())?
            };
            Ok((
                (),
                format!(
                    "key={}: {} batches, {} clusters, {} rounds{}{}",
                    h.key,
                    s.n_batches,
                    s.n_clusters,
                    s.iterations,
                    if s.converged { "" } else { " (not converged)" },
                    if split {
                        format!(", cells split across {} GPUs", gpus.len())
                    } else {
                        String::new()
                    }
                ),
            ))
        })?;
    }
    if let Some(k) = config.n_neighbors {
        r.step_on("neighbors", on_gpu, adata, |a| {
            let rep = config.neighbors_use_rep.as_deref();
            steps::neighbors_on(a, k, rep, gpus)?;
            Ok((
                (),
                format!(
                    "n_neighbors={k}, exact, euclidean, on {}{}",
                    rep.unwrap_or("X_pca"),
                    match gpus.len() {
                        0 | 1 => String::new(),
                        g => format!(", kNN rows split across {g} GPUs"),
                    }
                ),
            ))
        })?;
    }
    Ok(())
}

/// The input must be counts: finite and non-negative. X already on a GPU is taken as checked
/// by whoever put it there (reading it back would cost a copy of X).
pub(crate) fn check_counts(adata: &AnnData) -> Result<()> {
    if let Matrix::Device(_) = &adata.x {
        return Ok(());
    }
    adata
        .x
        .to_csr()?
        .check_counts()
        .map_err(|e| crate::Error::invalid("X", format!("the pipeline needs raw counts in X: {e}")))
}
