//! How a GPU run holds X: in device memory when the run's estimated peak fits its device memory
//! budget, else in host memory, streamed through the device in row blocks
//! (`sc_kernels::gpu::streamed`). The budget is enforced by a limiting adaptor in front of the
//! run's resource, so a wrong estimate ends in a clear out-of-memory error, never in more device
//! memory than allowed.

use super::table;
use crate::steps::step::{Phase, Sizes, StepBytes};
use crate::steps::PipelineConfig;
use sc_kernels::gpu::streamed::csr_block_bytes;

/// `--execution`: how X is held on a GPU run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Execution {
    /// In device memory when the estimate fits the budget, else streamed.
    #[default]
    Auto,
    /// Always in device memory (fails with an out-of-memory error when it does not fit).
    InMemory,
    /// Always streamed from host memory.
    Streamed,
}

/// Where X goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    InMemory,
    /// In host memory; a step uploads at most `block_bytes` of X at a time.
    Streamed {
        block_bytes: usize,
    },
}

/// The decision and what it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Device bytes the run may allocate.
    pub budget: u64,
    /// Estimated device peak of the in-memory run.
    pub in_memory_peak: u64,
    pub placement: Placement,
    /// Why this placement (for the report).
    pub reason: String,
}

/// Device bytes kept for what is not X's: per-gene and per-cell vectors, the Gram matrix, the
/// kNN and harmony buffers of a run of typical size; a quarter of a smaller budget.
const RESERVE: u64 = 512 << 20;

/// What the per-cell steps of `config` need beyond X and its compacted copy (the step table's
/// estimates): what they keep, added up, and the most one of them holds while it runs.
fn steps_bytes(sizes: &Sizes, config: &PipelineConfig) -> StepBytes {
    table::enabled(config, Phase::PerCell).fold(StepBytes::default(), |all, step| {
        let b = (step.device_bytes)(sizes, config);
        StepBytes {
            kept: all.kept + b.kept,
            transient: all.transient.max(b.transient),
        }
    })
}

/// What is kept out of the blocks' share of `budget`: [`RESERVE`] (a quarter of a smaller
/// budget) and what the steps hold while they run (PCA's matrices); a block's own outputs are
/// within the block's share.
fn reserve(budget: u64, n_vars: usize, config: &PipelineConfig) -> u64 {
    let sizes = Sizes {
        n_obs: 0,
        n_vars,
        nnz: 0,
    };
    RESERVE.min(budget / 4) + steps_bytes(&sizes, config).transient
}

/// Smallest and largest streamed block: small blocks waste launches, large ones gain nothing
/// once the copy engine is saturated.
pub const MIN_BLOCK: u64 = 1 << 20;
pub const MAX_BLOCK: u64 = 2 << 30;

/// The device peak of an in-memory run of `config` on an `n_obs x n_vars` CSR matrix with `nnz`
/// stored values: a filter holds X and its compacted copy at once (2 X), and after the HVG
/// subset `.raw` (at most X) and X's HVG columns (at most X) coexist with what the steps keep
/// (scale's dense matrix) and hold while they run (PCA's matrices); see each step's row.
pub fn in_memory_peak(n_obs: usize, n_vars: usize, nnz: usize, config: &PipelineConfig) -> u64 {
    let x = csr_block_bytes(n_obs, nnz) as u64;
    let steps = steps_bytes(&Sizes { n_obs, n_vars, nnz }, config);
    2 * x + steps.kept + steps.transient + RESERVE
}

/// At most the bytes of the h5ad a run of `config` writes for an `n_obs x n_vars` CSR matrix
/// with `nnz` stored values, the input's own annotations aside: `.raw` holds at most the input's
/// values, X its highly variable genes (dense once scaled), obsm the PCA (and harmony's)
/// embedding, obsp the kNN graph's distances and connectivities (at most twice k entries a row
/// once symmetrised), obs the QC columns. What a GPU run reserves for its output ahead
/// (`io::create_h5ad`).
pub fn output_bytes(n_obs: usize, n_vars: usize, nnz: usize, config: &PipelineConfig) -> u64 {
    let csr = csr_block_bytes(n_obs, nnz) as u64;
    let raw = if config.subset_hvg { csr } else { 0 };
    let x = if config.scale_max_value.is_some() {
        n_obs as u64 * config.genes_after_subset(n_vars) as u64 * 4
    } else {
        csr
    };
    let embeddings = 1 + u64::from(config.harmony.is_some());
    let per_cell = config.n_comps.unwrap_or(0) as u64 * 4 * embeddings
        + config.n_neighbors.unwrap_or(0) as u64 * 3 * 8
        + 16
        + OBS_COLUMNS_BYTES;
    raw + x + n_obs as u64 * per_cell + GENE_TABLES_BYTES
}

/// Bytes per cell of the QC columns a run adds to obs (a dozen numbers, 8 bytes at most each).
const OBS_COLUMNS_BYTES: u64 = 128;
/// The gene tables, attributes and HDF5's own metadata: a bound for up to 100,000 genes.
const GENE_TABLES_BYTES: u64 = 64 << 20;

/// The block size of a streamed run of `config` on `n_vars` genes with `budget` bytes: a quarter
/// of what the reserve leaves (a block, its outputs and the pool's rounding fit twice over),
/// within [`MIN_BLOCK`] and [`MAX_BLOCK`].
pub fn block_bytes(budget: u64, n_vars: usize, config: &PipelineConfig) -> usize {
    (budget.saturating_sub(reserve(budget, n_vars, config)) / 4).clamp(MIN_BLOCK, MAX_BLOCK)
        as usize
}

