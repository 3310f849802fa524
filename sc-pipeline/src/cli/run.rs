//! `scpipe run INPUT -o OUT.h5ad [options]` and `scpipe run --demo`.

use super::allocator::{self, parse_size, AllocatorChoice};
use super::device::{resolve, DeviceChoice};
use super::launcher::{self, Launch};
use super::progress::Spinner;
use crate::anndata::Matrix;
use crate::io::{H5adWrite, StagedFile};
use crate::memory_plan::Execution;
use crate::pipeline::{run_cell_graph_steps, run_steps, GpuRun, PipelineConfig, StepObserver};
use crate::report::{RunReport, StepRecord, StepTimer};
use crate::split_run::{graph_group, run_pipeline_split, Rank};
use crate::steps::{Flavor, HarmonyOptions, HarmonyParams, HvgOptions};
use crate::synthetic::SyntheticParams;
use crate::{memory_timeline, AnnData, Error, Result};
use rmm_core::adaptors::{
    parse_log, write_memory_viz_snapshot, LimitingAdaptor, LoggingAdaptor, TimelineAdaptor,
};
use rmm_core::SharedResource;
use sc_kernels::gpu::{GpuContext, NcclCommunicator};
use sc_kernels::{Communicator, CsrMatrix};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Where `--demo` writes when no `-o` is given.
pub const DEMO_OUTPUT: &str = "scpipe_demo.h5ad";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Input: an h5ad file, or a 10x Genomics HDF5 matrix (.h5).
    #[arg(required_unless_present = "demo")]
    pub input: Option<PathBuf>,
    /// Output h5ad file (with --demo: default scpipe_demo.h5ad).
    #[arg(short, long, required_unless_present = "demo")]
    pub output: Option<PathBuf>,
    /// Run on a generated dataset instead of a file.
    #[arg(long, conflicts_with = "input")]
    pub demo: bool,
    /// Cells of the --demo dataset.
    #[arg(long, default_value_t = 5000)]
    pub demo_cells: usize,
    /// Genes of the --demo dataset.
    #[arg(long, default_value_t = 20000)]
    pub demo_genes: usize,
    /// Seed of the --demo dataset.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Generate the --demo cells on the GPU, block by block and again for every pass, instead
    /// of holding X (chosen by itself when X would not fit in host memory). The output then has
    /// no X; normalize_total needs a fixed --target-sum.
    #[arg(long, requires = "demo")]
    pub demo_on_gpu: bool,
    /// Genome to read from a 10x file holding several.
    #[arg(long)]
    pub genome: Option<String>,
    /// Device: auto (GPU when present, else CPU), cpu, gpu.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// Write the per-step measurements as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Draw the GPU memory of the run over time into this SVG: live bytes, what the pool or
    /// arena holds and its largest free block, with the steps marked (GPU runs).
    #[arg(long, value_name = "FILE.svg")]
    pub memory_timeline: Option<PathBuf>,
    /// Write every device allocation and free of the run as a PyTorch memory snapshot (the
    /// pickle PyTorch's memory visualizer, memory_viz, opens) (GPU runs).
    #[arg(long, value_name = "FILE.pickle")]
    pub memory_snapshot: Option<PathBuf>,
    /// Write every device allocation and free of the run as CSV in RMM's logging format
    /// (`Thread,Time,Action,Pointer,Size,Stream`), for replaying against any resource, ours or
    /// RMM's (GPU runs).
    #[arg(long, value_name = "FILE.csv")]
    pub allocation_log: Option<PathBuf>,
    /// GPU memory resource (the allocator every device allocation of the run goes through).
    #[arg(long, value_enum, default_value_t = AllocatorChoice::Pool)]
    pub allocator: AllocatorChoice,
    /// Initial size of the pool (pool, binning, async), e.g. 4GiB; default: half the free GPU memory (RMM's).
    #[arg(long, value_parser = parse_size)]
    pub pool_initial: Option<usize>,
    /// Maximum size of the pool (pool, binning, async; the arena's size), e.g. 16GiB; default: no maximum.
    #[arg(long, value_parser = parse_size)]
    pub pool_max: Option<usize>,
    /// Device memory the run may allocate, e.g. 8GiB (enforced by a limiting adaptor); a
    /// dataset whose in-memory run would not fit is streamed from host memory in row blocks.
    /// Default: 90% of the GPU's free memory.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub device_memory_limit: Option<usize>,
    /// How a GPU run holds X: auto (in device memory when it fits the limit, else streamed),
    /// in-memory, or streamed.
    #[arg(long, value_enum, default_value_t = Execution::Auto)]
    pub execution: Execution,
    /// GPUs to split the cells across (one block of cells, one stream and one memory pool per
    /// GPU; per-gene statistics combined through NCCL). Default: every visible GPU when there
    /// are several, unless a single-GPU option (--memory-timeline, --memory-snapshot,
    /// --execution streamed) is given.
    #[arg(long, value_name = "N")]
    pub gpus: Option<usize>,

    /// Prefix of the mitochondrial genes (the `mt` QC variable).
    #[arg(long, default_value = "MT-")]
    pub mito_prefix: String,
    #[arg(long, help = "Skip calculate_qc_metrics")]
    pub no_qc: bool,
    /// filter_cells(min_genes=...).
    #[arg(long, default_value_t = 200)]
    pub min_genes: u64,
    #[arg(long, help = "Skip filter_cells")]
    pub no_filter_cells: bool,
    /// filter_genes(min_cells=...).
    #[arg(long, default_value_t = 10)]
    pub min_cells: u64,
    #[arg(long, help = "Skip filter_genes")]
    pub no_filter_genes: bool,
    /// normalize_total(target_sum=...); 0 means the median of the cell totals.
    #[arg(long, default_value_t = 1e4)]
    pub target_sum: f64,
    #[arg(long, help = "Skip normalize_total")]
    pub no_normalize: bool,
    #[arg(long, help = "Skip log1p")]
    pub no_log1p: bool,
    /// highly_variable_genes flavour.
    #[arg(long, default_value = "cell_ranger", value_parser = super::hvg_flavor::parser())]
    pub hvg_flavor: String,
    /// highly_variable_genes(n_top_genes=...).
    #[arg(long, default_value_t = 2000)]
    pub n_top_genes: usize,
    /// obs column with the batch of each cell (batch-aware HVG).
    #[arg(long)]
    pub batch_key: Option<String>,
    #[arg(long, help = "Skip highly_variable_genes (and the subset)")]
    pub no_hvg: bool,
    #[arg(long, help = "Keep all genes in X after highly_variable_genes")]
    pub no_subset: bool,
    /// scale(max_value=...).
    #[arg(long, default_value_t = 10.0)]
    pub max_value: f64,
    #[arg(long, help = "Scale without clipping")]
    pub no_clip: bool,
    #[arg(long, help = "Skip scale")]
    pub no_scale: bool,
    /// pca(n_comps=...).
    #[arg(long, default_value_t = 50)]
    pub n_comps: usize,
    #[arg(long, help = "Skip pca (and neighbors)")]
    pub no_pca: bool,
    /// harmony_integrate after pca with the batches in this obs column (writes
    /// obsm['X_pca_harmony'], which neighbors then uses); harmony2 defaults.
    #[arg(long, value_name = "KEY")]
    pub harmony: Option<String>,
    /// Seed of harmony's k-means initialization and block order.
    #[arg(long, default_value_t = 0, requires = "harmony")]
    pub harmony_seed: u64,
    /// neighbors(n_neighbors=...).
    #[arg(long, default_value_t = 15)]
    pub n_neighbors: usize,
    #[arg(long, help = "Skip neighbors")]
    pub no_neighbors: bool,
}

