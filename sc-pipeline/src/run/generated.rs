//! The pipeline on a dataset larger than host memory: the cells' counts are made block by
//! block and made again for every pass over them, so X never exists whole, neither on the
//! device nor on the host (11.4 million cells x 45,854 genes hold about 23 billion values,
//! 180 GB). Two sources ([`crate::steps::generated_blocks::CellSource`]): the `--demo` generated on
//! the GPU ([`sc_kernels::synth`], [`run_generated`]), and an h5ad file read by rows
//! ([`super::file_cells`], [`run_from_file`]).
//!
//! Each step runs its `*_blocks` kernel over a `GeneratedRows` source: a block is generated,
//! then the steps already run are applied to it as it is made (cells and genes that failed the
//! filters dropped, normalize_total with a fixed target, log1p, the highly variable genes kept,
//! scaled to a dense block for PCA). QC's pass also takes what filter_genes, HVG and scale read
//! ([`crate::steps::generated_ahead`]; each of them makes a pass of its own where that does not
//! hold, e.g. after filter_genes removed genes); filter_cells reads QC's counts; PCA takes two
//! (Gram matrix, then scores). Per-gene sums are combined over the blocks as over the row blocks
//! of a streamed run.
//!
//! What differs from a run that holds X: the result holds no X (and no `.raw`); anndata reads
//! the written file with `X = None`. normalize_total needs a fixed target (the median of all
//! cells' totals would need a pass of its own).

use super::file_cells::FileCells;
use super::gpu::GpuRun;
use super::observer::StepObserver;
use super::runner::Runner;
use super::{table, PipelineConfig};
use crate::anndata::Matrix;
use crate::io::{OutputWrite, RowNames};
use crate::report::StepRecord;
use crate::steps::generated_blocks::{
    blocks_of_values, CellSource, Chain, DemoCells, GeneratedPass,
};
use crate::steps::step::{Phase, Step, StepEnv};
use crate::synthetic::{annotations, count_model, max_stored_values, SyntheticParams};
use crate::{AnnData, Error, Result};
use sc_kernels::synth::gpu::DeviceCountModel;
use sc_kernels::CsrMatrix;
use std::ops::Range;
use std::path::Path;

const STEP: &str = "generated demo";

/// The host memory available to a new allocation (`MemAvailable` of `/proc/meminfo`); `None`
/// where it cannot be read.
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Whether a `--demo` of `p` is too large to generate in host memory (`available` bytes): its
/// X, at the most values the model gives, over half of what is available.
pub fn too_large_for_host(p: &SyntheticParams, available: u64) -> bool {
    let x_bytes = max_stored_values(p) * 8 + (p.n_cells as u64 + 1) * 8;
    x_bytes > available / 2
}

/// Cells per block for cells of `per_cell_values` stored values (at most, or on average) over
/// `n_genes`: a block's made, filtered and transformed copies (8 bytes a value each) and its
/// dense scaled rows within a quarter of `budget` (two blocks are in flight, and PCA's
/// matrices come on top).
fn cells_per_block(
    per_cell_values: u64,
    n_genes: usize,
    config: &PipelineConfig,
    budget: u64,
) -> usize {
    let dense_genes = config
        .hvg
        .as_ref()
        .filter(|_| config.subset_hvg)
        .and_then(|h| h.n_top_genes)
        .unwrap_or(n_genes) as u64;
    let per_cell = per_cell_values * 8 * 3 + dense_genes * 4 + 64;
    ((budget / 4) / per_cell).clamp(1024, 1 << 20) as usize
}

/// The pipeline of `config` on the dataset of `p`, generated on `gpu` block by block (see the
/// module documentation). The result's X is an empty placeholder of the right shape: write it
/// with [`crate::io::write_h5ad_staged_without_x`], or into `output` (created before the run:
/// the cell names go in while the cell-graph steps run) with [`OutputWrite::write_rest`].
pub fn run_generated(
    p: &SyntheticParams,
    config: &PipelineConfig,
    gpu: &GpuRun,
    output: Option<&OutputWrite>,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    run_blocks(Made::Demo(p), config, gpu, output, observer)
}

/// The pipeline of `config` on the h5ad file `path`, its X read block by block for every pass
/// onto `gpu` (see the module documentation); the result and `output` as [`run_generated`]'s.
pub fn run_from_file(
    path: &Path,
    config: &PipelineConfig,
    gpu: &GpuRun,
    output: Option<&OutputWrite>,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    run_blocks(Made::File(path), config, gpu, output, observer)
}

