//! A cell-graph step run beside the steps after it (a row's [`Step::beside`]: UMAP beside Leiden
//! and the marker genes). Leiden finishes each of its iterations on one host thread, which leaves
//! the GPU idle for seconds at a million cells; UMAP's epochs fill that time. The step runs on a
//! thread of its own, on its GPU's step lane (a stream of its own, same memory resource), on a
//! copy of the graph; what it writes (obsm and uns keys) joins the data when the steps after it
//! are done. The results are the same bit for bit as in the table's order: each step's numbers
//! depend on its inputs alone.
//!
//! On a GPU it runs beside only when the run's device memory budget holds it and the largest of
//! the steps after it at once (their rows' estimates); otherwise in order, and its note says why.
//! In a split run it goes to another of the run's GPUs (the last), which the steps after it,
//! all on the first, leave idle: there its budget need hold only the step itself.
//! `SCPIPE_BESIDE=0` keeps every step in order.

use super::gpu::GpuRun;
use super::observer::StepObserver;
use crate::anndata::{AnnData, Matrix};
use crate::report::{StepRecord, StepTimer};
use crate::steps::step::{Sizes, Step, StepEnv};
use crate::{Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::DenseMatrix;
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

/// Where a step whose row allows it runs.
pub(crate) enum Decision {
    /// On a thread of its own, on this GPU lane (none: the CPU).
    Beside(Option<Arc<GpuContext>>),
    /// In the table's order; with a reason for the step's note when one is worth giving.
    InOrder(Option<String>),
}

/// Where `step` runs, given `later`, the enabled steps after it, `gpu`, the run whose
/// statistics and budget cover `env`'s first GPU, and `other`, in a split run the run of
/// another of `env`'s GPUs (tried first).
pub(crate) fn decide(
    step: &Step,
    later: &[&Step],
    adata: &AnnData,
    env: &StepEnv<'_>,
    gpu: Option<&GpuRun>,
    other: Option<&GpuRun>,
) -> Decision {
    if !step.beside || later.is_empty() || !crate::io::switched_on("SCPIPE_BESIDE") {
        return Decision::InOrder(None);
    }
    let Some(first) = env.gpus.first() else {
        return Decision::Beside(None);
    };
    // The budget check needs the statistics of the GPU the steps run on.
    let Some(run) = gpu.filter(|g| Arc::ptr_eq(&g.ctx, first)) else {
        return Decision::InOrder(None);
    };
    let other = other
        .filter(|o| !Arc::ptr_eq(&o.ctx, first) && env.gpus.iter().any(|g| Arc::ptr_eq(g, &o.ctx)));
    let sizes = sizes(adata, env);
    let own = (step.device_bytes)(&sizes, env.config);
    let own = own.kept + own.transient;
    let others = later
        .iter()
        .map(|s| (s.device_bytes)(&sizes, env.config).transient)
        .max()
        .unwrap_or(0);
    let room = |r: &GpuRun| Room {
        in_use: r.stats.statistics().bytes.value.max(0) as u64,
        budget: r.memory_budget,
    };
    let host = match choose(other.map(room), room(run), own, others) {
        Ok(Gpu::Other) => other.unwrap_or(run),
        Ok(Gpu::First) => run,
        Err(why) => return Decision::InOrder(Some(why)),
    };
    match host.ctx.step_lane() {
        Ok(lane) => Decision::Beside(Some(lane)),
        Err(e) => Decision::InOrder(Some(format!("in order: no stream of its own ({e})"))),
    }
}

/// A GPU's device memory: what is in use, and the run's budget.
#[derive(Clone, Copy)]
struct Room {
    in_use: u64,
    budget: u64,
}

/// Which GPU a step runs beside the others on.
#[derive(Debug, PartialEq)]
enum Gpu {
    /// Another GPU of a split run, which the steps after it leave idle.
    Other,
    /// The GPU the steps after it run on.
    First,
}

/// Where a step of `own` bytes runs beside steps of at most `others` bytes: on `other` (a split
/// run's idle GPU) when its budget holds the step alone, else on `first` when its budget holds
/// both at once; else the reason it runs in order.
fn choose(
    other: Option<Room>,
    first: Room,
    own: u64,
    others: u64,
) -> std::result::Result<Gpu, String> {
    if other.is_some_and(|o| fits(o.in_use, own, o.budget).is_ok()) {
        return Ok(Gpu::Other);
    }
    fits(first.in_use, own.saturating_add(others), first.budget).map(|()| Gpu::First)
}

/// Whether `both` bytes (the step beside the largest of the steps after it) fit `budget` with
/// `in_use` held; if not, the note's reason.
fn fits(in_use: u64, both: u64, budget: u64) -> std::result::Result<(), String> {
    if in_use.checked_add(both).is_some_and(|need| need <= budget) {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    Err(format!(
        "in order, not beside the steps after it: {:.2} GiB in use and {:.2} GiB for both at \
         once exceed the device budget of {:.2} GiB",
        gib(in_use),
        gib(both),
        gib(budget)
    ))
}

/// The sizes the rows' estimates are made from: the cells, and the matrix the marker genes read
/// (`.raw` when there is one, else X).
fn sizes(adata: &AnnData, env: &StepEnv<'_>) -> Sizes {
    let matrix = env.raw.or(adata.raw.as_ref()).map_or(&adata.x, |r| &r.x);
    Sizes {
        n_obs: adata.n_obs(),
        n_vars: matrix.shape().1,
        nnz: matrix.stored_values(),
    }
}

/// A step started by [`start`].
pub(crate) struct Running<'scope> {
    step: &'static Step,
    /// Where its record goes among the records (the table's order).
    index: usize,
    /// The GPU it runs on (none: the CPU).
    device: Option<rmm_cuda::DeviceId>,
    handle: ScopedJoinHandle<'scope, Result<(AnnData, StepRecord)>>,
}

/// Starts `step` on a thread of `scope`, on `lane` (none: the CPU), with a copy of `adata`'s
/// graph; its record will go at `index`.
pub(crate) fn start<'scope>(
    scope: &'scope Scope<'scope, '_>,
    step: &'static Step,
    adata: &AnnData,
    config: &'scope super::PipelineConfig,
    lane: Option<Arc<GpuContext>>,
    index: usize,
) -> Running<'scope> {
    let mut view = AnnData::new(Matrix::Dense(DenseMatrix::zeros(adata.n_obs(), 0)));
    if let Some(graph) = adata.obsp.get("connectivities") {
        view.obsp.insert("connectivities".into(), graph.par_clone());
    }
    let n_vars = adata.n_vars();
    let device = lane.as_ref().map(|l| l.device().id());
    let handle = scope.spawn(move || {
        let gpus: Vec<_> = lane.into_iter().collect();
        if let Some(l) = gpus.first() {
            l.bind_to_thread().map_err(|e| gpu_error(step, e))?;
        }
        let env = StepEnv {
            config,
            gpus: &gpus,
            group: &[],
            raw: None,
        };
        let timer = StepTimer::start(step.name);
        let note = (step.run)(&mut view, &env).map_err(|e| e.in_step(step.name))?;
        if let Some(l) = gpus.first() {
            l.synchronize().map_err(|e| gpu_error(step, e))?;
        }
        let record = timer.finish(view.n_obs(), n_vars, note);
        Ok((view, record))
    });
    Running {
        step,
        index,
        device,
        handle,
    }
}