impl RunArgs {
    /// The pipeline configuration the options describe.
    pub fn config(&self) -> Result<PipelineConfig> {
        let flavor = Flavor::from_name(&self.hvg_flavor)
            .map_err(|e| Error::param("--hvg-flavor", e.to_string()))?;
        if !(self.target_sum >= 0.0 && self.target_sum.is_finite()) {
            return Err(Error::param(
                "--target-sum",
                format!("{} is not a non-negative number", self.target_sum),
            ));
        }
        if self.max_value.is_nan() || self.max_value <= 0.0 {
            return Err(Error::param(
                "--max-value",
                format!("{} must be positive", self.max_value),
            ));
        }
        if self.n_top_genes == 0 {
            return Err(Error::param("--n-top-genes", "must be at least 1"));
        }
        if self.n_comps == 0 {
            return Err(Error::param("--n-comps", "must be at least 1"));
        }
        if self.harmony.is_some() && self.no_pca {
            return Err(Error::param(
                "--harmony",
                "corrects the PCA embedding: it cannot run with --no-pca",
            ));
        }
        if self.n_neighbors < 2 {
            return Err(Error::param(
                "--n-neighbors",
                "must be at least 2 (the cell itself counts as one)",
            ));
        }
        Ok(PipelineConfig {
            qc_mito_prefix: (!self.no_qc).then(|| self.mito_prefix.clone()),
            min_genes: (!self.no_filter_cells).then_some(self.min_genes),
            min_cells: (!self.no_filter_genes).then_some(self.min_cells),
            target_sum: (!self.no_normalize)
                .then_some((self.target_sum > 0.0).then_some(self.target_sum)),
            log1p: !self.no_log1p,
            hvg: (!self.no_hvg).then(|| HvgOptions {
                flavor,
                n_top_genes: Some(self.n_top_genes),
                batch_key: self.batch_key.clone(),
                layer: None,
            }),
            subset_hvg: !self.no_subset,
            scale_max_value: (!self.no_scale).then_some((!self.no_clip).then_some(self.max_value)),
            n_comps: (!self.no_pca).then_some(self.n_comps),
            harmony: self.harmony.as_ref().map(|key| HarmonyOptions {
                key: key.clone(),
                params: HarmonyParams {
                    seed: self.harmony_seed,
                    ..HarmonyParams::default()
                },
            }),
            n_neighbors: (!self.no_pca && !self.no_neighbors).then_some(self.n_neighbors),
            neighbors_use_rep: self
                .harmony
                .as_ref()
                .map(|_| crate::steps::HARMONY_ADJUSTED_BASIS.to_string()),
        })
    }
}

/// Reads an h5ad file or a 10x HDF5 matrix (see [`crate::io::is_10x_h5`]), with the reader's
/// notices.
pub fn read_input(path: &Path, genome: Option<&str>) -> Result<(AnnData, Vec<String>)> {
    if crate::io::is_10x_h5(path) {
        crate::io::read_10x_h5_with_notices(path, genome)
    } else {
        crate::io::read_h5ad_with_notices(path)
    }
}

/// The timeline recorder of `--memory-timeline`, in front of the run's resource.
type Recorder = Arc<TimelineAdaptor<SharedResource>>;