/// Where the blocks come from.
enum Made<'a> {
    Demo(&'a SyntheticParams),
    File(&'a Path),
}

/// The demo's or the file's cells: the source, the annotations, and the stored values per cell
/// (at most for the demo, on average for the file).
fn open_cells(
    made: &Made<'_>,
    ctx: &sc_kernels::gpu::GpuContext,
) -> Result<(
    Box<dyn CellSource>,
    crate::anndata::DataFrame,
    crate::anndata::DataFrame,
    u64,
    &'static str,
)> {
    match made {
        Made::Demo(p) => {
            let (model, genes) = count_model(p)?;
            let groups: Vec<(u8, u8)> = {
                use rayon::prelude::*;
                (0..p.n_cells as u64)
                    .into_par_iter()
                    .map(|c| model.group(c))
                    .collect()
            };
            let (obs, var) = annotations(p, &groups, genes)?;
            let model = DeviceCountModel::upload(ctx, &model).map_err(gpu_error)?;
            let per_cell = max_stored_values(p) / p.n_cells.max(1) as u64 + 1;
            let source = DemoCells { model, per_cell };
            Ok((Box::new(source), obs, var, per_cell, "generated on the GPU"))
        }
        Made::File(path) => {
            let f = FileCells::open(path)?;
            let c = f.chunks();
            let (obs, var) = (c.obs().clone(), c.var().clone());
            let per_cell = c.stored_values(0..c.n_obs()) / c.n_obs().max(1) as u64 + 1;
            Ok((Box::new(f), obs, var, per_cell, "read from the file"))
        }
    }
}

/// The pipeline of `config` on the cells `made` gives, block by block on `gpu`: the blocks
/// hold at most the values of [`cells_per_block`] average cells each.
fn run_blocks(
    made: Made<'_>,
    config: &PipelineConfig,
    gpu: &GpuRun,
    output: Option<&OutputWrite>,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    check_config(config)?;
    let mut r = Runner::new(observer, Some(gpu));
    let ctx = gpu.ctx.clone();
    let mut adata = placeholder(0, 0);
    let mut cells: Vec<Range<usize>> = Vec::new();
    let name = match made {
        Made::Demo(_) => "prepare the generated cells",
        Made::File(_) => "open the input",
    };
    let source = r.step_on(name, true, &mut adata, |a| {
        let (source, obs, var, per_cell, how) = open_cells(&made, &ctx)?;
        let (n_cells, n_genes) = (obs.n_rows(), var.n_rows());
        let per_block = cells_per_block(per_cell, n_genes, config, gpu.memory_budget);
        let max_values = per_block as u64 * per_cell;
        cells = blocks_of_values(source.as_ref(), n_cells, max_values);
        *a = placeholder(n_cells, n_genes);
        (a.obs, a.var) = (obs, var);
        let note = format!(
            "{} blocks of at most {max_values} stored values (about {per_block} cells), {how} \
             for every pass; no X held",
            cells.len()
        );
        Ok((source, note))
    })?;
    let all_genes = adata.var.clone();
    table::check_input(config, &adata)?;
    table::check_budget(config, &adata, gpu.memory_budget)?;
    let mut pass = GeneratedPass {
        ctx: ctx.clone(),
        source: source.as_ref(),
        genes: &all_genes,
        cells: &cells,
        chain: Chain::default(),
        scaler: None,
        genes_per_cell: None,
        ahead: None,
    };
    let gpus = [ctx.clone()];
    let env = StepEnv {
        config,
        gpus: &gpus,
        group: &[],
        raw: None,
    };
    for step in table::enabled(config, Phase::PerCell) {
        let on = step
            .generated
            .expect("every per-cell step has a generated form (see the table's tests)");
        r.step_on(on.name, true, &mut adata, |a| {
            (on.run)(a, &env, &mut pass).map(|note| ((), note + &source.reads_note()))
        })?;
    }
    // A cell-graph step with a form of its own here (the marker genes: they need expression
    // values, which this run never holds whole) comes after the others, which read obsm.
    let (own, on_obsm): (Vec<&'static Step>, Vec<&'static Step>) =
        table::enabled(config, Phase::CellGraph).partition(|s| s.generated.is_some());
    // The cell names are final: into the output while the cell-graph steps run (HDF5 takes
    // seconds for ten million of them).
    let names = output.map(|file| (file, RowNames::of(&adata.obs)));
    std::thread::scope(|s| {
        let naming = names.map(|(file, names)| s.spawn(move || file.write_obs_names(names)));
        // The marker genes run beside UMAP too, once Leiden has given the groups.
        let ran = r.run_steps_then(
            &mut adata,
            &env,
            Phase::CellGraph,
            &on_obsm,
            &own,
            |r, step, a| {
                let on = step.generated.expect("the steps with a generated form");
                r.step_on(on.name, true, a, |a| {
                    (on.run)(a, &env, &mut pass).map(|note| ((), note + &source.reads_note()))
                })
            },
        );
        let named = naming.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        ran.and(named.unwrap_or(Ok(())))
    })?;
    Ok((adata, r.records))
}

/// The steps this run can make lazily.
fn check_config(config: &PipelineConfig) -> Result<()> {
    let refuse = |why: &str| Err(Error::param(STEP, why.to_string()));
    if let Some(None) = config.target_sum {
        return refuse(
            "normalize_total with the median of the cell totals (--target-sum 0) needs every \
             cell before the first block is normalized: give a target (e.g. --target-sum 10000)",
        );
    }
    if !config.regress_out.is_empty() {
        return refuse(crate::steps::REGRESS_OUT_ON_GENERATED);
    }
    if config.scrublet.is_some() {
        return refuse(crate::steps::SCRUBLET_ON_GENERATED);
    }
    if config.markers.as_ref().is_some_and(|m| m.logreg.is_some()) {
        return refuse(crate::steps::LOGREG_ON_GENERATED);
    }
    if config.scale_max_value.is_none() {
        return refuse(
            "without scale (--no-scale) there is no dense block for PCA: the generated demo \
             scales each block as it is made",
        );
    }
    if config.n_comps.is_none() && config.n_neighbors.is_some() {
        return refuse("neighbors needs pca (X_pca) on the generated demo: drop --no-pca");
    }
    Ok(())
}

/// An AnnData of `n_cells` x `n_genes` whose X is an empty placeholder (no stored values; the
/// writer leaves it out).
fn placeholder(n_cells: usize, n_genes: usize) -> AnnData {
    let x = CsrMatrix {
        n_rows: n_cells,
        n_cols: n_genes,
        indptr: vec![0; n_cells + 1],
        indices: Vec::new(),
        data: Vec::new(),
    };
    AnnData::new(Matrix::Sparse(x))
}

fn gpu_error(e: sc_kernels::KernelError) -> Error {
    Error::Gpu {
        step: STEP,
        problem: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_x_beyond_half_the_host_memory_is_generated_on_the_gpu() {
        let atlas = SyntheticParams::new(11_400_000, 45_854, 0);
        // About 23 G values at most, 8 bytes each: far beyond 128 GB.
        assert!(too_large_for_host(&atlas, 128 << 30));
        let small = SyntheticParams::new(100_000, 20_000, 0);
        assert!(!too_large_for_host(&small, 128 << 30));
        assert!(too_large_for_host(&small, 1 << 30));
    }

    #[test]
    fn blocks_fit_a_quarter_of_the_budget_within_bounds() {
        let p = SyntheticParams::new(11_400_000, 45_854, 0);
        let config = PipelineConfig::default();
        let values = max_stored_values(&p) / p.n_cells as u64 + 1;
        let per = cells_per_block(values, p.n_genes, &config, 70 << 30);
        // 2,500 values x 24 bytes + 2,000 dense genes x 4 bytes a cell.
        assert!((200_000..=300_000).contains(&per), "{per}");
        assert_eq!(cells_per_block(values, p.n_genes, &config, 1 << 20), 1024);
        assert_eq!(
            cells_per_block(values, p.n_genes, &config, 1 << 50),
            1 << 20
        );
    }

    #[test]
    fn steps_that_cannot_run_lazily_are_refused_with_the_way_out() {
        let e = |c: PipelineConfig| check_config(&c).unwrap_err().to_string();
        let base = PipelineConfig::default();
        assert!(e(PipelineConfig {
            target_sum: Some(None),
            ..base.clone()
        })
        .contains("--target-sum 10000"));
        assert!(e(PipelineConfig {
            scale_max_value: None,
            ..base.clone()
        })
        .contains("--no-scale"));
        assert!(e(PipelineConfig {
            n_comps: None,
            ..base.clone()
        })
        .contains("--no-pca"));
        let mut logreg = base.clone();
        logreg.markers.as_mut().unwrap().logreg = Some(Default::default());
        assert!(e(logreg).contains("--markers-method logreg"));
        assert!(check_config(&base).is_ok());
    }

    #[test]
    fn the_placeholder_has_the_shape_and_no_values() {
        let a = placeholder(50, 30);
        assert_eq!((a.n_obs(), a.n_vars()), (50, 30));
        assert_eq!(a.x.stored_values(), 0);
    }
}
