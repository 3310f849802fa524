//! The pipeline over cells split across ranks (one per GPU, or threads in tests): each rank
//! runs the per-cell steps (QC to PCA) on its own contiguous block of cells, on its own GPU and
//! stream, and the per-gene statistics (QC and filter sums, the median total, HVG moments, the
//! scale statistics, the PCA Gram matrix) are combined through the ranks' communicator, so
//! every rank selects the same genes and projects on the same components. The blocks are then
//! stacked in order and the steps over the cell x cell structure (harmony, neighbors) run on
//! rank 0's GPU over all cells.

use crate::anndata::Ranks;
use crate::pipeline::{
    cell_graph_steps, check_counts, run_pipeline_on, GpuRun, PipelineConfig, Runner, Silent,
    StepObserver,
};
use crate::report::StepRecord;
use crate::{AnnData, Error, Result};
use sc_kernels::Communicator;
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
    check_counts(&adata)?;
    let blocks = adata.split_obs(ranks.len())?;
    drop(adata);
    let per_rank = PipelineConfig {
        harmony: None,
        n_neighbors: None,
        ..config.clone()
    };
    let run_rank = |mut block: AnnData, rank: &Rank, observer: &mut dyn StepObserver| {
        block.ranks = Some(Ranks(rank.comm.clone()));
        let records = run_pipeline_on(&mut block, &per_rank, rank.gpu.as_ref(), observer);
        if let Err(e) = &records {
            rank.comm.abort(&format!("rank {}: {e}", rank.comm.rank()));
        }
        block.ranks = None;
        records.map(|r| (block, r))
    };
    let mut blocks = blocks.into_iter();
    let first = blocks.next().expect("at least one rank");
    let results: Vec<Result<(AnnData, Vec<StepRecord>)>> = std::thread::scope(|s| {
        let others: Vec<_> = blocks
            .zip(&ranks[1..])
            .map(|(b, rank)| s.spawn(|| run_rank(b, rank, &mut Silent)))
            .collect();
        let mut all = vec![run_rank(first, &ranks[0], observer)];
        for h in others {
            all.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    let mut parts = Vec::with_capacity(results.len());
    let mut records = Vec::new();
    let mut errors = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok((block, rec)) => {
                if i == 0 {
                    records = rec;
                }
                parts.push(block);
            }
            Err(e) => errors.push(e),
        }
    }
    // The rank that failed first, not the ranks its abort released.
    if let Some(e) = errors
        .iter()
        .position(|e| !e.to_string().contains("was aborted"))
        .map(|i| errors.swap_remove(i))
        .or_else(|| errors.into_iter().next())
    {
        return Err(e);
    }
    let mut stacked = AnnData::stack_obs(parts)?;
    let gpu = ranks[0].gpu.clone();
    let graph_gpu = gpu.as_ref().map(|g| g.ctx.clone());
    let mut r = Runner {
        records,
        observer,
        gpu,
    };
    cell_graph_steps(&mut r, &mut stacked, config, graph_gpu.as_ref())?;
    Ok((stacked, r.records))
}
