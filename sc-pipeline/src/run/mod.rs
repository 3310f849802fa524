//! A run of the pipeline: what to run ([`RunPlan`], [`PipelineConfig`]), the steps in order
//! ([`table::STEPS`], each row declared beside its step in `steps/`), the GPU and its resource
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
mod config;
pub mod execute;
pub mod file_cells;
pub mod generated;
pub mod generated_blocks;
pub mod gpu;
pub mod in_memory;
pub mod launched;
mod output;
pub mod plan;
pub mod recorders;
mod runner;
pub mod split;
pub mod step;
pub mod table;

pub use config::{
    HarmonyOptions, HvgOptions, LeidenOptions, MarkerOptions, MitoPrefix, PipelineConfig,
};
pub use execute::{execute, Outcome};
pub(crate) use generated_blocks::GeneratedPass;
pub use gpu::{default_budget, pca_rehearsal, DeviceOptions, GpuRun, DEFAULT_BUDGET_FRACTION};
pub use in_memory::{run_cell_graph_steps, run_pipeline, run_pipeline_on};
pub use plan::{Input, Outputs, RunPlan, Target};
pub use runner::{Silent, StepObserver};
