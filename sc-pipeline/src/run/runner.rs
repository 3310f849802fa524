//! Runs steps one after the other, timing each: wall time, the device memory and transfers of
//! a GPU step, the process's peak memory; an observer is told when each starts and ends.

use super::beside::{self, Decision};
use super::gpu::GpuRun;
use super::observer::StepObserver;
use super::table;
use crate::anndata::Matrix;
use crate::report::{DeviceStepStats, StepRecord, StepTimer};
use crate::steps::step::{Phase, Step, StepEnv};
use crate::{AnnData, Error, Result};

/// The steps' records so far, and the GPU whose statistics they show.
pub(crate) struct Runner<'a> {
    pub(crate) records: Vec<StepRecord>,
    pub(crate) observer: &'a mut dyn StepObserver,
    pub(crate) gpu: Option<GpuRun>,
    /// In a split run, the GPU a step whose row allows it runs beside the others on.
    pub(crate) beside_gpu: Option<GpuRun>,
}

impl<'a> Runner<'a> {
    pub(crate) fn new(observer: &'a mut dyn StepObserver, gpu: Option<&GpuRun>) -> Self {
        Runner {
            records: Vec::new(),
            observer,
            gpu: gpu.cloned(),
            beside_gpu: None,
        }
    }

    /// Runs the enabled steps of `phase` in the table's order. A per-cell step runs where X
    /// lives; a cell-graph step on `env`'s GPUs, the one whose row allows it beside the steps
    /// after it (see [`super::beside`]).
    pub(crate) fn run_phase(
        &mut self,
        adata: &mut AnnData,
        env: &StepEnv<'_>,
        phase: Phase,
    ) -> Result<()> {
        let steps: Vec<&'static Step> = table::enabled(env.config, phase).collect();
        self.run_steps(adata, env, phase, &steps)
    }