/// The allocation log of `--memory-snapshot`, kept in memory until the run ends.
#[derive(Clone, Default)]
struct LogBuffer(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `--memory-snapshot` and `--allocation-log` need at the end: the logging adaptor (to
/// flush) and its buffer.
struct AllocationLog {
    adaptor: Arc<LoggingAdaptor<SharedResource>>,
    buffer: LogBuffer,
}

impl AllocationLog {
    /// The log's CSV so far, and the error of writing `what` to `path`.
    fn contents<'a>(
        &self,
        path: &'a Path,
        what: &'static str,
    ) -> Result<(Vec<u8>, impl Fn(String) -> Error + 'a)> {
        let err = move |e: String| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write the {what}: {e}"),
        };
        self.adaptor.flush().map_err(|e| err(e.to_string()))?;
        Ok((self.buffer.0.lock().clone(), err))
    }

    /// Writes the run's allocations as CSV (RMM's logging format), under a temporary name to
    /// be moved into place with the output.
    fn write_csv(&self, path: &Path) -> Result<StagedFile> {
        let (log, err) = self.contents(path, "allocation log")?;
        let staged = StagedFile::new(path);
        std::fs::write(staged.path(), log).map_err(|e| err(e.to_string()))?;
        Ok(staged)
    }

    /// Writes the run's allocations as a PyTorch memory snapshot, under a temporary name to be
    /// moved into place with the output.
    fn write(&self, path: &Path) -> Result<StagedFile> {
        let (log, err) = self.contents(path, "memory snapshot")?;
        let records = parse_log(&log[..]).map_err(|e| err(e.to_string()))?;
        let staged = StagedFile::new(path);
        write_memory_viz_snapshot(&records, 0, staged.path()).map_err(|e| err(e.to_string()))?;
        Ok(staged)
    }
}

/// The run's GPUs, set up: contexts, memory pools, warm-ups started.
struct GpuSetup {
    gpus: Vec<GpuRun>,
    recorder: Option<Recorder>,
    snapshot: Option<AllocationLog>,
    record: StepRecord,
}

impl GpuSetup {
    /// The GPUs and the first one's memory recorders, the setup's record added to `report`.
    fn adopt(
        self,
        args: &RunArgs,
        report: &mut RunReport,
    ) -> (Vec<GpuRun>, Option<Recorder>, Option<AllocationLog>) {
        report.steps.push(self.record);
        let name = self.gpus.first().and_then(|g| g.ctx.device().name().ok());
        report.gpu_name = match self.gpus.len() {
            1 => name,
            n => name.map(|name| format!("{name} x{n}")),
        };
        report.allocator = Some(format!("{:?}", args.allocator).to_lowercase());
        (self.gpus, self.recorder, self.snapshot)
    }
}

