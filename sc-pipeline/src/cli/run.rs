//! `scpipe run INPUT -o OUT.h5ad [options]` and `scpipe run --demo`: the options, parsed
//! into a [`RunPlan`] that `run::execute` carries out; the run's table printed at the end.

use super::device::{resolve, DeviceChoice};
use super::progress::Spinner;
use crate::run::allocator::{parse_size, AllocatorChoice};
use crate::run::memory_plan::Execution;
use crate::run::{DeviceOptions, Input, Outcome, Outputs, PipelineConfig, RunPlan};
use crate::steps::{Flavor, HarmonyOptions, HarmonyParams, HvgOptions, ScrubletOptions};
use crate::synthetic::SyntheticParams;
use crate::{Error, Result};
use sc_kernels::neighbors::ivf::{self, IvfParams};
use sc_kernels::neighbors::KnnMethod;
use std::path::PathBuf;

/// Where `--demo` writes when no `-o` is given.
pub const DEMO_OUTPUT: &str = "scpipe_demo.h5ad";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Input: an h5ad file, an AnnData zarr store (a directory, zarr format 2 or 3), or a 10x
    /// Genomics HDF5 matrix (.h5).
    #[arg(required_unless_present = "demo")]
    pub input: Option<PathBuf>,
    /// Output: an h5ad file, or a zarr store when the name ends in .zarr (with --demo: default
    /// scpipe_demo.h5ad).
    #[arg(short, long, required_unless_present = "demo")]
    pub output: Option<PathBuf>,
    /// Compression of a zarr output's chunks: lz4 (in blosc; integers byte-shuffled first,
    /// floats not), zstd (level 1: half lz4's size, slower to write) or none (the fastest, the
    /// largest).
    #[arg(long, value_enum, default_value_t = ZarrCodec::Lz4)]
    pub zarr_compression: ZarrCodec,
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
    /// Draw the run's pictures into this folder (made if missing), as PNG and SVG: the UMAP
    /// coloured by Leiden cluster, by batch and by total counts, the marker genes' dot plot,
    /// and the QC violins before and after filtering. A picture whose step did not run is
    /// skipped with the reason.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Marker genes per group in the dot plot of --plot (scanpy's
    /// `rank_genes_groups_dotplot(n_genes=...)`).
    #[arg(long, value_name = "N", default_value_t = crate::plot::GENES_PER_GROUP)]
    pub plot_genes: usize,
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
    /// Host memory the run may use, e.g. 8GiB. An h5ad input whose X (8 bytes a stored value in
    /// memory) is over half of it is not held: it is read from the file block by block for
    /// every pass, onto one GPU (the output then holds no X, and normalize_total needs a fixed
    /// --target-sum). Default: the memory the machine has available.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub host_memory_limit: Option<usize>,
    /// How a GPU run holds X: auto (in device memory when it fits the limit, else streamed),
    /// in-memory, or streamed. Where X was held (the GPU, host memory, the disk, or several
    /// GPUs) and why is the line under the step table and the report's x_placement.
    #[arg(long, value_enum, default_value_t = Execution::Auto)]
    pub execution: Execution,
    /// GPUs to split the cells across (one block of cells, one stream and one memory pool per
    /// GPU; per-gene statistics combined through NCCL). Default: every visible GPU when there
    /// are several, unless a single-GPU option (--memory-timeline, --memory-snapshot,
    /// --execution streamed) is given.
    #[arg(long, value_name = "N")]
    pub gpus: Option<usize>,

    /// Prefix of the mitochondrial genes (the `mt` QC variable). Default: `MT-` (human) or
    /// `mt-` (mouse), whichever the gene names use.
    #[arg(long)]
    pub mito_prefix: Option<String>,
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
    /// regress_out(keys=...) before scale, on these obs columns (comma-separated: numeric
    /// ones such as total_counts,pct_counts_mt, which QC writes, or one categorical column);
    /// X becomes dense. Off by default, as in scanpy's tutorial.
    #[arg(long, value_name = "KEYS", value_delimiter = ',')]
    pub regress_out: Vec<String>,
    /// scrublet() after the filters, before normalize_total: each cell's doublet_score and
    /// predicted_doublet (obs), uns['scrublet']; X unchanged. Off by default (scanpy's
    /// tutorial runs it); on the host for now.
    #[arg(long)]
    pub scrublet: bool,
    /// scrublet(batch_key=...): score each batch of this obs column apart (implies --scrublet).
    #[arg(long, value_name = "KEY")]
    pub scrublet_batch_key: Option<String>,
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
    /// obsm['X_pca_harmony'], which neighbors then uses); harmony2 defaults (at
    /// most 4 clustering iterations a round, as rapids-singlecell 0.18).
    #[arg(long, value_name = "KEY")]
    pub harmony: Option<String>,
    /// Seed of harmony's k-means initialization and block order.
    #[arg(long, default_value_t = 0, requires = "harmony")]
    pub harmony_seed: u64,
    /// neighbors(n_neighbors=...).
    #[arg(long, default_value_t = 15)]
    pub n_neighbors: usize,
    #[arg(long, help = "Skip neighbors (and the steps on its graph)")]
    pub no_neighbors: bool,
    /// How neighbors searches: every cell against every cell (exact; on the GPU from 100,000
    /// cells within the lists that proven bounds keep, the same result), within the probed
    /// lists of an inverted file (ivf, approximate; the recall on a sample is reported), or
    /// exact below 200,000 cells and ivf from there (auto; where ivf became the faster on an
    /// H200).
    #[arg(long, value_enum, default_value_t = KnnChoice::Auto)]
    pub neighbors_method: KnnChoice,
    /// Lists of the inverted file (ivf and auto; default: the square root of the cells).
    #[arg(long, value_name = "N")]
    pub n_lists: Option<usize>,
    /// Lists each cell's search probes (ivf and auto; default: the fewest that reach
    /// --target-recall on the recall sample). More probes: higher recall, more time.
    #[arg(long, value_name = "N")]
    pub n_probes: Option<usize>,
    /// recall@k the probes are chosen to reach, measured on a sample of 2,048 cells against
    /// their exact kNN (ivf and auto, without --n-probes; default 0.96).
    #[arg(long, value_name = "R")]
    pub target_recall: Option<f64>,
    /// Rounds of NN-descent's local join after the inverted file's scan (ivf and auto; default
    /// 1, at most 8; 0: the scan's result as it is). Each cell is offered its neighbours' and
    /// reverse neighbours' neighbours: the scan misses neighbours across list boundaries, which
    /// cut the graph and split Leiden's clusters there.
    #[arg(long, value_name = "N")]
    pub descent_rounds: Option<usize>,
    #[command(flatten)]
    pub graph: super::graph_steps::GraphStepArgs,
}

