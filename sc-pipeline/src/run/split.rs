//! The pipeline over cells split across ranks (one per GPU, or threads in tests): each rank
//! runs the per-cell steps (QC to PCA) on its own contiguous block of cells, on its own GPU and
//! stream, and the per-gene statistics (QC and filter sums, the median total, HVG moments, the
//! scale statistics, the PCA Gram matrix) are combined through the ranks' communicator, so
//! every rank selects the same genes and projects on the same components. The blocks are then
//! stacked in order and the steps over the cell x cell structure run over all cells: harmony
//! with each GPU correcting a block of the cells (its cluster statistics summed through the
//! communicators), neighbors with each GPU searching the neighbours of a range of the cells.

use super::gpu::GpuRun;
use super::in_memory::{cell_graph_steps_on, check_counts, run_steps, GraphRuns};
use super::observer::{Silent, StepObserver};
use super::PipelineConfig;
use crate::anndata::{DeviceMatrix, Matrix, Ranks};
use crate::report::{StepRecord, StepTimer};
use crate::{AnnData, Error, Result};
use sc_kernels::comm::{all_ranks_ok, rank_rows};
use sc_kernels::gpu::DeviceCsr;
use sc_kernels::gpu::GpuContext;
use sc_kernels::{Communicator, CsrMatrix};
use std::ops::Range;
use std::sync::Arc;

/// One rank of a split run: its place in the group and, for a GPU run, its GPU.
pub struct Rank {
    pub comm: Arc<dyn Communicator>,
    pub gpu: Option<GpuRun>,
}

/// Runs `config` on `adata` (raw counts) split into one block of cells per rank; rank 0 runs on
/// the calling thread and reports to `observer`, the others on threads of their own. Returns
/// the stacked result (on the host) and rank 0's step records, then the cell-graph steps'.
///
/// The result equals a one-rank run's up to the order of floating-point sums (the per-gene
/// statistics are sums over blocks instead of over all cells at once).
pub fn run_pipeline_split(
    adata: AnnData,
    config: &PipelineConfig,
    ranks: Vec<Rank>,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    super::table::check_input(config, &adata)?;
    run_split_checked(adata, config, ranks, observer)
}