/// Decides how a GPU run of `config` holds its `n_obs x n_vars` X of `nnz` stored values.
pub fn plan(
    n_obs: usize,
    n_vars: usize,
    nnz: usize,
    config: &PipelineConfig,
    budget: u64,
    execution: Execution,
) -> MemoryPlan {
    let peak = in_memory_peak(n_obs, n_vars, nnz, config);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let streamed = Placement::Streamed {
        block_bytes: block_bytes(budget, n_vars, config),
    };
    let (placement, reason) = match execution {
        Execution::InMemory => (
            Placement::InMemory,
            "in memory (--execution in-memory)".into(),
        ),
        Execution::Streamed => (streamed, "streamed (--execution streamed)".into()),
        Execution::Auto if peak <= budget => (
            Placement::InMemory,
            format!(
                "in memory: estimated peak {:.2} GiB within the {:.2} GiB budget",
                gib(peak),
                gib(budget)
            ),
        ),
        Execution::Auto => (
            streamed,
            format!(
                "streamed: estimated in-memory peak {:.2} GiB exceeds the {:.2} GiB budget",
                gib(peak),
                gib(budget)
            ),
        ),
    };
    MemoryPlan {
        budget,
        in_memory_peak: peak,
        placement,
        reason,
    }
}

impl MemoryPlan {
    /// One line for the report: the placement, its reason and the block size.
    pub fn describe(&self) -> String {
        match self.placement {
            Placement::InMemory => self.reason.clone(),
            Placement::Streamed { block_bytes } => {
                format!("{}; blocks of up to {} MiB", self.reason, block_bytes >> 20)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::pca_bytes;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_output_of_a_million_cells_is_bounded_by_its_raw_dense_x_and_graph() {
        // The 1,000,000-cell demo: its h5ad holds 23.8 GB of X and .raw after the filters.
        let config = PipelineConfig::default();
        let (n, g, nnz) = (1_000_000, 20_000, 1_982_664_083);
        let bulk = (nnz as u64 * 8 + (n as u64 + 1) * 8) + n as u64 * 2000 * 4;
        let bytes = output_bytes(n, g, nnz, &config);
        assert!(
            bytes > bulk && bytes < bulk + (2 << 30),
            "{bytes} for {bulk}"
        );
        let unscaled = PipelineConfig {
            scale_max_value: None,
            n_neighbors: None,
            n_comps: None,
            ..PipelineConfig::default()
        };
        assert_eq!(
            output_bytes(n, g, nnz, &unscaled),
            2 * csr_block_bytes(n, nnz) as u64
                + n as u64 * (16 + OBS_COLUMNS_BYTES)
                + GENE_TABLES_BYTES
        );
    }

    #[test]
    fn a_million_cells_fit_an_h100_and_stream_under_8_gib() {
        // scpipe generate 1100000 20000: 2.18e9 stored values.
        let config = PipelineConfig::default();
        let (n, g, nnz) = (1_100_000, 20_000, 2_180_000_000);
        let peak = in_memory_peak(n, g, nnz, &config);
        // 2 x 17.4 GB of CSR + 8.8 GB of dense HVG columns.
        assert!(peak > 40 * GIB && peak < 48 * GIB, "{peak}");
        let roomy = plan(n, g, nnz, &config, 72 * GIB, Execution::Auto);
        assert_eq!(roomy.placement, Placement::InMemory);
        let tight = plan(n, g, nnz, &config, 8 * GIB, Execution::Auto);
        assert_eq!(
            tight.placement,
            Placement::Streamed {
                block_bytes: ((8 * GIB - RESERVE - pca_bytes(2000)) / 4) as usize
            }
        );
        assert!(
            tight.describe().contains("exceeds the 8.00 GiB budget"),
            "{}",
            tight.describe()
        );
    }

    #[test]
    fn the_choice_can_be_forced_and_blocks_stay_in_range() {
        let config = PipelineConfig::default();
        let p = plan(1000, 100, 10_000, &config, 80 * GIB, Execution::Streamed);
        assert_eq!(
            p.placement,
            Placement::Streamed {
                block_bytes: 2 << 30
            }
        );
        let p = plan(1000, 100, 10_000, &config, 0, Execution::InMemory);
        assert_eq!(p.placement, Placement::InMemory);
        let no_pca = PipelineConfig {
            n_comps: None,
            ..PipelineConfig::default()
        };
        assert_eq!(block_bytes(0, 100, &no_pca), 1 << 20);
        assert_eq!(block_bytes(128 << 20, 100, &no_pca), 24 << 20);
        // PCA of 500 genes keeps its 47 MB out of the blocks' share (most of it the Gram
        // matrix's split block: 4,096 rows of 512 padded genes, four times).
        assert_eq!(
            block_bytes(
                128 << 20,
                3000,
                &PipelineConfig {
                    hvg: Some(crate::steps::HvgOptions {
                        n_top_genes: Some(500),
                        ..Default::default()
                    }),
                    ..PipelineConfig::default()
                }
            ),
            ((96 << 20) - 46_603_008) / 4
        );
        assert_eq!(pca_bytes(500), 46_603_008);
        assert_eq!(block_bytes(1 << 40, 100, &no_pca), 2 << 30);
    }

    #[test]
    fn without_scale_the_dense_matrix_is_not_counted() {
        let mut config = PipelineConfig::default();
        let with = in_memory_peak(1000, 500, 50_000, &config);
        config.scale_max_value = None;
        let without = in_memory_peak(1000, 500, 50_000, &config);
        assert_eq!(with - without, 1000 * 500 * 4);
        config.n_comps = None;
        assert_eq!(
            without - in_memory_peak(1000, 500, 50_000, &config),
            pca_bytes(500)
        );
    }
}
