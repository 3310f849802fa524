//! The `--demo` pipeline on a dataset larger than host memory: cells are generated on the GPU
//! block by block ([`sc_kernels::synth`]) and generated again for every pass over them, so X
//! never exists whole, neither on the device nor on the host (11.4 million cells x 45,854 genes
//! hold about 23 billion values, 180 GB).
//!
//! Each step runs its `*_blocks` kernel over a `GeneratedRows` source: a block is generated,
//! then the steps already run are applied to it as it is made (cells and genes that failed the
//! filters dropped, normalize_total with a fixed target, log1p, the highly variable genes kept,
//! scaled to a dense block for PCA). QC, the filters, HVG and scale's statistics take one pass
//! each; PCA two (Gram matrix, then scores). Per-gene sums are combined over the blocks as over
//! the row blocks of a streamed run.
//!
//! What differs from a run on a file: the result holds no X (and no `.raw`); anndata reads the
//! written file with `X = None`. normalize_total needs a fixed target (the median of all cells'
//! totals would need a pass of its own).

use crate::anndata::{ArrayData, Column, Matrix, Value};
use crate::pipeline::{cell_graph_steps, GpuRun, PipelineConfig, Runner, StepObserver};
use crate::report::StepRecord;
use crate::steps::{self, CellFilter, GeneFilter, HvgOptions, NormalizeParams, ScaleParams};
use crate::synthetic::{annotations, count_model, max_stored_values, SyntheticParams};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::compact::{select_cols, select_rows};
use sc_kernels::gpu::streamed::RowBlocks;
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::pca::PcaParams;
use sc_kernels::qc::QcParams;
use sc_kernels::scale::DenseScaler;
use sc_kernels::synth::gpu::DeviceCountModel;
use sc_kernels::CsrMatrix;
use std::ops::Range;

const STEP: &str = "generated demo";

/// What every block goes through after it is generated, in this order.
#[derive(Debug, Clone, Default)]
struct Chain {
    /// Over all generated cells.
    keep_cells: Option<Vec<bool>>,
    /// Over all genes.
    keep_genes: Option<Vec<bool>>,
    normalize: Option<NormalizeParams>,
    log1p: bool,
    /// Over the genes kept by `keep_genes`.
    keep_hvg: Option<Vec<bool>>,
}

/// The generated matrix as the steps so far have made it, one row block at a time.
struct GeneratedRows<'a> {
    model: &'a DeviceCountModel,
    /// The generated cells of each block.
    cells: &'a [Range<usize>],
    /// Each block's rows in this matrix (the kept cells).
    ranges: Vec<Range<usize>>,
    n_cols: usize,
    chain: &'a Chain,
}

impl<'a> GeneratedRows<'a> {
    fn new(model: &'a DeviceCountModel, cells: &'a [Range<usize>], chain: &'a Chain) -> Self {
        let mut ranges = Vec::with_capacity(cells.len());
        let mut row = 0;
        for c in cells {
            let n = match &chain.keep_cells {
                Some(k) => k[c.clone()].iter().filter(|&&b| b).count(),
                None => c.len(),
            };
            ranges.push(row..row + n);
            row += n;
        }
        let kept = |k: &Option<Vec<bool>>, all: usize| {
            k.as_ref().map_or(all, |k| k.iter().filter(|&&b| b).count())
        };
        let genes = kept(&chain.keep_genes, model.model().n_genes);
        GeneratedRows {
            model,
            cells,
            ranges,
            n_cols: kept(&chain.keep_hvg, genes),
            chain,
        }
    }
}

impl RowBlocks for GeneratedRows<'_> {
    fn n_rows(&self) -> usize {
        self.ranges.last().map_or(0, |r| r.end)
    }

    fn n_cols(&self) -> usize {
        self.n_cols
    }

    fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    fn make(&self, lane: &GpuContext, k: usize) -> sc_kernels::Result<DeviceCsr> {
        let cells = self.cells[k].clone();
        let c = self.chain;
        let mut x = self
            .model
            .generate(lane, cells.start as u64..cells.end as u64)?;
        if let Some(keep) = &c.keep_cells {
            x = select_rows(lane, &x, &keep[cells])?;
        }
        if let Some(keep) = &c.keep_genes {
            x = select_cols(lane, &x, keep)?;
        }
        if let Some(p) = &c.normalize {
            sc_kernels::normalize::normalize_total_gpu(lane, &mut x, p)?;
        }
        if c.log1p {
            sc_kernels::log1p::log1p_gpu(lane, &mut x, None)?;
        }
        if let Some(keep) = &c.keep_hvg {
            x = select_cols(lane, &x, keep)?;
        }
        Ok(x)
    }
}

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