/// `--zarr-compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ZarrCodec {
    None,
    Zstd,
    Lz4,
}

impl From<ZarrCodec> for crate::io::ZarrCompression {
    fn from(c: ZarrCodec) -> Self {
        match c {
            ZarrCodec::None => crate::io::ZarrCompression::None,
            ZarrCodec::Zstd => crate::io::ZarrCompression::Zstd,
            ZarrCodec::Lz4 => crate::io::ZarrCompression::Lz4,
        }
    }
}

/// `--neighbors-method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KnnChoice {
    Exact,
    Ivf,
    Auto,
}

impl RunArgs {
    /// The kNN search `--neighbors-method`, `--n-lists`, `--n-probes` and `--target-recall`
    /// ask for.
    fn knn_method(&self) -> Result<KnnMethod> {
        for (flag, v) in [("--n-lists", self.n_lists), ("--n-probes", self.n_probes)] {
            if v == Some(0) {
                return Err(Error::param(flag, "must be at least 1"));
            }
            if v.is_some() && self.neighbors_method == KnnChoice::Exact {
                return Err(Error::param(
                    flag,
                    "sets the inverted file: use it with --neighbors-method ivf or auto",
                ));
            }
        }
        if let Some(t) = self.target_recall {
            if self.neighbors_method == KnnChoice::Exact {
                return Err(Error::param(
                    "--target-recall",
                    "chooses the inverted file's probes: use it with --neighbors-method ivf or auto",
                ));
            }
            if self.n_probes.is_some() {
                return Err(Error::param(
                    "--target-recall",
                    "and --n-probes both choose the probes: give one",
                ));
            }
            if !(t > 0.0 && t <= 1.0) {
                return Err(Error::param(
                    "--target-recall",
                    format!("must be above 0 and at most 1, got {t}"),
                ));
            }
        }
        if let Some(r) = self.descent_rounds {
            if self.neighbors_method == KnnChoice::Exact {
                return Err(Error::param(
                    "--descent-rounds",
                    "refines the inverted file's result: use it with --neighbors-method ivf or auto",
                ));
            }
            if r > ivf::MAX_DESCENT_ROUNDS {
                return Err(Error::param(
                    "--descent-rounds",
                    format!("must be at most {}, got {r}", ivf::MAX_DESCENT_ROUNDS),
                ));
            }
        }
        if let (Some(l), Some(p)) = (self.n_lists, self.n_probes) {
            if p > l {
                return Err(Error::param(
                    "--n-probes",
                    format!("{p} is more than the {l} lists (--n-lists)"),
                ));
            }
        }
        let ivf = IvfParams {
            n_lists: self.n_lists,
            n_probes: self.n_probes,
            target_recall: self.target_recall,
            descent_rounds: self.descent_rounds,
            bound_probes: None,
        };
        Ok(match self.neighbors_method {
            KnnChoice::Exact => KnnMethod::Exact,
            KnnChoice::Ivf => KnnMethod::Ivf(ivf),
            KnnChoice::Auto => KnnMethod::Auto(ivf),
        })
    }

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
        let neighbors = !self.no_pca && !self.no_neighbors;
        let leiden = self.graph.leiden(neighbors)?;
        let markers = self.graph.markers(leiden.is_some())?;
        let umap = self.graph.umap(neighbors)?;
        let embedding_density = self.graph.embedding_density(umap.is_some())?;
        Ok(PipelineConfig {
            qc_mito_prefix: (!self.no_qc).then(|| match &self.mito_prefix {
                Some(p) => crate::run::MitoPrefix::Given(p.clone()),
                None => crate::run::MitoPrefix::Detect,
            }),
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
                cutoffs: Default::default(),
            }),
            subset_hvg: !self.no_subset,
            regress_out: self.regress_out.clone(),
            scrublet: (self.scrublet || self.scrublet_batch_key.is_some()).then(|| {
                ScrubletOptions {
                    params: Default::default(),
                    batch_key: self.scrublet_batch_key.clone(),
                }
            }),
            scale_max_value: (!self.no_scale).then_some((!self.no_clip).then_some(self.max_value)),
            n_comps: (!self.no_pca).then_some(self.n_comps),
            harmony: self.harmony.as_ref().map(|key| HarmonyOptions {
                key: key.clone(),
                params: HarmonyParams {
                    seed: self.harmony_seed,
                    ..HarmonyParams::default()
                },
            }),
            n_neighbors: neighbors.then_some(self.n_neighbors),
            knn_method: self.knn_method()?,
            neighbors_use_rep: self
                .harmony
                .as_ref()
                .map(|_| crate::steps::HARMONY_ADJUSTED_BASIS.to_string()),
            umap,
            embedding_density,
            tsne: self.graph.tsne(!self.no_pca)?,
            draw_graph: self.graph.draw_graph(neighbors)?,
            diffmap: self.graph.diffmap(neighbors)?,
            dpt_root: self.graph.dpt_root()?,
            dpt_branchings: self.graph.dpt_branchings()?,
            louvain: self.graph.louvain(neighbors)?,
            kmeans: self.graph.kmeans(!self.no_pca)?,
            paga: self.graph.paga(neighbors)?,
            leiden,
            markers,
            // The QC violins show the cells before filter_cells too.
            keep_before_filter: match self.plot {
                Some(_) => crate::plot::QC_COLUMNS.map(|(c, _)| c.to_string()).to_vec(),
                None => Vec::new(),
            },
        })
    }

    /// The run the options describe, on the device `--device` resolves to.
    pub fn plan(&self) -> Result<RunPlan> {
        let config = self.config()?;
        if self.plot_genes == 0 {
            return Err(Error::param("--plot-genes", "must be at least 1"));
        }
        let device = resolve(self.device)?;
        let h5ad = match (&self.output, self.demo) {
            (Some(o), _) => o.clone(),
            (None, true) => PathBuf::from(DEMO_OUTPUT),
            (None, false) => return Err(Error::param("run", "an output file (-o) is needed")),
        };
        let input = match &self.input {
            _ if self.demo => Input::Demo {
                params: SyntheticParams::new(self.demo_cells, self.demo_genes, self.seed),
                on_gpu: self.demo_on_gpu,
            },
            Some(path) => Input::File {
                path: path.clone(),
                genome: self.genome.clone(),
            },
            None => return Err(Error::param("run", "an input file is needed (or --demo)")),
        };
        let format = crate::io::OutputFormat::for_path(&h5ad, self.zarr_compression.into());
        Ok(RunPlan {
            input,
            outputs: Outputs {
                h5ad,
                report: self.report.clone(),
                memory_timeline: self.memory_timeline.clone(),
                memory_snapshot: self.memory_snapshot.clone(),
                allocation_log: self.allocation_log.clone(),
                plot: self.plot.clone(),
                plot_genes: self.plot_genes,
                format,
            },
            config,
            target: device.target,
            target_notice: device.notice,
            device: DeviceOptions {
                allocator: self.allocator,
                pool_initial: self.pool_initial,
                pool_max: self.pool_max,
                device_memory_limit: self.device_memory_limit,
                execution: self.execution,
                timeline: self.memory_timeline.is_some(),
                allocation_log: self.memory_snapshot.is_some() || self.allocation_log.is_some(),
            },
            gpus: self.gpus,
            host_memory_limit: self.host_memory_limit.map(|b| b as u64),
        })
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    let plan = args.plan()?;
    let mut spinner = Spinner::default();
    match crate::run::execute(&plan, &mut spinner)? {
        Outcome::Written(done) => {
            print!("{}", done.report.table());
            println!("output: {}", plan.outputs.h5ad.display());
            if let Some(path) = &plan.outputs.report {
                println!("report: {}", path.display());
            }
        }
        Outcome::HandedOver { rank, world, cells } => println!(
            "rank {rank} of {world}: cells {}..{} handed to rank 0",
            cells.start, cells.end
        ),
    }
    Ok(())
}
