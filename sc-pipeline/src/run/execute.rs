//! Carries out a [`RunPlan`]: sets up the GPUs (beside the input's read), reads or generates
//! the input, runs the step table in the mode the plan and the machine call for (in memory or
//! streamed on one GPU, generated on the GPU or read from the file for every pass, split across
//! this host's GPUs, or one rank of a launched group), and writes the output.

use super::gpu::GpuRun;
use super::in_memory::run_steps;
use super::launched::{self, Launch};
use super::observer::StepObserver;
use super::output::{self, CellGraph, Finished};
use super::plan::{Input, RunPlan, Target};
use super::recorders::MemoryRecorders;
use super::split::{graph_group, run_split_checked, Rank};
use crate::io::OutputWrite;
use crate::report::{RunReport, StepRecord, StepTimer, XPlacement};
use crate::run::memory_plan::Placement;
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::NcclCommunicator;
use std::sync::Arc;

/// How a run ended.
pub enum Outcome {
    /// The output and the run's other files are in place.
    Written(Box<Finished>),
    /// A launched rank other than 0: its cells went to rank 0, which writes the output.
    HandedOver {
        rank: usize,
        world: usize,
        cells: std::ops::Range<usize>,
    },
}

/// The run's GPUs, set up: contexts, memory pools, warm-ups started.
struct GpuSetup {
    gpus: Vec<GpuRun>,
    /// The first GPU's memory recorders.
    recorders: MemoryRecorders,
    record: StepRecord,
}

impl GpuSetup {
    /// The GPUs and the first one's recorders, the setup's record added to `report`.
    fn adopt(self, plan: &RunPlan, report: &mut RunReport) -> (Vec<GpuRun>, MemoryRecorders) {
        report.steps.push(self.record);
        let name = self.gpus.first().and_then(|g| g.ctx.device().name().ok());
        report.gpu_name = match self.gpus.len() {
            1 => name,
            n => name.map(|name| format!("{name} x{n}")),
        };
        report.allocator = Some(format!("{:?}", plan.device.allocator).to_lowercase());
        (self.gpus, self.recorders)
    }
}

/// The report's record of the GPUs' setup.
const GPU_SETUP_STEP: &str = "set up the GPU(s)";

/// How the notes of the steps that ran beside the input's read end.
const WHILE_READ: &str = ", while the input was read";

