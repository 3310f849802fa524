//! The step contract: what a row of the step table declares ([`Step`]) and what a step's
//! functions are given ([`StepEnv`]). It lies below the runner, which walks the rows in their
//! order (its step table), so a step can be called without it. The rows themselves live beside
//! each step's code (`steps/<step>.rs`, listed in [`super::rows`]).

use super::generated_blocks::GeneratedPass;
use super::PipelineConfig;
use crate::anndata::Raw;
use crate::{AnnData, Result};
use sc_kernels::gpu::module_cache::KernelSource;
use sc_kernels::gpu::GpuContext;
use sc_kernels::Communicator;
use std::sync::Arc;

/// When a step runs in a run's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Over each cell's values (QC to PCA): every rank of a split run runs it on its own block
    /// of cells, combining per-gene statistics through its communicator.
    PerCell,
    /// Over the cell x cell structure (harmony, neighbors): once over all cells, after the
    /// ranks' blocks are stacked, while the output's X and `.raw` are written.
    CellGraph,
}

/// Where a step runs and with what.
pub struct StepEnv<'a> {
    pub config: &'a PipelineConfig,
    /// The GPUs of a [`Phase::CellGraph`] step (none: the CPU). A [`Phase::PerCell`] step
    /// runs where X lives instead (host, GPU, streamed through a GPU) and ignores them.
    pub gpus: &'a [Arc<GpuContext>],
    /// The GPUs' communicators, when a cell-graph step may split its cells across them.
    pub group: &'a [Arc<dyn Communicator>],
    /// `.raw` while the run holds it apart from the data (it is being written meanwhile);
    /// `None`: the data's own.
    pub raw: Option<&'a Raw>,
}

/// The sizes a step's memory estimate is made from: X's cells, genes and stored values when the
/// run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub n_obs: usize,
    pub n_vars: usize,
    pub nnz: usize,
}

/// Device bytes a step needs beyond X and one compacted copy of it (which any step that
/// selects cells or genes holds at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepBytes {
    /// Made by the step and kept for the rest of the run (scale's dense matrix).
    pub kept: u64,
    /// Held only while the step runs (PCA's Gram matrix and eigensolver workspace).
    pub transient: u64,
}

/// A step's function: runs it on `adata` and returns its report note.
pub type RunFn = fn(&mut AnnData, &StepEnv<'_>) -> Result<String>;

/// A step's function on the generated demo, whose X is never held: it reads the blocks of
/// `pass` and adds to what every later block goes through.
pub type GeneratedFn = fn(&mut AnnData, &StepEnv<'_>, &mut GeneratedPass<'_>) -> Result<String>;

/// How a step runs on the generated demo, whose X is never held (the runner's generated mode).
#[derive(Clone, Copy)]
pub struct OnGenerated {
    /// The report's name there (the note differs where the step is lazy or keeps less).
    pub name: &'static str,
    pub run: GeneratedFn,
}

/// One row of the step table.
#[derive(Clone, Copy)]
pub struct Step {
    /// The report's name.
    pub name: &'static str,
    pub phase: Phase,
    /// Whether a run of this configuration makes the step.
    pub enabled: fn(&PipelineConfig) -> bool,
    /// The step on X wherever it lives: the host, a GPU, streamed through a GPU in row blocks,
    /// or a rank's block of a split run (the step's function dispatches on X).
    pub run: RunFn,
    /// The step on the generated demo's blocks; `None`: as [`Step::run`] (the cell-graph steps
    /// read `obsm`, which the generated run holds). A cell-graph step with one of its own (the
    /// marker genes, which need expression values) runs after the other cell-graph steps there.
    pub generated: Option<OnGenerated>,
    /// Device bytes beyond X of an in-memory run (`memory_plan`).
    pub device_bytes: fn(&Sizes, &PipelineConfig) -> StepBytes,
    /// Its GPU kernel modules beyond the shared layer's, which the warm-up compiles while the
    /// input is read (`sc_kernels::warm_up::modules_for`).
    pub kernels: &'static [KernelSource],
    /// Refuses, before any step runs, an input this step could not use with `config` (an obs
    /// column an option names that is missing or unusable), naming the option.
    pub check_input: fn(&AnnData, &PipelineConfig) -> Result<()>,
    /// Refuses, before any step runs on a GPU (after [`Step::check_input`]), an input whose
    /// data this step could not hold within the run's device budget (the last argument, in
    /// bytes), naming what to change. Runs on the CPU are not checked.
    pub check_budget: fn(&AnnData, &PipelineConfig, u64) -> Result<()>,
    /// A cell-graph step that reads only `obsp['connectivities']` and writes only obsm and uns
    /// keys of its own: the runner may start it on a thread and a stream of its own, beside the
    /// steps after it (the runner's `beside`).
    pub beside: bool,
    /// Reads what a step running beside writes (embedding_density reads UMAP's `X_umap`): the
    /// runner waits for that step before this one, and runs only the steps before it beside.
    pub waits_for_beside: bool,
}

/// The input check of a step that takes everything it reads from the steps before it.
pub fn no_input_check(_: &AnnData, _: &PipelineConfig) -> Result<()> {
    Ok(())
}

/// The budget check of a step whose device memory the run's plan covers (`memory_plan`).
pub fn no_budget_check(_: &AnnData, _: &PipelineConfig, _: u64) -> Result<()> {
    Ok(())
}

/// The memory estimate of a step that needs nothing beyond X and its compacted copy.
pub fn no_device_bytes(_: &Sizes, _: &PipelineConfig) -> StepBytes {
    StepBytes::default()
}
