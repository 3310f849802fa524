//! `filter_cells` and `filter_genes` (scanpy's `pp.filter_cells` / `pp.filter_genes`).
//!
//! `filter_cells` writes `obs['n_genes']` (or `obs['n_counts']`) and keeps the passing cells;
//! `filter_genes` writes `var['n_cells']` (or `var['n_counts']`) and keeps the passing genes.

use super::kernel_error;
use super::step::{
    no_budget_check, no_device_bytes, no_input_check, OnGenerated, Phase, Step, StepEnv,
};
use crate::steps::{GeneratedPass, PipelineConfig};
use crate::{AnnData, Error, Result};
use sc_kernels::filter::{CellFilter, FilterResult, GeneFilter};

/// The pipeline's row of `filter_cells(min_genes=...)`.
pub(crate) const FILTER_CELLS: Step = Step {
    name: "filter_cells",
    phase: Phase::PerCell,
    enabled: |c| c.min_genes.is_some(),
    run: run_filter_cells,
    generated: Some(OnGenerated {
        name: "filter_cells",
        run: generated_filter_cells,
    }),
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The pipeline's row of `filter_genes(min_cells=...)`.
pub(crate) const FILTER_GENES: Step = Step {
    name: "filter_genes",
    phase: Phase::PerCell,
    enabled: |c| c.min_cells.is_some(),
    run: run_filter_genes,
    generated: Some(OnGenerated {
        name: "filter_genes",
        run: generated_filter_genes,
    }),
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

fn min_genes(env: &StepEnv<'_>) -> u64 {
    env.config
        .min_genes
        .expect("the row runs only with min_genes")
}

/// filter_cells' filter on a run whose X is never held (`None`: the step does not run).
pub(crate) fn generated_cell_filter(config: &PipelineConfig) -> Option<CellFilter> {
    config.min_genes.map(CellFilter::MinGenes)
}

/// filter_genes' filter on a run whose X is never held (`None`: the step does not run).
pub(crate) fn generated_gene_filter(config: &PipelineConfig) -> Option<GeneFilter> {
    config.min_cells.map(GeneFilter::MinCells)
}

fn min_cells(env: &StepEnv<'_>) -> u64 {
    env.config
        .min_cells
        .expect("the row runs only with min_cells")
}

fn run_filter_cells(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let min_genes = min_genes(env);
    keep_before_filter(a, env);
    let removed = filter_cells(a, CellFilter::MinGenes(min_genes))?;
    // A split run's rank holds only its block: the steps after it judge the whole.
    if a.comm().size() == 1 {
        kept_enough(
            "filter_cells",
            "min_genes",
            min_genes,
            a.n_obs(),
            removed,
            "cell",
            "gene",
        )?;
    }
    Ok(format!("min_genes={min_genes}: {removed} cells removed"))
}

fn run_filter_genes(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let min_cells = min_cells(env);
    let removed = filter_genes(a, GeneFilter::MinCells(min_cells))?;
    kept_enough(
        "filter_genes",
        "min_cells",
        min_cells,
        a.n_vars(),
        removed,
        "gene",
        "cell",
    )?;
    Ok(format!("min_cells={min_cells}: {removed} genes removed"))
}

fn generated_filter_cells(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let min_genes = min_genes(env);
    keep_before_filter(a, env);
    let filter = generated_cell_filter(env.config).expect("the row runs only with min_genes");
    // calculate_qc_metrics counted the same genes on the same counts: no pass of its own.
    let counted = match pass.genes_per_cell.take() {
        Some(genes) if pass.chain.is_identity() && genes.len() == a.n_obs() => {
            sc_kernels::filter::filter_cells_by_genes(filter, &genes)
        }
        _ => None,
    };
    let taken = match counted {
        Some(_) => None,
        None => (pass.ahead.as_mut()).and_then(|ahead| ahead.cell_filter(&pass.chain, filter)),
    };
    let (result, how) = match (counted, taken) {
        (Some(r), _) => (r, " (from calculate_qc_metrics' n_genes_by_counts)"),
        (None, Some(r)) => (r, " (counted in calculate_qc_metrics' pass)"),
        (None, None) => (
            sc_kernels::filter::filter_cells_blocks(&pass.ctx, &pass.rows(), filter),
            "",
        ),
    };
    let result = result.map_err(kernel_error("filter_cells"))?;
    let keep = result.keep.clone();
    let removed = keep_cells(a, result)?;
    pass.chain.keep_cells = Some(keep);
    Ok(format!(
        "min_genes={min_genes}: {removed} cells removed{how}"
    ))
}

fn generated_filter_genes(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let min_cells = min_cells(env);
    let filter = generated_gene_filter(env.config).expect("the row runs only with min_cells");
    let taken = (pass.ahead.as_mut()).and_then(|ahead| ahead.gene_filter(&pass.chain, filter));
    let how = match taken {
        Some(_) => " (counted in calculate_qc_metrics' pass)",
        None => "",
    };
    let result = taken
        .unwrap_or_else(|| sc_kernels::filter::filter_genes_blocks(&pass.ctx, &pass.rows(), filter))
        .map_err(kernel_error("filter_genes"))?;
    let keep = result.keep.clone();
    let removed = keep_genes(a, result)?;
    // Every gene kept: no selection left for the blocks to make.
    pass.chain.keep_genes = (removed > 0).then_some(keep);
    Ok(format!(
        "min_cells={min_cells}: {removed} genes removed{how}"
    ))
}

/// Keeps aside, for every cell, the `obs` columns the run asks for
/// (`PipelineConfig::keep_before_filter`, for the QC plots) before the filter removes cells;
/// columns `obs` lacks are left out.
fn keep_before_filter(a: &mut AnnData, env: &StepEnv<'_>) {
    let names = &env.config.keep_before_filter;
    if names.is_empty() {
        return;
    }
    let mut kept = crate::anndata::DataFrame::with_rows_of(&a.obs);
    for name in names {
        if let Some(c) = a.obs.column(name) {
            kept.set(name.clone(), c.clone())
                .expect("a column of obs has one value per cell");
        }
    }
    a.obs_before_filter = Some(kept);
}

/// Refuses a filter (`step`, parameter `param` = `min`) that kept fewer than two `item`s (each
/// needing counts in `min` `other`s), naming it and its flag: said there, where the cause is
/// known, instead of by a later step that only sees too few.
fn kept_enough(
    step: &'static str,
    param: &str,
    min: u64,
    kept: usize,
    removed: usize,
    item: &str,
    other: &str,
) -> Result<()> {
    if kept >= 2 {
        return Ok(());
    }
    Err(Error::param(
        step,
        format!(
            "{param}={min} keeps {kept} of {} {item}s (a {item} needs counts in {min} {other}s); \
             lower it (--{})",
            kept + removed,
            param.replace('_', "-")
        ),
    ))
}

/// Keeps the cells that pass `filter`; returns how many were removed.
pub fn filter_cells(adata: &mut AnnData, filter: CellFilter) -> Result<usize> {
    let result = if let Some((ctx, x, block)) = super::streamed_csr(adata) {
        sc_kernels::filter::filter_cells_streamed(&ctx, x, filter, block)
    } else if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::filter::filter_cells_gpu(&ctx, x, filter)
    } else {
        sc_kernels::filter::filter_cells(adata.x.to_csr()?.as_ref(), filter)
    }
    .map_err(kernel_error("filter_cells"))?;
    keep_cells(adata, result)
}

/// Writes the filter's column into `obs` and keeps the passing cells; returns how many were
/// removed.
fn keep_cells(adata: &mut AnnData, result: FilterResult) -> Result<usize> {
    let removed = result.keep.len() - result.n_kept();
    adata.obs.set_values(result.name, result.values.into())?;
    adata.select_obs(&result.keep)?;
    Ok(removed)
}

/// Keeps the genes that pass `filter`; returns how many were removed.
pub fn filter_genes(adata: &mut AnnData, filter: GeneFilter) -> Result<usize> {
    let result = if let Some((ctx, x, block)) = super::streamed_csr(adata) {
        sc_kernels::filter::filter_genes_streamed(&ctx, x, filter, block)
    } else if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::filter::filter_genes_gpu_across(&ctx, x, filter, adata.comm())
    } else {
        sc_kernels::filter::filter_genes_across(adata.x.to_csr()?.as_ref(), filter, adata.comm())
    }
    .map_err(kernel_error("filter_genes"))?;
    keep_genes(adata, result)
}

/// Writes the filter's column into `var` and keeps the passing genes; returns how many were
/// removed.
fn keep_genes(adata: &mut AnnData, result: FilterResult) -> Result<usize> {
    let removed = result.keep.len() - result.n_kept();
    adata.var.set_values(result.name, result.values.into())?;
    adata.select_var(&result.keep)?;
    Ok(removed)
}
