//! Ranks started by a standard launcher, one process per GPU, on one host or several:
//! `torchrun` (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open MPI's `mpirun`
//! (`OMPI_COMM_WORLD_RANK`, `..._SIZE`, `..._LOCAL_RANK`) or Slurm's `srun` (`SLURM_PROCID`,
//! `SLURM_NTASKS`, `SLURM_LOCALID`). NCCL's own bootstrap connects them: every process makes the
//! group's id from `NCCL_COMM_ID=host:port` (set from `MASTER_ADDR` and `MASTER_PORT` when not
//! given), where rank 0 listens.
//!
//! Each process reads the input, keeps its block of cells and runs the per-cell steps on its
//! GPU, the per-gene statistics combined through NCCL. The blocks then reach rank 0 as h5ad
//! files next to the output (`OUT.rank-R-of-W.partial`, so the output's directory must be
//! shared by the hosts): rank 0 stacks them, runs the cell-graph steps, writes the output, and
//! the partial files are removed.

use super::gpu::GpuRun;
use super::in_memory::GraphRuns;
use super::observer::StepObserver;
use super::split::{run_rank_steps, stack_and_finish, Rank};
use super::PipelineConfig;
use crate::report::StepRecord;
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::NcclCommunicator;
use sc_kernels::Communicator;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// This process's place in a group started by a launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world: usize,
    /// The rank among the processes of this host (picks the GPU).
    pub local_rank: usize,
}

/// The launchers' variables: (rank, world size, local rank).
const LAUNCHERS: [(&str, &str, &str); 3] = [
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
];

impl Launch {
    /// The group this process belongs to, read through `var` (the environment); `None` when no
    /// launcher started it, or started it alone (a world of one).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
        for (rank, world, local) in LAUNCHERS {
            let (Some(r), Some(w)) = (var(rank), var(world)) else {
                continue;
            };
            let number = |name: &str, v: &str| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| Error::param("launcher", format!("{name}={v:?} is not a number")))
            };
            let (r, w) = (number(rank, &r)?, number(world, &w)?);
            if w <= 1 {
                return Ok(None);
            }
            if r >= w {
                return Err(Error::param(
                    "launcher",
                    format!("{rank}={r} is not below {world}={w}"),
                ));
            }
            let local_rank = match var(local) {
                Some(l) => number(local, &l)?,
                None => r,
            };
            return Ok(Some(Launch {
                rank: r,
                world: w,
                local_rank,
            }));
        }
        Ok(None)
    }

    /// NCCL's bootstrap address: `NCCL_COMM_ID`, else `MASTER_ADDR:MASTER_PORT` (torchrun's;
    /// port 29500 when only the address is given).
    pub fn bootstrap(var: impl Fn(&str) -> Option<String>) -> Result<String> {
        if let Some(id) = var("NCCL_COMM_ID") {
            return Ok(id);
        }
        match var("MASTER_ADDR") {
            Some(a) => Ok(format!(
                "{a}:{}",
                var("MASTER_PORT").unwrap_or_else(|| "29500".into())
            )),
            None => Err(Error::param(
                "launcher",
                "the ranks need rank 0's address: set MASTER_ADDR (and MASTER_PORT) or \
                 NCCL_COMM_ID=host:port for every process",
            )),
        }
    }

    /// Where rank `rank` hands its block to rank 0.
    pub fn partial_path(output: &Path, rank: usize, world: usize) -> PathBuf {
        let mut name = output
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        name.push(format!(".rank-{rank}-of-{world}.partial"));
        output.with_file_name(name)
    }
}

/// This process's rank: its GPU (`local_rank` of the host's GPUs) joined to the group.
pub fn join(launch: Launch, gpu: GpuRun) -> Result<Rank> {
    let address = Launch::bootstrap(|k| std::env::var(k).ok())?;
    // Every process derives the same id from the address (NCCL reads NCCL_COMM_ID).
    std::env::set_var("NCCL_COMM_ID", &address);
    let device = gpu.ctx.device().clone();
    let err = |e: String| Error::Device(format!("rank {} joining {address}: {e}", launch.rank));
    let id = rmm_cuda::NcclId::new().map_err(|e| err(e.to_string()))?;
    let comm = rmm_cuda::NcclComm::join(&device, id, launch.rank, launch.world)
        .map_err(|e| err(e.to_string()))?;
    let comm = NcclCommunicator::new(comm, gpu.ctx.clone()).map_err(|e| err(e.to_string()))?;
    Ok(Rank {
        comm: Arc::new(comm),
        gpu: Some(gpu),
    })
}