/// [`run_pipeline_split`] on input whose options the caller checked (`table::check_input`).
pub(crate) fn run_split_checked(
    mut adata: AnnData,
    config: &PipelineConfig,
    ranks: Vec<Rank>,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    for (i, r) in ranks.iter().enumerate() {
        if r.comm.rank() != i || r.comm.size() != ranks.len() {
            return Err(Error::invalid(
                "ranks",
                format!(
                    "entry {i} is rank {} of {}, expected rank {i} of {}",
                    r.comm.rank(),
                    r.comm.size(),
                    ranks.len()
                ),
            ));
        }
    }
    check_counts(&adata, config)?;
    let timer = StepTimer::start("split cells across ranks");
    let n = adata.n_obs();
    let size = ranks.len();
    let rows: Vec<Range<usize>> = (0..size).map(|r| rank_rows(n, size, r)).collect();
    // On GPUs, each rank uploads its rows straight from the one host X: only the small
    // per-cell tables are cut into blocks.
    let on_gpus = ranks.iter().all(|r| r.gpu.is_some());
    let host_matrix = on_gpus.then(|| {
        let g = adata.n_vars();
        std::mem::replace(&mut adata.x, Matrix::Sparse(CsrMatrix::zeros(n, g)))
    });
    let blocks = adata.split_obs(size)?;
    drop(adata);
    let host_x = host_matrix.as_ref().map(|x| x.to_csr()).transpose()?;
    let split_record = timer.finish(n, blocks[0].n_vars(), format!("{size} ranks"));
    observer.finished(&split_record);
    let per_rank = config.per_cell_steps();
    let run_rank = |mut block: AnnData, r: usize, observer: &mut dyn StepObserver| {
        let rank = &ranks[r];
        let mut upload = None;
        if let (Some(x), Some(g)) = (&host_x, &rank.gpu) {
            let timer = StepTimer::start("move X to the GPUs");
            let dev = DeviceCsr::upload_rows(&g.ctx, x, rows[r].clone())
                .and_then(|d| g.ctx.synchronize().map(|()| d));
            match dev {
                Ok(d) => {
                    let gib = d.bytes() as f64 / (1u64 << 30) as f64;
                    block.x = Matrix::Device(DeviceMatrix::csr(&g.ctx, d));
                    let rec = timer.finish(block.n_obs(), block.n_vars(), format!("{gib:.2} GiB"));
                    observer.finished(&rec);
                    upload = Some(rec);
                }
                Err(e) => {
                    rank.comm
                        .abort(&format!("rank {r}: moving X to the GPU: {e}"));
                    return Err(Error::Device(format!("rank {r}: moving X to the GPU: {e}")));
                }
            }
        }
        let records = run_rank_steps(&mut block, &per_rank, rank, !on_gpus, observer);
        records.map(|rec| (block, upload.into_iter().chain(rec).collect::<Vec<_>>()))
    };
    let mut blocks = blocks.into_iter();
    let first = blocks.next().expect("at least one rank");
    let results: Vec<Result<(AnnData, Vec<StepRecord>)>> = std::thread::scope(|s| {
        let others: Vec<_> = blocks
            .enumerate()
            .map(|(i, b)| {
                let run_rank = &run_rank;
                s.spawn(move || run_rank(b, i + 1, &mut Silent))
            })
            .collect();
        let mut all = vec![run_rank(first, 0, observer)];
        for h in others {
            all.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    // Every rank has its rows on its GPU (or failed): the host X goes, on a thread of its own
    // (unmapping 16 GB takes about a second, which the stacking would wait for).
    drop(host_x);
    crate::release::drop_in_background(host_matrix);
    let (parts, per_rank): (Vec<_>, Vec<_>) = all_ranks_ok(results)?.into_iter().unzip();
    let mut records = with_slowest_rank(per_rank);
    records.insert(0, split_record);
    let (graph_gpus, group) = graph_group(&ranks);
    let gpus = GraphRuns {
        first: ranks[0].gpu.as_ref(),
        beside: ranks.get(1..).and_then(|r| r.last()?.gpu.as_ref()),
    };
    stack_and_finish(parts, config, records, gpus, &graph_gpus, &group, observer)
}

/// The GPUs of `ranks` for the steps over the cell x cell structure, and their communicators
/// when every rank has a GPU (harmony then splits its cells across them; else none).
pub fn graph_group(ranks: &[Rank]) -> (Vec<Arc<GpuContext>>, Vec<Arc<dyn Communicator>>) {
    let gpus: Vec<_> = ranks
        .iter()
        .filter_map(|r| r.gpu.as_ref().map(|g| g.ctx.clone()))
        .collect();
    let group = if gpus.len() == ranks.len() {
        ranks.iter().map(|r| r.comm.clone()).collect()
    } else {
        Vec::new()
    };
    (gpus, group)
}

/// One rank's steps on its block of cells; a failure aborts the group, so the other ranks'
/// collectives fail instead of waiting for this rank forever.
pub(crate) fn run_rank_steps(
    block: &mut AnnData,
    per_rank: &PipelineConfig,
    rank: &Rank,
    to_host: bool,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    block.ranks = Some(Ranks(rank.comm.clone()));
    let records = run_steps(block, per_rank, rank.gpu.as_ref(), observer, to_host);
    if let Err(e) = &records {
        rank.comm.abort(&format!("rank {}: {e}", rank.comm.rank()));
    }
    block.ranks = None;
    records
}

/// The ranks' blocks stacked in rank order, then the cell-graph steps over all cells: harmony
/// with its cells split across `graph_gpus` when `group` holds their communicators (else on
/// `gpus.first`), neighbors split across `graph_gpus`, a step whose row allows it beside the
/// others on `gpus.beside`; `records` are the ranks' steps so far.
pub(crate) fn stack_and_finish(
    parts: Vec<AnnData>,
    config: &PipelineConfig,
    mut records: Vec<StepRecord>,
    gpus: GraphRuns<'_>,
    graph_gpus: &[Arc<GpuContext>],
    group: &[Arc<dyn Communicator>],
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    let timer = StepTimer::start("stack the ranks' cells");
    let mut stacked = AnnData::stack_obs(parts)?;
    let stack_record = timer.finish(stacked.n_obs(), stacked.n_vars(), String::new());
    observer.finished(&stack_record);
    records.push(stack_record);
    let graph = cell_graph_steps_on(
        &mut stacked,
        config,
        gpus,
        graph_gpus,
        group,
        None,
        observer,
    )?;
    records.extend(graph);
    Ok((stacked, records))
}

/// Rank 0's records, each step's note naming the slowest rank when another rank took longer
/// (a step's time on rank 0 includes waiting for the others only at its collectives).
fn with_slowest_rank(mut per_rank: Vec<Vec<StepRecord>>) -> Vec<StepRecord> {
    let mut records = per_rank.remove(0);
    for (i, rec) in records.iter_mut().enumerate() {
        let slowest = per_rank
            .iter()
            .enumerate()
            .filter_map(|(r, recs)| recs.get(i).map(|x| (r + 1, x.seconds)))
            .fold((0, rec.seconds), |a, b| if b.1 > a.1 { b } else { a });
        if slowest.0 != 0 {
            let sep = if rec.note.is_empty() { "" } else { "; " };
            rec.note = format!(
                "{}{sep}slowest rank {}: {:.3} s",
                rec.note, slowest.0, slowest.1
            );
        }
    }
    records
}