/// Sets up the GPUs `ordinals`, each on a thread of its own, all at once (made one after the
/// other, four H100s took 0.6-0.7 s), and starts their warm-ups; `when` ends the record's note.
fn set_up_gpus(
    args: &RunArgs,
    config: &PipelineConfig,
    ordinals: std::ops::Range<usize>,
    when: &str,
) -> Result<GpuSetup> {
    let timer = StepTimer::start(GPU_SETUP_STEP);
    let runs: Vec<_> = std::thread::scope(|s| {
        let setups: Vec<_> = ordinals
            .map(|ordinal| s.spawn(move || gpu_run(args, ordinal)))
            .collect();
        setups
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let (mut gpus, mut recorder, mut snapshot) = (Vec::new(), None, None);
    for run in runs {
        let (g, r, s) = run?;
        g.warm_up(Some(config));
        if gpus.is_empty() {
            (recorder, snapshot) = (r, s);
        }
        gpus.push(g);
    }
    let note = format!("{} GPU(s): contexts and memory pools{when}", gpus.len());
    Ok(GpuSetup {
        gpus,
        recorder,
        snapshot,
        record: timer.finish(0, 0, note),
    })
}

/// GPU `ordinal` with the chosen allocator behind a statistics adaptor (and the timeline
/// recorder when asked), and a stream for the steps.
fn gpu_run(
    args: &RunArgs,
    ordinal: usize,
) -> Result<(GpuRun, Option<Recorder>, Option<AllocationLog>)> {
    let device = rmm_core::Device::cuda(ordinal)
        .map_err(|e| Error::Device(format!("GPU {ordinal}: {e}")))?;
    let memory = device
        .memory_info()
        .map_err(|e| Error::Device(format!("GPU {ordinal} memory: {e}")))?;
    let budget = memory_budget(
        args.device_memory_limit,
        args.pool_max,
        memory.free as u64,
        memory.total as u64,
    )?;
    let (resource, probe) =
        allocator::build_with_probe(args.allocator, &device, args.pool_initial, args.pool_max)?;
    let mut resource: SharedResource = Arc::new(LimitingAdaptor::new(resource, budget as usize));
    let mut snapshot = None;
    if args.memory_snapshot.is_some() || args.allocation_log.is_some() {
        let buffer = LogBuffer::default();
        let adaptor = Arc::new(
            LoggingAdaptor::with_writer(resource, buffer.clone())
                .map_err(|e| Error::Device(format!("the allocation log: {e}")))?,
        );
        resource = adaptor.clone();
        snapshot = Some(AllocationLog { adaptor, buffer });
    }
    let mut recorder = None;
    if args.memory_timeline.is_some() {
        let mut t = TimelineAdaptor::new(resource);
        if let Some(p) = probe {
            t = t.with_probe(move || p());
        }
        let t = Arc::new(t);
        resource = t.clone();
        recorder = Some(t);
    }
    let stream = device
        .new_stream()
        .map_err(|e| Error::Device(format!("creating a stream on GPU {ordinal}: {e}")))?;
    let run = GpuRun::new(&device, &stream, resource)?.with_memory(budget, args.execution);
    // The pinned staging buffers of the upload and of the output's downloads (on the copy
    // lane), made now, beside the input's read: pinning takes 0.05-0.1 s a GPU, and made later
    // it would wait for the kernels queued meanwhile (see `GpuContext::prepare_transfers`).
    run.ctx
        .prepare_transfers()
        .and_then(|()| run.ctx.copy_lane()?.prepare_transfers())
        .map_err(|e| Error::Device(format!("GPU {ordinal}: pinned staging buffers: {e}")))?;
    Ok((run, recorder, snapshot))
}

/// How many GPUs the run splits its cells across: `--gpus`, else every visible GPU when there
/// are several and no single-GPU option is given.
fn gpu_count(args: &RunArgs, on_gpu: bool) -> Result<usize> {
    let single_only = [
        (args.memory_timeline.is_some(), "--memory-timeline"),
        (args.memory_snapshot.is_some(), "--memory-snapshot"),
        (args.allocation_log.is_some(), "--allocation-log"),
        (
            args.execution == Execution::Streamed,
            "--execution streamed",
        ),
    ];
    let visible = if on_gpu {
        rmm_cuda::device_count().unwrap_or(1)
    } else {
        1
    };
    match args.gpus {
        Some(0) => Err(Error::param("--gpus", "must be at least 1")),
        Some(n) if !on_gpu && n > 1 => Err(Error::param(
            "--gpus",
            "splits the cells across GPUs: it needs the GPU (--device gpu, or auto on a machine with one)",
        )),
        Some(n) if n > visible => Err(Error::param(
            "--gpus",
            format!("{n} GPUs asked, {visible} visible"),
        )),
        Some(n) if n > 1 => match single_only.iter().find(|(given, _)| *given) {
            Some((_, option)) => Err(Error::param(
                "--gpus",
                format!("{option} applies to a run on one GPU: use --gpus 1"),
            )),
            None => Ok(n),
        },
        Some(n) => Ok(n),
        None if single_only.iter().any(|(given, _)| *given) => Ok(1),
        None => Ok(visible.max(1)),
    }
}

/// The GPU of a process started by a launcher: its local rank's, one GPU per process.
fn launched_gpu(args: &RunArgs, on_gpu: bool, launch: Launch) -> Result<usize> {
    if !on_gpu {
        return Err(Error::param(
            "launcher",
            format!(
                "rank {} of {} was started by a launcher: split runs need a GPU per process (--device gpu)",
                launch.rank, launch.world
            ),
        ));
    }
    if args.gpus.is_some_and(|n| n != 1) {
        return Err(Error::param(
            "--gpus",
            "a process started by a launcher runs on one GPU (its local rank's)",
        ));
    }
    let visible = rmm_cuda::device_count().unwrap_or(1).max(1);
    Ok(launch.local_rank % visible)
}

/// The input: the generated demo data or the file read, with its step record.
fn load_input(
    args: &RunArgs,
    demo: &SyntheticParams,
    spinner: &mut Spinner,
    report: &mut RunReport,
) -> Result<(AnnData, StepRecord)> {
    if args.demo {
        report.input = format!(
            "generated: {} cells x {} genes, seed {}",
            args.demo_cells, args.demo_genes, args.seed
        );
        spinner.started("generate demo data");
        let timer = StepTimer::start("generate demo data");
        let adata = crate::synthetic::generate(demo);
        spinner.stop();
        let adata = adata?;
        let rec = timer.finish(
            adata.n_obs(),
            adata.n_vars(),
            format!("{} stored counts", adata.x.stored_values()),
        );
        Ok((adata, rec))
    } else {
        let input = args
            .input
            .as_ref()
            .expect("clap requires INPUT without --demo");
        report.input = input.display().to_string();
        spinner.started("read input");
        let timer = StepTimer::start("read input");
        let adata = read_input(input, args.genome.as_deref());
        spinner.stop();
        let (adata, notices) = adata?;
        for notice in notices {
            eprintln!("{notice}");
        }
        let rec = timer.finish(
            adata.n_obs(),
            adata.n_vars(),
            format!("{} stored values", adata.x.stored_values()),
        );
        Ok((adata, rec))
    }
}

/// One rank per GPU of `gpus`, joined by NCCL.
fn nccl_ranks(gpus: &[GpuRun]) -> Result<Vec<Rank>> {
    let devices: Vec<_> = gpus.iter().map(|g| g.ctx.device().clone()).collect();
    let comms = rmm_cuda::NcclComm::for_devices(&devices)
        .map_err(|e| Error::Device(format!("--gpus {}: {e}", gpus.len())))?;
    comms
        .into_iter()
        .zip(gpus)
        .map(|(c, g)| {
            let comm = NcclCommunicator::new(c, g.ctx.clone())
                .map_err(|e| Error::Device(e.to_string()))?;
            Ok(Rank {
                comm: Arc::new(comm),
                gpu: Some(g.clone()),
            })
        })
        .collect()
}

/// The run's device memory budget: `--device-memory-limit` (at most the GPU's memory), else
/// the default share of the free memory; never above `--pool-max`, which caps the pool anyway.
fn memory_budget(
    limit: Option<usize>,
    pool_max: Option<usize>,
    free: u64,
    total: u64,
) -> Result<u64> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let budget = match limit {
        Some(0) => {
            return Err(Error::param(
                "--device-memory-limit",
                "must be more than 0 bytes",
            ))
        }
        Some(l) if l as u64 > total => {
            return Err(Error::param(
                "--device-memory-limit",
                format!(
                    "{:.2} GiB is more than the GPU has ({:.2} GiB)",
                    gib(l as u64),
                    gib(total)
                ),
            ))
        }
        Some(l) => {
            if l as u64 > free {
                eprintln!(
                    "notice: --device-memory-limit {:.2} GiB is more than the {:.2} GiB free now; the run may end out of memory",
                    gib(l as u64),
                    gib(free)
                );
            }
            l as u64
        }
        None => crate::pipeline::default_budget(free),
    };
    Ok(pool_max.map_or(budget, |m| budget.min(m as u64)))
}

pub fn run(args: RunArgs) -> Result<()> {
    let config = args.config()?;
    let device = resolve(args.device)?;
    let output = match (&args.output, args.demo) {
        (Some(o), _) => o.clone(),
        (None, true) => PathBuf::from(DEMO_OUTPUT),
        (None, false) => return Err(Error::param("run", "an output file (-o) is needed")),
    };
    check_output_is_not_input(args.input.as_deref(), &output)?;
    let outputs = [
        ("-o", Some(&output)),
        ("--report", args.report.as_ref()),
        ("--memory-timeline", args.memory_timeline.as_ref()),
        ("--memory-snapshot", args.memory_snapshot.as_ref()),
        ("--allocation-log", args.allocation_log.as_ref()),
    ];
    for (flag, path) in outputs {
        if let Some(path) = path {
            super::check_output_place(flag, path)?;
        }
    }
    let mut spinner = Spinner::default();
    let start = crate::report::run_clock();
    let mut report = RunReport {
        device: device.device.to_string(),
        threads: rayon::current_num_threads(),
        output: Some(output.display().to_string()),
        ..Default::default()
    };

    if args.memory_snapshot.is_some() && device.device != "gpu" {
        return Err(Error::param(
            "--memory-snapshot",
            "records the GPU allocations of a run: it needs the GPU (--device gpu, or auto on a machine with one)",
        ));
    }
    if args.allocation_log.is_some() && device.device != "gpu" {
        return Err(Error::param(
            "--allocation-log",
            "records the GPU allocations of a run: it needs the GPU (--device gpu, or auto on a machine with one)",
        ));
    }
    if args.memory_timeline.is_some() && device.device != "gpu" {
        return Err(Error::param(
            "--memory-timeline",
            "records the GPU memory of a run: it needs the GPU (--device gpu, or auto on a machine with one)",
        ));
    }
    if device.device != "gpu"
        && (args.device_memory_limit.is_some() || args.execution != Execution::Auto)
    {
        return Err(Error::param(
            if args.device_memory_limit.is_some() {
                "--device-memory-limit"
            } else {
                "--execution"
            },
            "applies to GPU runs: it needs the GPU (--device gpu, or auto on a machine with one)",
        ));
    }
    let launch = Launch::from_vars(|k| std::env::var(k).ok())?;
    // The GPUs this process runs on.
    let ordinals = match launch {
        Some(l) => {
            let g = launched_gpu(&args, device.device == "gpu", l)?;
            g..g + 1
        }
        None => 0..gpu_count(&args, device.device == "gpu")?,
    };
    match (&device.notice, launch) {
        (_, Some(l)) => eprintln!(
            "notice: rank {} of {} (started by a launcher), on GPU {}",
            l.rank, l.world, ordinals.start
        ),
        _ if ordinals.len() > 1 => eprintln!(
            "notice: cells split across {} GPUs (--gpus 1: one GPU)",
            ordinals.len()
        ),
        (Some(n), None) => eprintln!("{n}"),
        (None, None) => {}
    }
    let on_gpu = device.device == "gpu";
    let demo = SyntheticParams::new(args.demo_cells, args.demo_genes, args.seed);
    let generated = match args.demo {
        true => generated_demo(&args, &demo, on_gpu, ordinals.len())?,
        false => None,
    };
    // The GPUs' contexts and pools are made while the input is read, and NCCL joins several
    // GPUs meanwhile (about a second on 2 H100s). A rank started by a launcher and a demo
    // generated on the GPU need their GPU before anything else.
    let set_up_first = on_gpu && (launch.is_some() || generated.is_some());
    let mut setup = None;
    if set_up_first {
        setup = Some(set_up_gpus(&args, &config, ordinals.clone(), "")?);
    }
    let mut join_record = None;
    let launched_rank = match (launch, &setup) {
        (Some(l), Some(set)) => {
            let timer = StepTimer::start("join the ranks (NCCL)");
            let rank = launcher::join(l, set.gpus[0].clone())?;
            join_record = Some(timer.finish(0, 0, format!("rank {} of {}", l.rank, l.world)));
            Some((l, rank))
        }
        _ => None,
    };
    if let Some(note) = generated {
        eprintln!("{note}");
        let set = setup.expect("generated_demo checked the GPU");
        let (g, recorder, snapshot) = set.adopt(&args, &mut report);
        let g = g.first().expect("one GPU (generated_demo checked)");
        report.input = format!(
            "generated on the GPU for every pass: {} cells x {} genes, seed {}",
            args.demo_cells, args.demo_genes, args.seed
        );
        let (adata, records) =
            crate::generated_run::run_generated(&demo, &config, g, &mut spinner)?;
        report.steps.extend(records);
        report.record_gpu(g);
        let written = write_step(&adata, &output, false, &mut spinner, &mut report)?;
        return finish(&args, report, start, written, &output, &recorder, &snapshot);
    }
    // Where the cells are split across GPUs, neighbors is short and the output's write is on
    // the critical path: its pages are reserved while the input is read. On one GPU the write
    // hides behind neighbors: they are reserved after the read, so that the read has the
    // host's memory to itself.
    let eligible = on_gpu && launch.is_none();
    let mut early = None;
    if eligible && ordinals.len() > 1 {
        if let Some(size) = input_size(&args, &demo) {
            early = output_started_early(&config, size, &output)?;
        }
    }
    let (background, loaded) = std::thread::scope(|s| {
        let setting_up = (on_gpu && !set_up_first).then(|| {
            s.spawn(|| {
                let set = set_up_gpus(&args, &config, ordinals.clone(), WHILE_READ)?;
                let mut joined = None;
                if set.gpus.len() > 1 {
                    let timer = StepTimer::start("join the GPUs (NCCL)");
                    let ranks = nccl_ranks(&set.gpus)?;
                    let note = format!("{} ranks{WHILE_READ}", set.gpus.len());
                    joined = Some((ranks, timer.finish(0, 0, note)));
                }
                Ok::<_, Error>((set, joined))
            })
        });
        let loaded = load_input(&args, &demo, &mut spinner, &mut report);
        let done = setting_up
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .transpose();
        (done, loaded)
    });
    let mut ranks = None;
    if let Some((set, joined)) = background? {
        setup = Some(set);
        if let Some((r, rec)) = joined {
            ranks = Some(r);
            join_record = Some(rec);
        }
    }
    let (gpus, recorder, snapshot) = match setup {
        Some(set) => set.adopt(&args, &mut report),
        None => (Vec::new(), None, None),
    };
    let gpu = gpus.first().cloned();
    let (mut adata, load_record) = loaded?;
    report.steps.extend(join_record);
    report.steps.push(load_record);
    if eligible && early.is_none() {
        let (n_obs, n_vars) = adata.x.shape();
        let size = (n_obs, n_vars, adata.x.stored_values() as u64);
        early = output_started_early(&config, size, &output)?;
    }

    let mut cell_graph = None;
    match (launched_rank, ranks) {
        (Some((l, rank)), _) => {
            let n = adata.n_obs();
            match launcher::run_launched(adata, &config, l, rank, &output, &mut spinner)? {
                Some((stacked, records)) => {
                    adata = stacked;
                    report.steps.extend(records);
                }
                None => {
                    let rows = sc_kernels::comm::rank_rows(n, l.world, l.rank);
                    println!(
                        "rank {} of {}: cells {}..{} handed to rank 0",
                        l.rank, l.world, rows.start, rows.end
                    );
                    return Ok(());
                }
            }
        }
        // Harmony and neighbors run after the rest, while X and .raw are written.
        (None, Some(ranks)) => {
            let graph = graph_group(&ranks);
            let first = config.per_cell_steps();
            let (stacked, records) = run_pipeline_split(adata, &first, ranks, &mut spinner)?;
            adata = stacked;
            report.steps.extend(records);
            cell_graph = Some(graph);
        }
        (None, None) => {
            let first = config.per_cell_steps();
            // X and .raw stay on the GPU for now (see SCPIPE_WRITE_FROM_GPU below).
            let records = run_steps(&mut adata, &first, gpu.as_ref(), &mut spinner, false)?;
            report.steps.extend(records);
            cell_graph = Some((gpu.iter().map(|g| g.ctx.clone()).collect(), Vec::new()));
        }
    }
    // X and .raw are copied from the GPU(s) straight into the file, so the host holds them once
    // instead of twice (9 GiB against 31 GiB while writing a million cells) and a split run
    // does not gather them first. SCPIPE_WRITE_FROM_GPU=0 gathers them on the host instead.
    let from_gpu = crate::io::switched_on("SCPIPE_WRITE_FROM_GPU");
    if gpu.is_some() && !from_gpu {
        let timer = StepTimer::start("move results to the host");
        adata.to_host()?;
        let rec = timer.finish(adata.n_obs(), adata.n_vars(), "X and .raw");
        report.steps.push(rec);
    }
    let written = match cell_graph {
        Some((gpus, group)) => {
            let graph = CellGraph {
                config: &config,
                gpu: gpu.as_ref(),
                gpus: &gpus,
                group,
            };
            graph.run_while_writing(&mut adata, &output, early, &mut spinner, &mut report)?
        }
        None => {
            // The file created ahead has the name write_step writes to: it goes first.
            drop(early);
            write_step(&adata, &output, true, &mut spinner, &mut report)?
        }
    };
    if let Some(g) = &gpu {
        report.record_gpu(g);
    }
    finish(&args, report, start, written, &output, &recorder, &snapshot)
}

/// The steps over the cell x cell structure still to run, and where.
struct CellGraph<'a> {
    config: &'a PipelineConfig,
    gpu: Option<&'a GpuRun>,
    gpus: &'a [Arc<GpuContext>],
    /// The GPUs' communicators, destroyed once the steps are done (see `run_while_writing`).
    group: Vec<Arc<dyn Communicator>>,
}