/// Cells per generated block: a block's generated, filtered and transformed copies (8 bytes a
/// value each) and its dense scaled rows within a quarter of `budget` (two blocks are in flight,
/// and PCA's matrices come on top).
fn cells_per_block(p: &SyntheticParams, config: &PipelineConfig, budget: u64) -> usize {
    let per_cell_values = max_stored_values(p) / p.n_cells.max(1) as u64 + 1;
    let dense_genes = config
        .hvg
        .as_ref()
        .filter(|_| config.subset_hvg)
        .and_then(|h| h.n_top_genes)
        .unwrap_or(p.n_genes) as u64;
    let per_cell = per_cell_values * 8 * 3 + dense_genes * 4 + 64;
    ((budget / 4) / per_cell).clamp(1024, 1 << 20) as usize
}

/// The pipeline of `config` on the dataset of `p`, generated on `gpu` block by block (see the
/// module documentation). The result's X is an empty placeholder of the right shape: write it
/// with [`crate::io::write_h5ad_staged_without_x`].
pub fn run_generated(
    p: &SyntheticParams,
    config: &PipelineConfig,
    gpu: &GpuRun,
    observer: &mut dyn StepObserver,
) -> Result<(AnnData, Vec<StepRecord>)> {
    check_config(config)?;
    let mut r = Runner {
        records: Vec::new(),
        observer,
        gpu: Some(gpu.clone()),
    };
    let ctx = gpu.ctx.clone();
    let mut adata = placeholder(0, 0);
    let per_block = cells_per_block(p, config, gpu.memory_budget);
    let cells: Vec<Range<usize>> = (0..p.n_cells)
        .step_by(per_block)
        .map(|s| s..(s + per_block).min(p.n_cells))
        .collect();
    let model = r.step_on("prepare the generated cells", true, &mut adata, |a| {
        let (model, genes) = count_model(p)?;
        let groups: Vec<(u8, u8)> = {
            use rayon::prelude::*;
            (0..p.n_cells as u64)
                .into_par_iter()
                .map(|c| model.group(c))
                .collect()
        };
        let (obs, var) = annotations(p, &groups, genes)?;
        *a = placeholder(p.n_cells, p.n_genes);
        (a.obs, a.var) = (obs, var);
        let model = DeviceCountModel::upload(&ctx, &model).map_err(gpu_error)?;
        Ok((
            model,
            format!(
                "{} blocks of up to {per_block} cells, generated on the GPU for every pass; no X held",
                cells.len()
            ),
        ))
    })?;
    let mut chain = Chain::default();

    if let Some(prefix) = &config.qc_mito_prefix {
        r.step_on("calculate_qc_metrics", true, &mut adata, |a| {
            let n_mt = steps::annotate_gene_prefix(a, "mt", prefix)?;
            let mask = match a.var.column("mt") {
                Some(Column::Values(ArrayData::Bool(m))) => m.clone(),
                _ => {
                    return Err(Error::invalid(
                        "var['mt']",
                        "the mitochondrial flags are missing",
                    ))
                }
            };
            let params = QcParams {
                qc_vars: vec![("mt".into(), mask)],
                percent_top: steps::default_percent_top(a.n_vars()),
                log1p: true,
            };
            let src = GeneratedRows::new(&model, &cells, &chain);
            let metrics = sc_kernels::qc::calculate_qc_metrics_blocks(&ctx, &src, &params)
                .map_err(steps::kernel_error("calculate_qc_metrics"))?;
            steps::store_qc_metrics(a, metrics)?;
            Ok(((), steps::mito_qc_note(n_mt, prefix, a.n_vars())))
        })?;
    }
    if let Some(min_genes) = config.min_genes {
        let keep = r.step_on("filter_cells", true, &mut adata, |a| {
            let src = GeneratedRows::new(&model, &cells, &chain);
            let result = sc_kernels::filter::filter_cells_blocks(
                &ctx,
                &src,
                CellFilter::MinGenes(min_genes),
            )
            .map_err(steps::kernel_error("filter_cells"))?;
            let keep = result.keep.clone();
            let removed = steps::keep_cells(a, result)?;
            Ok((
                keep,
                format!("min_genes={min_genes}: {removed} cells removed"),
            ))
        })?;
        chain.keep_cells = Some(keep);
    }
    if let Some(min_cells) = config.min_cells {
        let keep = r.step_on("filter_genes", true, &mut adata, |a| {
            let src = GeneratedRows::new(&model, &cells, &chain);
            let result = sc_kernels::filter::filter_genes_blocks(
                &ctx,
                &src,
                GeneFilter::MinCells(min_cells),
            )
            .map_err(steps::kernel_error("filter_genes"))?;
            let keep = result.keep.clone();
            let removed = steps::keep_genes(a, result)?;
            Ok((
                keep,
                format!("min_cells={min_cells}: {removed} genes removed"),
            ))
        })?;
        chain.keep_genes = Some(keep);
    }
    let counts_hvg = config.hvg.as_ref().filter(|h| h.needs_counts());
    if let Some(h) = counts_hvg {
        hvg_step(&mut r, &mut adata, h, &ctx, &model, &cells, &chain)?;
    }
    if let Some(target_sum) = config.target_sum {
        let target = target_sum.expect("checked by check_config");
        r.step_on("normalize_total", true, &mut adata, |_| {
            Ok((
                (),
                format!("target_sum={target}: lazy, applied to each block as it is generated"),
            ))
        })?;
        chain.normalize = Some(NormalizeParams {
            target_sum: Some(target),
            ..Default::default()
        });
    }
    if config.log1p {
        r.step_on("log1p", true, &mut adata, |a| {
            a.uns
                .insert("log1p".into(), Value::dict(Vec::<(&str, _)>::new()));
            Ok(((), "lazy, applied to each block as it is generated".into()))
        })?;
        chain.log1p = true;
    }
    if let Some(h) = config.hvg.as_ref().filter(|h| !h.needs_counts()) {
        hvg_step(&mut r, &mut adata, h, &ctx, &model, &cells, &chain)?;
    }
    if config.hvg.is_some() && config.subset_hvg {
        let keep = r.step_on("subset to HVG", true, &mut adata, |a| {
            let keep = steps::highly_variable_mask(a)?;
            a.select_var(&keep)?;
            Ok((keep, "no .raw (X is generated, never held)".to_string()))
        })?;
        chain.keep_hvg = Some(keep);
    }
    let max_value = config.scale_max_value.expect("checked by check_config");
    let scale = ScaleParams {
        zero_center: true,
        max_value,
    };
    let scaler = r.step_on("scale", true, &mut adata, |a| {
        let src = GeneratedRows::new(&model, &cells, &chain);
        let st = sc_kernels::scale::scale_stats_blocks(&ctx, &src)
            .map_err(steps::kernel_error("scale"))?;
        let scaler = DenseScaler::new(&ctx, &st, &scale).map_err(steps::kernel_error("scale"))?;
        a.var.set_values("mean", ArrayData::F64(st.mean))?;
        a.var.set_values("std", ArrayData::F64(st.std))?;
        Ok((
            scaler,
            format!(
                "{}; statistics now, each block scaled as it is generated for PCA",
                max_value.map_or("no clipping".into(), |m| format!("max_value={m}"))
            ),
        ))
    })?;
    if let Some(n_comps) = config.n_comps {
        r.step_on("pca", true, &mut adata, |a| {
            let src = GeneratedRows::new(&model, &cells, &chain);
            let params = PcaParams {
                n_comps,
                zero_center: true,
            };
            let make = |lane: &GpuContext, k: usize| scaler.apply(lane, &src.make(lane, k)?);
            let result = sc_kernels::pca::pca_dense_blocks(
                &ctx,
                src.n_rows(),
                src.n_cols(),
                cells.len(),
                make,
                &params,
            )
            .map_err(steps::kernel_error("pca"))?;
            // X holds the highly variable genes only: every gene is in the mask.
            let used = steps::store_pca(a, result, None)?;
            Ok(((), format!("n_comps={used}")))
        })?;
    }
    cell_graph_steps(&mut r, &mut adata, config, &[ctx.clone()], &[])?;
    Ok((adata, r.records))
}

