//! A run of the pipeline: what to run ([`RunPlan`], [`PipelineConfig`]), the steps in order
//! ([`table::STEPS`], each row declared beside its step in `steps/`, whose contract
//! [`crate::steps::step`] is below the runner), the GPU and its resource
//! stack ([`GpuRun`]), and the modes that walk the table:
//!
//! - [`in_memory`]: one X held whole, on the host, on a GPU, or streamed through a GPU;
//! - [`generated`]: X never held: the demo generated on the GPU, or an input larger than the
//!   host memory read from its file ([`file_cells`]), block by block for every pass;
//! - [`split`]: the cells split across this host's GPUs (or threads), one rank each;
//! - [`launched`]: one rank of a group started by a launcher, one process per GPU;
//! - [`mod@execute`]: carries out a [`RunPlan`], choosing among them, and writes the output.

pub mod allocator;
mod beside;
pub mod execute;
pub mod file_cells;
pub mod generated;
pub mod gpu;
pub mod in_memory;
pub mod launched;
pub mod memory_plan;
mod observer;
mod output;
pub mod plan;
pub mod recorders;
mod runner;
pub mod split;
pub mod table;

/// The step contract and the run's configuration live below the runner, in [`crate::steps`]
/// (a front end may call a step without the runner); they are named here too.
pub use crate::steps::{generated_blocks, step};
pub use crate::steps::{
    EmbeddingDensityOptions, HarmonyOptions, HvgOptions, LeidenOptions, LouvainOptions,
    MarkerOptions, MitoPrefix, PagaOptions, PipelineConfig,
};
pub use execute::{execute, Outcome};
pub use gpu::{default_budget, pca_rehearsal, DeviceOptions, GpuRun, DEFAULT_BUDGET_FRACTION};
pub use in_memory::{run_cell_graph_steps, run_pipeline, run_pipeline_on};
pub use observer::{Silent, StepObserver};
pub use plan::{Input, Outputs, RunPlan, Target};