/// Every rank's agreement that its part succeeded (a collective: every rank calls it).
fn all_succeeded(comm: &dyn Communicator, ok: bool) -> Result<bool> {
    let mut v = [ok as u8 as f64];
    comm.all_reduce_sum(&mut v)
        .map_err(|e| Error::Device(format!("rank {}: {e}", comm.rank())))?;
    Ok(v[0] as usize == comm.size())
}

/// Runs this process's rank of `config` on its block of `adata`; rank 0 returns the stacked
/// result and its records, the other ranks `None` once rank 0 holds their blocks.
pub fn run_launched(
    adata: AnnData,
    config: &PipelineConfig,
    launch: Launch,
    rank: Rank,
    output: &Path,
    observer: &mut dyn StepObserver,
) -> Result<Option<(AnnData, Vec<StepRecord>)>> {
    let comm = rank.comm.clone();
    let mut block = adata.obs_block(launch.rank, launch.world)?;
    drop(adata);
    let steps = run_rank_steps(&mut block, &config.per_cell_steps(), &rank, true, observer);
    if launch.rank != 0 {
        // Removed once rank 0 has read it, on an error, and on an interruption.
        let partial =
            crate::io::PartialFile::new(Launch::partial_path(output, launch.rank, launch.world));
        let written = steps.and_then(|_| crate::io::write_h5ad(&block, partial.path()));
        let ok = all_succeeded(comm.as_ref(), written.is_ok())?;
        written?;
        if !ok {
            return Err(Error::Device(
                "another rank failed (see its messages)".into(),
            ));
        }
        // Rank 0 has read the partial file when it joins this second agreement.
        all_succeeded(comm.as_ref(), true)?;
        return Ok(None);
    }
    let ok = all_succeeded(comm.as_ref(), steps.is_ok())?;
    let records = steps?;
    if !ok {
        return Err(Error::Device(
            "another rank failed (see its messages)".into(),
        ));
    }
    let mut parts = vec![block];
    let read: Result<()> = (1..launch.world).try_for_each(|r| {
        parts.push(crate::io::read_h5ad(Launch::partial_path(
            output,
            r,
            launch.world,
        ))?);
        Ok(())
    });
    all_succeeded(comm.as_ref(), read.is_ok())?;
    read?;
    let gpus: Vec<_> = rank.gpu.iter().map(|g| g.ctx.clone()).collect();
    let runs = GraphRuns {
        first: rank.gpu.as_ref(),
        beside: None,
    };
    stack_and_finish(parts, config, records, runs, &gpus, &[], observer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_is_recognised() {
        let torchrun = vars(&[("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "1")]);
        assert_eq!(
            Launch::from_vars(torchrun).unwrap(),
            Some(Launch {
                rank: 3,
                world: 4,
                local_rank: 1
            })
        );
        let mpi = vars(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(
            Launch::from_vars(mpi).unwrap(),
            Some(Launch {
                rank: 1,
                world: 2,
                local_rank: 1
            })
        );
        let slurm_alone = vars(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]);
        assert_eq!(Launch::from_vars(slurm_alone).unwrap(), None);
        assert_eq!(Launch::from_vars(vars(&[])).unwrap(), None);
    }

    #[test]
    fn bad_values_are_named() {
        let e = Launch::from_vars(vars(&[("RANK", "2"), ("WORLD_SIZE", "2")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("RANK=2 is not below WORLD_SIZE=2"), "{e}");
        let e = Launch::from_vars(vars(&[("RANK", "x"), ("WORLD_SIZE", "2")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("RANK=\"x\" is not a number"), "{e}");
    }

    #[test]
    fn the_bootstrap_address_and_the_partial_files() {
        assert_eq!(
            Launch::bootstrap(vars(&[("MASTER_ADDR", "node1")])).unwrap(),
            "node1:29500"
        );
        assert_eq!(
            Launch::bootstrap(vars(&[
                ("MASTER_ADDR", "node1"),
                ("NCCL_COMM_ID", "10.0.0.1:4000")
            ]))
            .unwrap(),
            "10.0.0.1:4000"
        );
        let e = Launch::bootstrap(vars(&[])).unwrap_err().to_string();
        assert!(e.contains("MASTER_ADDR"), "{e}");
        assert_eq!(
            Launch::partial_path(Path::new("/data/out.h5ad"), 1, 2),
            PathBuf::from("/data/out.h5ad.rank-1-of-2.partial")
        );
    }
}
