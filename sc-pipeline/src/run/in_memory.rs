//! A run on one X held whole: in host memory (the CPU), in device memory, or in host memory
//! streamed through the device in row blocks (the memory plan chooses); also each rank's block
//! of a split run. The steps are the table's ([`super::table::STEPS`]), in its order.

use super::gpu::GpuRun;
use super::observer::StepObserver;
use super::runner::Runner;
use super::PipelineConfig;
use crate::anndata::{Matrix, Raw};
use crate::report::StepRecord;
use crate::run::memory_plan::Placement;
use crate::steps::step::{Phase, StepEnv};
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::Communicator;
use std::sync::Arc;

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
/// and X and `.raw` come back to the host at the end (ready to write).
pub fn run_pipeline_on(
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpu: Option<&GpuRun>,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    super::table::check_input(config, adata)?;
    run_steps(adata, config, gpu, observer, true)
}

/// [`run_pipeline_on`] on input whose options the caller checked (`table::check_input`, once
/// per run: a rank of a split run gets its block); without `to_host`, X and `.raw` stay where
/// the steps left them (a split run gathers the ranks' blocks from their GPUs straight into the
/// stacked result).
pub(crate) fn run_steps(
    adata: &mut AnnData,
    config: &PipelineConfig,
    gpu: Option<&GpuRun>,
    observer: &mut dyn StepObserver,
    to_host: bool,
) -> Result<Vec<StepRecord>> {
    let mut r = Runner::new(observer, gpu);
    check_counts(adata, config)?;
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
    let graph_gpus: Vec<_> = gpu.map(|g| g.ctx.clone()).into_iter().collect();
    let env = StepEnv {
        config,
        gpus: &graph_gpus,
        group: &[],
        raw: None,
    };
    r.run_phase(adata, &env, Phase::PerCell)?;
    r.run_phase(adata, &env, Phase::CellGraph)?;
    if gpu.is_some() && to_host {
        r.step_on("move results to the host", true, adata, |a| {
            a.to_host()?;
            Ok(((), "X and .raw".to_string()))
        })?;
    }
    Ok(r.records)
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
    raw: Option<&Raw>,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    let runs = GraphRuns {
        first: gpu,
        beside: None,
    };
    cell_graph_steps_on(adata, config, runs, gpus, group, raw, observer)
}

/// The runs of the GPUs the cell-graph steps use: the first (the steps in order), and another
/// for a step that runs beside them.
#[derive(Clone, Copy, Default)]
pub(crate) struct GraphRuns<'a> {
    pub first: Option<&'a GpuRun>,
    pub beside: Option<&'a GpuRun>,
}

/// [`run_cell_graph_steps`] with `runs.beside`, a split run's GPU for the step that runs beside
/// the others.
pub(crate) fn cell_graph_steps_on(
    adata: &mut AnnData,
    config: &PipelineConfig,
    runs: GraphRuns<'_>,
    gpus: &[Arc<GpuContext>],
    group: &[Arc<dyn Communicator>],
    raw: Option<&Raw>,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    let mut r = Runner::new(observer, runs.first);
    r.beside_gpu = runs.beside.cloned();
    let env = StepEnv {
        config,
        gpus,
        group,
        raw,
    };
    r.run_phase(adata, &env, Phase::CellGraph)?;
    Ok(r.records)
}

/// The input must be counts (finite and non-negative) when a step that reads counts runs,
/// else finite. X already on a GPU is taken as checked by whoever put it there (reading it
/// back would cost a copy of X).
pub(crate) fn check_counts(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    if let Matrix::Device(_) = &adata.x {
        return Ok(());
    }
    let x = adata.x.to_csr()?;
    if config.reads_counts() {
        x.check_counts().map_err(|e| {
            crate::Error::invalid("X", format!("the pipeline needs raw counts in X: {e}"))
        })
    } else {
        x.check_finite()
            .map_err(|e| crate::Error::invalid("X", format!("X must be finite: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anndata::{Column, Value};
    use crate::run::Silent;

    #[test]
    fn the_whole_workflow_writes_scanpys_keys() {
        let p = crate::synthetic::SyntheticParams::new(400, 600, 2);
        let mut a = crate::synthetic::generate(&p).unwrap();
        let config = PipelineConfig {
            min_genes: Some(20),
            ..PipelineConfig::default()
        };
        run_pipeline(&mut a, &config, &mut Silent).unwrap();
        assert_eq!(a.obsm["X_umap"].shape, vec![a.n_obs(), 2]);
        assert!(matches!(
            a.obs.column("leiden"),
            Some(Column::Categorical { .. })
        ));
        let r = a.uns["rank_genes_groups"].clone();
        for key in ["names", "scores", "logfoldchanges", "pvals", "pvals_adj"] {
            assert!(
                matches!(r.get(key), Some(Value::Records(f)) if !f.is_empty()),
                "{key}"
            );
        }
        assert!(
            matches!(r.get("params").and_then(|p| p.get("method")), Some(Value::Scalar(crate::anndata::Scalar::Str(m))) if m == "wilcoxon")
        );
    }
}