impl CellGraph<'_> {
    /// Runs harmony and neighbors while another thread writes the output's X and `.raw` (final
    /// by then, and most of the file's bytes), and writes the rest as soon as they end, while X
    /// and `.raw` may still be written; the records go to `report`. Without those steps, or when
    /// neighbors would read X itself (no PCA), it runs them and then writes the whole file.
    fn run_while_writing(
        self,
        adata: &mut AnnData,
        output: &Path,
        early: Option<H5adWrite>,
        spinner: &mut Spinner,
        report: &mut RunReport,
    ) -> Result<StagedFile> {
        let CellGraph {
            config,
            gpu,
            gpus,
            group,
        } = self;
        if !writes_during_graph_steps(config, adata) {
            // The file created ahead has the name write_step writes to: it goes first.
            drop(early);
            report.steps.extend(run_cell_graph_steps(
                adata, config, gpu, gpus, &group, spinner,
            )?);
            drop(group);
            return write_step(adata, output, true, spinner, report);
        }
        crate::io::prepare_device_write(&adata.x)?;
        if let Some(r) = &adata.raw {
            crate::io::prepare_device_write(&r.x)?;
        }
        let (n, g) = (adata.n_obs(), adata.n_vars());
        let file = match early {
            Some(file) => file,
            None => crate::io::create_h5ad(output, 0, None)?,
        };
        // The steps read obsm and obs only; X is an empty stand-in of the same shape meanwhile.
        let x = std::mem::replace(&mut adata.x, Matrix::Sparse(CsrMatrix::zeros(n, g)));
        let raw = adata.raw.take();
        let (bulk, records, rest, destroying) = std::thread::scope(|s| {
            let writing = s.spawn(|| {
                let timer = StepTimer::start("write h5ad: X and .raw");
                let mut note = "while harmony and neighbors ran".to_string();
                if file.reserves() {
                    note += ", into pages reserved meanwhile";
                }
                file.write_x_and_raw(&x, raw.as_ref())?;
                Ok::<_, Error>(timer.finish(n, g, note))
            });
            let records = run_cell_graph_steps(adata, config, gpu, gpus, &group, spinner);
            // NCCL's communicators are done with: destroyed on a thread of their own (0.3 s on
            // 2 and 4 H100s) while the rest of the output is written. On an error it is left to
            // end with the process: after a failed collective, ncclCommDestroy may wait for
            // work that never completes, and waiting for it would hang the failed run.
            let destroying = (!group.is_empty()).then(|| std::thread::spawn(move || drop(group)));
            // The rest goes in as soon as the steps end, while X and `.raw` may still be on
            // their way (on several GPUs neighbors ends well before them). Since the pages are
            // reserved ahead, the two parts no longer wait on each other's fallocate.
            let rest = records.is_ok().then(|| {
                spinner.started("write h5ad");
                let timer = StepTimer::start("write h5ad: the rest");
                let beside = !writing.is_finished();
                let written = file.write_rest(adata);
                spinner.stop();
                let note = match beside {
                    true => format!("{}, begun while X and .raw were written", output.display()),
                    false => output.display().to_string(),
                };
                written.map(|()| timer.finish(n, g, note))
            });
            let bulk = writing
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (bulk, records, rest, destroying)
        });
        adata.x = x;
        adata.raw = raw;
        report.steps.extend(records?);
        report.steps.push(bulk?);
        let mut rest = rest.expect("written once the steps succeeded")?;
        // Closing (HDF5's metadata) belongs to the rest; waiting for X and `.raw` does not.
        let closing = std::time::Instant::now();
        let written = file.close();
        if let Some(h) = destroying {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
        let written = written?;
        rest.seconds += closing.elapsed().as_secs_f64();
        report.steps.push(rest);
        Ok(written)
    }
}