fn gpu_error(step: &Step, e: sc_kernels::KernelError) -> Error {
    Error::Gpu {
        step: "pipeline",
        problem: format!("{}: {e}", step.name),
    }
}

/// Waits for `running` (the observer shows it while the run waits), adds what it wrote to
/// `adata` and its record to `records`; `later` names the steps it ran beside, `first` the
/// GPU they ran on.
pub(crate) fn finish(
    running: Running<'_>,
    first: Option<&Arc<GpuContext>>,
    adata: &mut AnnData,
    later: &[&Step],
    observer: &mut dyn StepObserver,
    records: &mut Vec<StepRecord>,
) -> Result<()> {
    let Running {
        step,
        index,
        device,
        handle,
    } = running;
    observer.started(step.name);
    let joined = handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let (view, mut record) = match joined {
        Ok(done) => done,
        Err(e) => {
            observer.stopped();
            return Err(e);
        }
    };
    adata.obsm.extend(view.obsm);
    adata.uns.extend(view.uns);
    let names: Vec<_> = later.iter().map(|s| s.name).collect();
    let place = match device {
        Some(d) if first.is_some_and(|f| f.device().id() != d) => format!("on {d}, a stream"),
        Some(_) => "on a GPU stream".to_string(),
        None => "on a thread".to_string(),
    };
    record.note = format!(
        "{}; beside {} ({place} of its own)",
        record.note,
        names.join(", ")
    );
    record.device = Some(if device.is_some() { "gpu" } else { "cpu" }.into());
    observer.finished(&record);
    records.insert(index.min(records.len()), record);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_runs_beside_only_within_the_budget() {
        assert!(fits(1 << 30, 1 << 30, 2 << 30).is_ok());
        let why = fits(1 << 30, (1 << 30) + 1, 2 << 30).unwrap_err();
        assert!(
            why.contains("exceed the device budget of 2.00 GiB"),
            "{why}"
        );
        assert!(fits(u64::MAX, 1, u64::MAX).is_err());
    }

    #[test]
    fn a_split_runs_idle_gpu_is_tried_first_and_needs_room_for_the_step_alone() {
        let gib = 1u64 << 30;
        let room = |in_use, budget| Room { in_use, budget };
        // The idle GPU holds the step (3 GiB) though not the step and Leiden (5 GiB) at once.
        let idle = Some(room(gib, 4 * gib));
        assert_eq!(
            choose(idle, room(gib, 20 * gib), 3 * gib, 5 * gib),
            Ok(Gpu::Other)
        );
        // Too full: the first GPU, where both must fit.
        let full = Some(room(3 * gib, 4 * gib));
        assert_eq!(
            choose(full, room(gib, 20 * gib), 3 * gib, 5 * gib),
            Ok(Gpu::First)
        );
        assert_eq!(
            choose(None, room(gib, 20 * gib), 3 * gib, 5 * gib),
            Ok(Gpu::First)
        );
        let why = choose(full, room(gib, 8 * gib), 3 * gib, 5 * gib).unwrap_err();
        assert!(
            why.contains("exceed the device budget of 8.00 GiB"),
            "{why}"
        );
        assert!(choose(None, room(1, u64::MAX), u64::MAX, 1).is_err());
    }
}