    /// [`Runner::run_phase`] of `steps`, enabled steps of `phase` in the table's order.
    pub(crate) fn run_steps(
        &mut self,
        adata: &mut AnnData,
        env: &StepEnv<'_>,
        phase: Phase,
        steps: &[&'static Step],
    ) -> Result<()> {
        self.run_steps_then(adata, env, phase, steps, &[], |_, _, _| {
            unreachable!("no steps of a form of their own")
        })
    }

    /// [`Runner::run_steps`] of `steps`, then of `own`, enabled steps of `phase` after them
    /// that a run without X runs in a form of its own (`run_own`: the marker genes of the
    /// generated demo): a step running beside (UMAP) runs beside those too.
    pub(crate) fn run_steps_then(
        &mut self,
        adata: &mut AnnData,
        env: &StepEnv<'_>,
        phase: Phase,
        steps: &[&'static Step],
        own: &[&'static Step],
        mut run_own: impl FnMut(&mut Self, &'static Step, &mut AnnData) -> Result<()>,
    ) -> Result<()> {
        let on_gpu = match phase {
            Phase::PerCell => matches!(adata.x, Matrix::Device(_)),
            Phase::CellGraph => !env.gpus.is_empty(),
        };
        let steps: Vec<&'static Step> = steps.iter().chain(own).copied().collect();
        let own_from = steps.len() - own.len();
        let steps = &steps[..];
        std::thread::scope(|scope| {
            let mut running = None;
            for (i, step) in steps.iter().enumerate() {
                // A step running beside runs only beside the steps before the first that reads
                // what it writes; that one waits for it.
                let later = &steps[i + 1..];
                let later = &later[..later
                    .iter()
                    .position(|s| s.waits_for_beside)
                    .unwrap_or(later.len())];
                if step.waits_for_beside {
                    if let Some((r, beside_of)) = running.take() {
                        self.finish_beside(r, adata, env, beside_of)?;
                    }
                }
                if i >= own_from {
                    run_own(self, step, adata)?;
                    continue;
                }
                let mut why_in_order = None;
                if running.is_none() {
                    let (gpu, other) = (self.gpu.as_ref(), self.beside_gpu.as_ref());
                    match beside::decide(step, later, adata, env, gpu, other) {
                        Decision::Beside(lane) => {
                            let at = self.records.len();
                            running = Some((
                                beside::start(scope, step, adata, env.config, lane, at),
                                later,
                            ));
                            continue;
                        }
                        Decision::InOrder(why) => why_in_order = why,
                    }
                }
                self.step_on(step.name, on_gpu, adata, |a| {
                    let note = (step.run)(a, env)?;
                    Ok(((), with_reason(note, why_in_order)))
                })?;
            }
            match running {
                Some((r, beside_of)) => self.finish_beside(r, adata, env, beside_of),
                None => Ok(()),
            }
        })
    }

    /// Waits for the step `r` that ran beside `beside_of` and adds what it wrote (see
    /// [`beside::finish`]).
    fn finish_beside(
        &mut self,
        r: beside::Running<'_>,
        adata: &mut AnnData,
        env: &StepEnv<'_>,
        beside_of: &[&Step],
    ) -> Result<()> {
        beside::finish(
            r,
            env.gpus.first(),
            adata,
            beside_of,
            &mut *self.observer,
            &mut self.records,
        )
    }

    /// Runs `f` as the step `name` (`on_gpu`: the record says it ran on the GPU) and records
    /// it; `f` returns its result and the report's note.
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

/// `note`, followed by why its step ran where it did when there is a reason to give.
fn with_reason(note: String, why: Option<String>) -> String {
    match why {
        Some(w) if note.is_empty() => w,
        Some(w) => format!("{note}; {w}"),
        None => note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{run_pipeline, PipelineConfig, Silent};
    use crate::synthetic::{generate, SyntheticParams};

    /// Steps of a form of their own (`run_steps_then`, the generated run's marker genes) run
    /// after the phase's others and inside their scope: UMAP, started beside the steps after it
    /// (on a CPU thread here), has not joined the data when they run; Leiden's labels have.
    /// Every step is recorded, in the table's order.
    #[test]
    fn own_steps_run_beside_the_step_running_beside() {
        let mut a = generate(&SyntheticParams::new(600, 3000, 5)).unwrap();
        let full = PipelineConfig::default();
        let up_to_neighbors = PipelineConfig {
            umap: None,
            leiden: None,
            markers: None,
            ..full.clone()
        };
        run_pipeline(&mut a, &up_to_neighbors, &mut Silent).unwrap();
        let (own, others): (Vec<&'static Step>, Vec<&'static Step>) =
            table::enabled(&full, Phase::CellGraph)
                .filter(|s| ["umap", "leiden", "rank_genes_groups"].contains(&s.name))
                .partition(|s| s.name == "rank_genes_groups");
        assert_eq!(
            others.iter().map(|s| s.name).collect::<Vec<_>>(),
            ["umap", "leiden"]
        );
        assert_eq!(own.len(), 1);
        let env = StepEnv {
            config: &full,
            gpus: &[],
            group: &[],
            raw: None,
        };
        let mut observer = Silent;
        let mut r = Runner::new(&mut observer, None);
        let mut seen = Vec::new();
        r.run_steps_then(
            &mut a,
            &env,
            Phase::CellGraph,
            &others,
            &own,
            |r, step, a| {
                seen.push((
                    a.obsm.contains_key("X_umap"),
                    a.obs.column("leiden").is_some(),
                ));
                r.step_on(step.name, false, a, |a| {
                    (step.run)(a, &env).map(|n| ((), n))
                })
            },
        )
        .unwrap();
        assert_eq!(
            seen,
            [(false, true)],
            "(UMAP joined, Leiden's labels) at the markers"
        );
        assert!(a.obsm.contains_key("X_umap") && a.uns.contains_key("rank_genes_groups"));
        let names: Vec<&str> = r.records.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["umap", "leiden", "rank_genes_groups"]);
    }
}