/// The output of a GPU run that writes X and `.raw` while harmony and neighbors run, created
/// before its data, with a bound on its bytes (for an input of `size`: cells, genes, stored
/// values) reserved on a thread of its own meanwhile (see `io::create_h5ad`: on tmpfs the
/// reservation is most of a large write's time). `None` for a run without those steps.
fn output_started_early(
    config: &PipelineConfig,
    (n_obs, n_vars, nnz): (usize, usize, u64),
    output: &Path,
) -> Result<Option<H5adWrite>> {
    if !config.has_cell_graph_steps() || config.n_comps.is_none() {
        return Ok(None);
    }
    let bytes = crate::memory_plan::output_bytes(n_obs, n_vars, nnz as usize, config);
    let memory = crate::generated_run::host_available_bytes();
    crate::io::create_h5ad(output, bytes, memory).map(Some)
}

/// The input's cells, genes and stored values, known before it is read: a demo's bound (2% above
/// the count expected: what is reserved beyond the output's end costs time to give back, and a
/// dataset beyond the bound is reserved by its fill), an h5ad file's metadata. `None` for a 10x
/// file, or an h5ad file whose X cannot be sized (its read then says why).
fn input_size(args: &RunArgs, demo: &SyntheticParams) -> Option<(usize, usize, u64)> {
    match &args.input {
        _ if args.demo => {
            let expected = crate::synthetic::expected_stored_values(demo) as f64 * 1.02;
            let most = crate::synthetic::max_stored_values(demo);
            Some((demo.n_cells, demo.n_genes, most.min(expected as u64)))
        }
        Some(input) if !crate::io::is_10x_h5(input) => crate::io::h5ad_x_size(input).ok(),
        _ => None,
    }
}