/// The highly variable genes of the generated matrix as the chain makes it.
fn hvg_step(
    r: &mut Runner<'_>,
    adata: &mut AnnData,
    h: &HvgOptions,
    ctx: &GpuContext,
    model: &DeviceCountModel,
    cells: &[Range<usize>],
    chain: &Chain,
) -> Result<()> {
    r.step_on("highly_variable_genes", true, adata, |a| {
        let batches = steps::hvg_batches(a, h)?;
        let params = steps::hvg_params(a, h);
        let src = GeneratedRows::new(model, cells, chain);
        let result = sc_kernels::hvg::highly_variable_genes_blocks(
            ctx,
            &src,
            &params,
            batches.as_ref(),
            Some(&a.var.index),
        )
        .map_err(steps::kernel_error("highly_variable_genes"))?;
        let n = steps::store_hvg(a, result, h)?;
        Ok((
            (),
            format!("flavor={}: {n} genes selected", h.flavor.name()),
        ))
    })
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
        let per = cells_per_block(&p, &config, 70 << 30);
        // 2,500 values x 24 bytes + 2,000 dense genes x 4 bytes a cell.
        assert!((200_000..=300_000).contains(&per), "{per}");
        assert_eq!(cells_per_block(&p, &config, 1 << 20), 1024);
        assert_eq!(cells_per_block(&p, &config, 1 << 50), 1 << 20);
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
        assert!(check_config(&base).is_ok());
    }

    #[test]
    fn the_placeholder_has_the_shape_and_no_values() {
        let a = placeholder(50, 30);
        assert_eq!((a.n_obs(), a.n_vars()), (50, 30));
        assert_eq!(a.x.stored_values(), 0);
    }
}