/// Sets up the GPUs `ordinals`, each on a thread of its own, all at once (made one after the
/// other, four H100s took 0.6-0.7 s), and starts their warm-ups (`generated`: for the demo
/// generated on the GPU); `when` ends the record's note.
fn set_up_gpus(
    plan: &RunPlan,
    ordinals: std::ops::Range<usize>,
    generated: bool,
    when: &str,
) -> Result<GpuSetup> {
    let timer = StepTimer::start(GPU_SETUP_STEP);
    let runs: Vec<_> = std::thread::scope(|s| {
        let setups: Vec<_> = ordinals
            .map(|ordinal| {
                s.spawn(move || GpuRun::set_up(ordinal, &plan.device, Some(&plan.config)))
            })
            .collect();
        setups
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let (mut gpus, mut recorders) = (Vec::new(), MemoryRecorders::default());
    for run in runs {
        let (g, r) = run?;
        match generated {
            true => g.warm_up_generated(&plan.config),
            false => g.warm_up(Some(&plan.config)),
        }
        if gpus.is_empty() {
            recorders = r;
        }
        gpus.push(g);
    }
    let note = format!("{} GPU(s): contexts and memory pools{when}", gpus.len());
    Ok(GpuSetup {
        gpus,
        recorders,
        record: timer.finish(0, 0, note),
    })
}

/// Whether the output is a zarr store that will likely be written from the GPU (X not streamed
/// by choice, no host memory limit that may leave it on the disk): its chunk writers' pinned
/// buffers are then made beside the input's read. Made just before neighbors instead (256 MiB
/// pinned), they held up neighbors' start by 0.08-0.14 s at 1 M cells on H200s.
fn writes_zarr_from_gpu(plan: &RunPlan) -> bool {
    matches!(plan.outputs.format, crate::io::OutputFormat::Zarr(_))
        && plan.device.execution != crate::run::memory_plan::Execution::Streamed
        && plan.host_memory_limit.is_none()
}

/// The GPU of a process started by a launcher: its local rank's, one GPU per process.
fn launched_gpu(plan: &RunPlan, launch: Launch) -> Result<usize> {
    if plan.target != Target::Gpu {
        return Err(Error::param(
            "launcher",
            format!(
                "rank {} of {} was started by a launcher: split runs need a GPU per process (--device gpu)",
                launch.rank, launch.world
            ),
        ));
    }
    if plan.gpus.is_some_and(|n| n != 1) {
        return Err(Error::param(
            "--gpus",
            "a process started by a launcher runs on one GPU (its local rank's)",
        ));
    }
    let visible = rmm_cuda::device_count().unwrap_or(1).max(1);
    Ok(launch.local_rank % visible)
}

/// Reads an h5ad file, a zarr store or a 10x HDF5 matrix (see [`crate::io::is_10x_h5`]), with the reader's
/// notices.
pub fn read_input(path: &std::path::Path, genome: Option<&str>) -> Result<(AnnData, Vec<String>)> {
    if crate::io::is_zarr(path) {
        crate::io::read_zarr_with_notices(path)
    } else if crate::io::is_10x_h5(path) {
        crate::io::read_10x_h5_with_notices(path, genome)
    } else {
        crate::io::read_h5ad_with_notices(path)
    }
}

/// The input: the generated demo data or the file read, with its step record.
fn load_input(
    plan: &RunPlan,
    observer: &mut dyn StepObserver,
    report: &mut RunReport,
) -> Result<(AnnData, StepRecord)> {
    match &plan.input {
        Input::Demo { params, .. } => {
            report.input = format!(
                "generated: {} cells x {} genes, seed {}",
                params.n_cells, params.n_genes, params.seed
            );
            observer.started("generate demo data");
            let timer = StepTimer::start("generate demo data");
            let adata = crate::synthetic::generate(params);
            observer.stopped();
            let adata = adata?;
            let rec = timer.finish(
                adata.n_obs(),
                adata.n_vars(),
                format!("{} stored counts", adata.x.stored_values()),
            );
            Ok((adata, rec))
        }
        Input::File { path, genome } => {
            report.input = path.display().to_string();
            observer.started("read input");
            let timer = StepTimer::start("read input");
            let adata = read_input(path, genome.as_deref());
            observer.stopped();
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

/// The GPUs this process runs on (a launched rank: its local rank's; else `--gpus` or every
/// visible GPU), with the notice that says so.
fn gpus_of_this_process(plan: &RunPlan, launch: Option<Launch>) -> Result<std::ops::Range<usize>> {
    let ordinals = match launch {
        Some(l) => {
            let g = launched_gpu(plan, l)?;
            g..g + 1
        }
        None => {
            let visible = match plan.target {
                Target::Gpu => rmm_cuda::device_count().unwrap_or(1),
                Target::Cpu => 1,
            };
            0..plan.gpu_count(visible)?
        }
    };
    match (&plan.target_notice, launch) {
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
    Ok(ordinals)
}

/// A run whose X is never held (`note` says why): the demo generated on the GPU, or the input
/// read from its file, for every pass, on the GPU of `setup`.
fn run_without_x(
    plan: &RunPlan,
    setup: GpuSetup,
    note: &str,
    observer: &mut dyn StepObserver,
    mut report: RunReport,
    start: std::time::Instant,
) -> Result<Outcome> {
    eprintln!("{note}");
    let (g, recorders) = setup.adopt(plan, &mut report);
    let g = g
        .first()
        .expect("one GPU (generated_on_gpu and read_from_disk checked)");
    // Created first: the cell names go into it while the cell-graph steps run.
    let output = (plan.outputs.h5ad.as_path(), plan.outputs.format);
    let file = OutputWrite::create(output.0, output.1)?;
    let early = Some(&file);
    let (adata, records) = match &plan.input {
        Input::Demo { params: demo, .. } => {
            report.input = format!(
                "generated on the GPU for every pass: {} cells x {} genes, seed {}",
                demo.n_cells, demo.n_genes, demo.seed
            );
            report.x_placement = Some(XPlacement::new(
                "nowhere: generated on the GPU block by block for every pass",
                note,
            ));
            super::generated::run_generated(demo, &plan.config, g, early, observer)?
        }
        Input::File { path, .. } => {
            report.input = format!("{}, read for every pass", path.display());
            report.x_placement = Some(XPlacement::new(
                "on the disk: read from the file block by block for every pass",
                note,
            ));
            super::generated::run_from_file(path, &plan.config, g, early, observer)?
        }
    };
    report.steps.extend(records);
    report.gpu = Some(g.totals());
    let written = output::write_rest_step(file, &adata, output, observer, &mut report)?;
    output::finish(plan, &adata, report, start, written, &recorders)
        .map(|f| Outcome::Written(Box::new(f)))
}

/// Where a run that reads its input holds X for the per-cell steps, and why: a launched rank's
/// GPU, the cells split across `n_gpus`, one GPU in memory or streamed from host memory (as
/// [`GpuRun::plan`] decides for `per_cell`), or the host of a CPU run.
fn placement_of_x(
    plan: &RunPlan,
    adata: &AnnData,
    per_cell: &super::PipelineConfig,
    gpu: Option<&GpuRun>,
    launch: Option<Launch>,
    n_gpus: usize,
) -> XPlacement {
    match (launch, gpu) {
        (Some(l), _) => XPlacement::new(
            "on the GPU: this rank's share of the cells",
            format!("rank {} of {}, started by a launcher", l.rank, l.world),
        ),
        (None, Some(_)) if n_gpus > 1 => XPlacement::new(
            format!("on {n_gpus} GPUs: each GPU's share of the cells"),
            match plan.gpus {
                Some(n) => format!("--gpus {n}"),
                None => format!("every visible GPU ({n_gpus}; --gpus 1 for one)"),
            },
        ),
        (None, Some(g)) => {
            let m = g.plan(adata, per_cell);
            let place = match m.placement {
                Placement::InMemory => "on the GPU",
                Placement::Streamed { .. } => {
                    "in host memory, streamed through the GPU in row blocks"
                }
            };
            XPlacement::new(place, m.describe())
        }
        (None, None) => XPlacement::new(
            "in host memory (a CPU run)",
            plan.target_notice.as_deref().unwrap_or("--device cpu"),
        ),
    }
}

/// Carries out `plan` (checked first): see the module documentation. Progress goes to
/// `observer`, notices to stderr.
pub fn execute(plan: &RunPlan, observer: &mut dyn StepObserver) -> Result<Outcome> {
    plan.check()?;
    let config = &plan.config;
    let output = &plan.outputs.h5ad;
    let start = crate::report::run_clock();
    let mut report = RunReport {
        device: plan.target.name().to_string(),
        threads: rayon::current_num_threads(),
        output: Some(output.display().to_string()),
        ..Default::default()
    };
    let on_gpu = plan.target == Target::Gpu;
    let launch = Launch::from_vars(|k| std::env::var(k).ok())?;
    let ordinals = gpus_of_this_process(plan, launch)?;
    let available = super::generated::host_available_bytes();
    let generated = match &plan.input {
        Input::Demo { .. } => plan.generated_on_gpu(available, ordinals.len())?,
        // An h5ad or zarr X too large for the host memory the run may use is read for every
        // pass.
        Input::File { path, .. } if launch.is_none() => {
            let x = crate::io::row_chunks_extent(path)?;
            plan.read_from_disk(x, available, ordinals.len())?
        }
        Input::File { .. } => None,
    };
    // The GPUs' contexts and pools are made while the input is read, and NCCL joins several
    // GPUs meanwhile (about a second on 2 H100s). A rank started by a launcher and a demo
    // generated on the GPU need their GPU before anything else.
    let set_up_first = on_gpu && (launch.is_some() || generated.is_some());
    let mut setup = None;
    if set_up_first {
        setup = Some(set_up_gpus(
            plan,
            ordinals.clone(),
            generated.is_some(),
            "",
        )?);
    }
    let mut join_record = None;
    let launched_rank = match (launch, &setup) {
        (Some(l), Some(set)) => {
            let timer = StepTimer::start("join the ranks (NCCL)");
            let rank = launched::join(l, set.gpus[0].clone())?;
            join_record = Some(timer.finish(0, 0, format!("rank {} of {}", l.rank, l.world)));
            Some((l, rank))
        }
        _ => None,
    };
    if let Some(note) = generated {
        let set = setup.expect("generated_on_gpu and read_from_disk checked the GPU");
        return run_without_x(plan, set, &note, observer, report, start);
    }
    // Where the cells are split across GPUs, neighbors is short and the output's write is on
    // the critical path: its pages are reserved while the input is read. On one GPU the write
    // hides behind neighbors: they are reserved after the read, so that the read has the
    // host's memory to itself.
    let eligible = on_gpu && launch.is_none();
    let mut early = None;
    if eligible && ordinals.len() > 1 {
        if let Some(size) = output::input_size(plan) {
            early = output::started_early(config, size, (output, plan.outputs.format))?;
        }
    }
    let (background, loaded) = std::thread::scope(|s| {
        let setting_up = (on_gpu && !set_up_first).then(|| {
            s.spawn(|| {
                let set = set_up_gpus(plan, ordinals.clone(), false, WHILE_READ)?;
                if writes_zarr_from_gpu(plan) {
                    crate::io::prepare_zarr_buffers(&set.gpus[0].ctx)?;
                }
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
        let loaded = load_input(plan, observer, &mut report);
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
    let (gpus, recorders) = match setup {
        Some(set) => set.adopt(plan, &mut report),
        None => (Vec::new(), MemoryRecorders::default()),
    };
    let gpu = gpus.first().cloned();
    // A split run's last GPU takes the step that runs beside the others (UMAP beside Leiden).
    let beside_run = gpus.get(1..).and_then(|g| g.last()).cloned();
    let (mut adata, load_record) = loaded?;
    // Options that name input data (--batch-key, --harmony) are checked before any step runs
    // or X moves to a GPU, once for every mode below.
    super::table::check_input(config, &adata)?;
    if let Some(g) = &gpu {
        super::table::check_budget(config, &adata, g.memory_budget)?;
    }
    report.steps.extend(join_record);
    report.steps.push(load_record);
    if eligible && early.is_none() {
        let (n_obs, n_vars) = adata.x.shape();
        let size = (n_obs, n_vars, adata.x.stored_values() as u64);
        early = output::started_early(config, size, (output, plan.outputs.format))?;
    }

    let per_cell = config.per_cell_steps();
    report.x_placement = Some(placement_of_x(
        plan,
        &adata,
        &per_cell,
        gpu.as_ref(),
        launch,
        gpus.len(),
    ));
    let cell_graph = match (launched_rank, ranks) {
        (Some((l, rank)), _) => {
            let n = adata.n_obs();
            match launched::run_launched(adata, config, l, rank, output, observer)? {
                Some((stacked, records)) => {
                    adata = stacked;
                    report.steps.extend(records);
                    None
                }
                None => {
                    let cells = sc_kernels::comm::rank_rows(n, l.world, l.rank);
                    return Ok(Outcome::HandedOver {
                        rank: l.rank,
                        world: l.world,
                        cells,
                    });
                }
            }
        }
        // Harmony and neighbors run after the rest, while X and .raw are written.
        (None, Some(ranks)) => {
            let graph = graph_group(&ranks);
            let (stacked, records) = run_split_checked(adata, &per_cell, ranks, observer)?;
            adata = stacked;
            report.steps.extend(records);
            Some(graph)
        }
        (None, None) => {
            // X and .raw stay on the GPU for now (see SCPIPE_WRITE_FROM_GPU below).
            let records = run_steps(&mut adata, &per_cell, gpu.as_ref(), observer, false)?;
            report.steps.extend(records);
            Some((gpu.iter().map(|g| g.ctx.clone()).collect(), Vec::new()))
        }
    };
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
                config,
                gpu: gpu.as_ref(),
                beside: beside_run.as_ref(),
                gpus: &gpus,
                group,
            };
            graph.run_while_writing(
                &mut adata,
                (output, plan.outputs.format),
                early,
                observer,
                &mut report,
            )?
        }
        None => {
            // The file created ahead has the name write_step writes to: it goes first.
            drop(early);
            output::write_step(
                &adata,
                (output, plan.outputs.format),
                true,
                observer,
                &mut report,
            )?
        }
    };
    if let Some(g) = &gpu {
        report.gpu = Some(g.totals());
    }
    output::finish(plan, &adata, report, start, written, &recorders)
        .map(|f| Outcome::Written(Box::new(f)))
}