/// Whether X and `.raw` are written while harmony and neighbors run: there are such steps, and
/// they read `obsm['X_pca']` (not X itself).
fn writes_during_graph_steps(config: &PipelineConfig, adata: &AnnData) -> bool {
    config.has_cell_graph_steps() && adata.obsm.contains_key("X_pca")
}

/// Writes `adata` (without X: a generated run's result) under a temporary name, timed as the
/// "write h5ad" step of `report`.
fn write_step(
    adata: &AnnData,
    output: &Path,
    with_x: bool,
    spinner: &mut Spinner,
    report: &mut RunReport,
) -> Result<StagedFile> {
    spinner.started("write h5ad");
    let timer = StepTimer::start("write h5ad");
    let written = if with_x {
        crate::io::write_h5ad_staged(adata, output)
    } else {
        crate::io::write_h5ad_staged_without_x(adata, output)
    };
    spinner.stop();
    let written = written?;
    let note = match with_x {
        true => output.display().to_string(),
        false => format!("{} (no X)", output.display()),
    };
    report
        .steps
        .push(timer.finish(adata.n_obs(), adata.n_vars(), note));
    Ok(written)
}

/// The report's record of the GPUs' setup.
const GPU_SETUP_STEP: &str = "set up the GPU(s)";

/// How the notes of the steps that ran beside the input's read end.
const WHILE_READ: &str = ", while the input was read";

/// The run's memory pictures and logs, its report, and the output moved into place.
fn finish(
    args: &RunArgs,
    mut report: RunReport,
    start: Instant,
    written: StagedFile,
    output: &Path,
    recorder: &Option<Recorder>,
    snapshot: &Option<AllocationLog>,
) -> Result<()> {
    report.total_seconds = start.elapsed().as_secs_f64();
    // Moved into place together, the output last.
    let mut files = Vec::new();
    if let (Some(path), Some(rec)) = (&args.memory_timeline, recorder) {
        // Step ends on the recorder's clock, which starts when the first GPU's memory pool is
        // made (`start` is the run's clock, which the steps' starts count from).
        let recorder_start = rec.started().saturating_duration_since(start).as_secs_f64();
        let marks = memory_timeline::step_marks(&report.steps, recorder_start);
        let title = format!(
            "scpipe run: GPU memory over time ({} allocator)",
            report.allocator.as_deref().unwrap_or("?")
        );
        files.push(memory_timeline::write_svg(
            path,
            &title,
            &rec.timeline(),
            &marks,
        )?);
    }
    if let (Some(path), Some(log)) = (&args.memory_snapshot, snapshot) {
        files.push(log.write(path)?);
    }
    if let (Some(path), Some(log)) = (&args.allocation_log, snapshot) {
        files.push(log.write_csv(path)?);
    }
    report.peak_rss_bytes = report.steps.iter().filter_map(|s| s.peak_rss_bytes).max();
    if let Some(path) = &args.report {
        files.push(stage_report(&report, path)?);
    }
    files.push(written);
    crate::io::commit_all(files)?;
    print!("{}", report.table());
    println!("output: {}", output.display());
    if let Some(path) = &args.report {
        println!("report: {}", path.display());
    }
    Ok(())
}

/// Whether a `--demo` run generates its cells on the GPU for every pass (`--demo-on-gpu`, or
/// X too large for host memory), and the notice that says so; a clear error where that run
/// cannot be made.
fn generated_demo(
    args: &RunArgs,
    params: &SyntheticParams,
    on_gpu: bool,
    n_gpus: usize,
) -> Result<Option<String>> {
    let available = crate::generated_run::host_available_bytes();
    let too_large = available.is_some_and(|a| crate::generated_run::too_large_for_host(params, a));
    if !args.demo_on_gpu && !too_large {
        return Ok(None);
    }
    let why = if args.demo_on_gpu {
        "--demo-on-gpu".to_string()
    } else {
        format!(
            "its X (up to {:.0} GB) does not fit in host memory ({:.0} GB available)",
            crate::synthetic::max_stored_values(params) as f64 * 8e-9,
            available.unwrap_or(0) as f64 * 1e-9
        )
    };
    let option = if args.demo_on_gpu {
        "--demo-on-gpu"
    } else {
        "--demo"
    };
    if !on_gpu {
        return Err(Error::param(
            option,
            format!("the demo is generated on the GPU ({why}): it needs the GPU (--device gpu)"),
        ));
    }
    if n_gpus != 1 {
        return Err(Error::param(
            option,
            format!("the demo is generated on one GPU ({why}): run it with --gpus 1"),
        ));
    }
    if args.execution != Execution::Auto {
        return Err(Error::param(
            "--execution",
            format!("the demo is generated on the GPU for every pass ({why}): X is never held"),
        ));
    }
    Ok(Some(format!(
        "notice: the demo's cells are generated on the GPU block by block for every pass ({why}); \
         the output holds no X"
    )))
}

/// Refuses an output that is the input file itself (or a link to it): the input is never
/// replaced.
fn check_output_is_not_input(input: Option<&Path>, output: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let (Some(input), Ok(out)) = (input, std::fs::metadata(output)) else {
        return Ok(());
    };
    match std::fs::metadata(input) {
        Ok(inp) if (inp.dev(), inp.ino()) == (out.dev(), out.ino()) => Err(Error::param(
            "-o",
            format!(
                "{} is the input file; scpipe does not replace its input",
                output.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes the report under a temporary name next to `path`, to be moved into place with the
/// output.
fn stage_report(report: &RunReport, path: &Path) -> Result<StagedFile> {
    let staged = StagedFile::new(path);
    std::fs::write(staged.path(), report.to_json()).map_err(|e| Error::File {
        path: path.to_path_buf(),
        message: format!("cannot write the report: {e}"),
    })?;
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// `--memory-snapshot`'s path on the simulated device: the in-memory log of a logging
    /// adaptor becomes a pickle with the allocations in order and the live one as a segment.
    #[test]
    fn the_snapshot_log_holds_every_event_of_the_run() {
        use rmm_core::MemoryResource;
        let device = rmm_core::Device::simulated(1 << 30);
        let buffer = LogBuffer::default();
        let upstream: SharedResource = Arc::new(rmm_core::CudaResource::new(&device));
        let adaptor = Arc::new(LoggingAdaptor::with_writer(upstream, buffer.clone()).unwrap());
        let stream = device.new_stream().unwrap();
        let a = adaptor.allocate(4096, &stream).unwrap();
        let b = adaptor.allocate(1 << 20, &stream).unwrap();
        unsafe { adaptor.deallocate(a, 4096, &stream).unwrap() };
        let log = AllocationLog {
            adaptor: adaptor.clone(),
            buffer,
        };
        let dir = std::env::temp_dir().join(format!("scpipe-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.pickle");
        log.write(&path).unwrap().commit().unwrap();
        let v: serde_pickle::Value = serde_pickle::value_from_reader(
            std::fs::File::open(&path).unwrap(),
            Default::default(),
        )
        .unwrap();
        let text = format!("{v:?}");
        for part in [
            "alloc",
            "free_completed",
            "active_allocated",
            &format!("{b}"),
        ] {
            assert!(text.contains(part), "{part} missing");
        }
        unsafe { adaptor.deallocate(b, 1 << 20, &stream).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_budget_is_the_limit_or_most_of_the_free_memory_and_never_above_the_pool() {
        assert_eq!(
            memory_budget(Some(8 << 30), None, 70 * GIB, 80 * GIB).unwrap(),
            8 * GIB
        );
        assert_eq!(
            memory_budget(None, None, 70 * GIB, 80 * GIB).unwrap(),
            crate::pipeline::default_budget(70 * GIB)
        );
        assert_eq!(
            memory_budget(None, Some(4 << 30), 70 * GIB, 80 * GIB).unwrap(),
            4 * GIB
        );
        // Above the free memory is allowed (with a notice), above the GPU's memory is not.
        assert_eq!(
            memory_budget(Some(75 << 30), None, 70 * GIB, 80 * GIB).unwrap(),
            75 * GIB
        );
        let e = memory_budget(Some(96 << 30), None, 70 * GIB, 80 * GIB)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--device-memory-limit") && e.contains("more than the GPU has"),
            "{e}"
        );
        let e = memory_budget(Some(0), None, 70 * GIB, 80 * GIB)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 0"), "{e}");
    }
}
