//! `highly_variable_genes` (scanpy's `pp.highly_variable_genes`), flavours seurat, cell_ranger
//! and seurat_v3, optionally per batch (`batch_key`).
//!
//! Writes into `var` the columns scanpy writes for the flavour (`highly_variable`, `means`,
//! `dispersions`, `dispersions_norm`; seurat_v3: `variances`, `variances_norm`,
//! `highly_variable_rank`; with a batch key also `highly_variable_nbatches` and
//! `highly_variable_intersection`), and `uns['hvg'] = {'flavor': ...}`.

use super::kernel_error;
use super::step::{
    no_budget_check, no_device_bytes, no_input_check, OnGenerated, Phase, Step, StepEnv,
};
use crate::anndata::{ArrayData, Column, DeviceData, DeviceMatrix, Matrix, Value};
use crate::steps::{GeneratedPass, HvgOptions, PipelineConfig};
use crate::{AnnData, Error, Result};
use sc_kernels::hvg::{Batches, HvgParams, HvgResult};

/// The pipeline's row of a flavour that reads counts (seurat_v3): before normalize_total (its
/// results are per gene and survive normalize_total and log1p), which spares a copy of X.
pub(crate) const ON_COUNTS: Step = Step {
    enabled: |c| c.hvg.as_ref().is_some_and(|h| h.needs_counts()),
    ..ON_LOG_NORMALIZED
};

/// The pipeline's row of the flavours that read log-normalized data (after log1p).
pub(crate) const ON_LOG_NORMALIZED: Step = Step {
    name: "highly_variable_genes",
    phase: Phase::PerCell,
    enabled: |c| c.hvg.as_ref().is_some_and(|h| !h.needs_counts()),
    run: run_step,
    generated: Some(OnGenerated {
        name: "highly_variable_genes",
        run: run_generated,
    }),
    device_bytes: no_device_bytes,
    kernels: &[sc_kernels::hvg::KERNELS],
    check_input: check_batch_key,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The pipeline's row that subsets X to the highly variable genes, `.raw` frozen first
/// (log-normalized, every gene that passed the filters).
pub(crate) const SUBSET: Step = Step {
    name: "subset to HVG (raw frozen)",
    phase: Phase::PerCell,
    enabled: |c| c.hvg.is_some() && c.subset_hvg,
    run: run_subset,
    generated: Some(OnGenerated {
        name: "subset to HVG",
        run: generated_subset,
    }),
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// `--batch-key`'s column must exist and hold labels before any step runs.
fn check_batch_key(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let h = config
        .hvg
        .as_ref()
        .expect("the row runs only with HVG options");
    let Some(key) = &h.batch_key else {
        return Ok(());
    };
    super::obs_labels(adata, "highly_variable_genes", "batch_key", key).map(|_| ())
}

fn options<'a>(env: &StepEnv<'a>) -> &'a HvgOptions {
    env.config
        .hvg
        .as_ref()
        .expect("the row runs only with HVG options")
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let hvg = options(env);
    let n = highly_variable_genes(a, hvg)?;
    Ok(format!("flavor={}: {n} genes selected", hvg.flavor.name()))
}

/// On the generated demo: the highly variable genes of the blocks as the chain makes them.
fn run_generated(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let h = options(env);
    let batches = hvg_batches(a, h)?;
    let params = hvg_params(a, h);
    let known = sc_kernels::hvg::single_pass(&params)
        .and_then(|t| pass.ahead.as_ref()?.moments(&pass.chain, t));
    let result = sc_kernels::hvg::highly_variable_genes_blocks(
        &pass.ctx,
        &pass.rows(),
        &params,
        batches.as_ref(),
        Some(&a.var.index),
        known.as_ref(),
    )
    .map_err(kernel_error("highly_variable_genes"))?;
    let n = store_hvg(a, result, h)?;
    let how = match (&known, &batches) {
        (Some(_), None) => " (moments taken in calculate_qc_metrics' pass)",
        _ => "",
    };
    Ok(format!(
        "flavor={}: {n} genes selected{how}",
        h.flavor.name()
    ))
}

/// The transform of the one column pass highly_variable_genes takes on a run whose X is never
/// held, on `a` as QC sees it (`None`: the step does not run on log-normalized values, takes
/// batches, or its flavour takes more than one pass).
pub(crate) fn generated_pass(
    config: &PipelineConfig,
    a: &AnnData,
) -> Option<sc_kernels::gpu::reduce::Transform> {
    let h = config.hvg.as_ref()?;
    if h.needs_counts() || h.batch_key.is_some() {
        return None;
    }
    sc_kernels::hvg::single_pass(&hvg_params(a, h))
}

fn run_subset(a: &mut AnnData, _: &StepEnv<'_>) -> Result<String> {
    let keep = highly_variable_mask(a)?;
    let selected = keep.iter().filter(|&&k| k).count();
    if selected < 2 {
        return Err(Error::param(
            "highly_variable_genes",
            format!(
                "selected {selected} of {} genes, too few to go on with (PCA needs 2); \
                 the data may have too few cells or genes for its dispersions",
                keep.len()
            ),
        ));
    }
    a.freeze_raw_and_select_var(&keep)?;
    Ok(".raw = log-normalized, all filtered genes".to_string())
}

/// On the generated demo there is no `.raw`: X is generated, never held.
fn generated_subset(
    a: &mut AnnData,
    _: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let keep = highly_variable_mask(a)?;
    a.select_var(&keep)?;
    pass.chain.keep_hvg = Some(keep);
    Ok("no .raw (X is generated, never held)".to_string())
}

/// Annotates the highly variable genes; returns how many were selected.
pub fn highly_variable_genes(adata: &mut AnnData, options: &HvgOptions) -> Result<usize> {
    const STEP: &str = "highly_variable_genes";
    let batches = hvg_batches(adata, options)?;
    let matrix: &Matrix = match &options.layer {
        None => &adata.x,
        Some(l) => adata.layers.get(l).ok_or_else(|| Error::Missing {
            step: STEP,
            problem: format!("layer '{l}' does not exist"),
        })?,
    };
    let params = hvg_params(adata, options);
    let result = match matrix {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Csr(x),
        }) => sc_kernels::hvg::highly_variable_genes_gpu_across(
            ctx,
            x,
            &params,
            batches.as_ref(),
            Some(&adata.var.index),
            adata.comm(),
        ),
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::StreamedCsr(s),
        }) => sc_kernels::hvg::highly_variable_genes_streamed(
            ctx,
            &s.host,
            &params,
            batches.as_ref(),
            Some(&adata.var.index),
            s.block_bytes,
        ),
        _ => sc_kernels::hvg::highly_variable_genes_across(
            matrix.to_csr()?.as_ref(),
            &params,
            batches.as_ref(),
            Some(&adata.var.index),
            adata.comm(),
        ),
    }
    .map_err(kernel_error(STEP))?;
    store_hvg(adata, result, options)
}

/// Writes the result's columns into `var` and `uns['hvg']`; returns how many genes were
/// selected.
fn store_hvg(adata: &mut AnnData, result: HvgResult, options: &HvgOptions) -> Result<usize> {
    let n = result.highly_variable.iter().filter(|&&h| h).count();
    for (name, col) in result.columns {
        adata.var.set_values(name, col.into())?;
    }
    adata.uns.insert(
        "hvg".to_string(),
        Value::dict([("flavor", Value::str(options.flavor.name()))]),
    );
    Ok(n)
}

/// The batches of `options.batch_key` (`None` without one), as the HVG kernels take them.
fn hvg_batches(adata: &AnnData, options: &HvgOptions) -> Result<Option<Batches>> {
    const STEP: &str = "highly_variable_genes";
    match &options.batch_key {
        None => Ok(None),
        Some(key) => {
            let (codes, categories) = super::obs_labels(adata, STEP, "batch_key", key)?;
            Ok(Some(shared_categories(
                Batches { codes, categories },
                adata.comm(),
            )?))
        }
    }
}

/// The kernels' parameters for `options` on `adata` (the log base its `log1p` recorded).
fn hvg_params(adata: &AnnData, options: &HvgOptions) -> HvgParams {
    HvgParams {
        flavor: options.flavor,
        n_top_genes: options.n_top_genes,
        min_mean: options.cutoffs.min_mean,
        max_mean: options.cutoffs.max_mean,
        min_disp: options.cutoffs.min_disp,
        max_disp: options.cutoffs.max_disp,
        span: options.cutoffs.span,
        n_bins: options.cutoffs.n_bins,
        log1p_base: log1p_base(adata),
    }
}

/// The base recorded by a previous `log1p` (`uns['log1p']['base']`), if any.
fn log1p_base(adata: &AnnData) -> Option<f64> {
    match adata.uns.get("log1p")?.get("base")? {
        Value::Scalar(crate::anndata::Scalar::Float(b)) => Some(*b),
        Value::Scalar(crate::anndata::Scalar::Int(b)) => Some(*b as f64),
        _ => None,
    }
}

/// The `pearson_residuals` flavour (scanpy's `experimental.pp.highly_variable_genes`) on X's
/// counts: writes `var`'s `means`, `variances`, `residual_variances`, `highly_variable_rank`
/// (float32, as scanpy), with a batch key `highly_variable_nbatches` and
/// `highly_variable_intersection`, and `highly_variable`; and `uns['hvg']['flavor']`. Returns
/// how many genes were selected. Not a flavour of the command yet; computed on the host (a GPU
/// X is read back). X is only read.
pub fn highly_variable_genes_pearson_residuals(
    adata: &mut AnnData,
    theta: f64,
    clip: Option<f64>,
    n_top_genes: usize,
    batch_key: Option<&str>,
) -> Result<usize> {
    const STEP: &str = "highly_variable_genes";
    let batches = match batch_key {
        Some(key) => Some(super::obs_labels(adata, STEP, "batch_key", key)?),
        None => None,
    };
    let batches = batches.as_ref().map(|(c, n)| (c.as_slice(), n.as_slice()));
    let r = match super::device_csr(adata) {
        Some((ctx, x)) => sc_kernels::pearson::highly_variable_pearson_residuals_gpu(
            &ctx,
            x,
            theta,
            clip,
            n_top_genes,
            batches,
        ),
        None => sc_kernels::pearson::highly_variable_pearson_residuals(
            &*adata.x.to_csr()?,
            theta,
            clip,
            n_top_genes,
            batches,
        ),
    }
    .map_err(kernel_error(STEP))?;
    let selected = r.highly_variable.iter().filter(|&&h| h).count();
    let var = &mut adata.var;
    var.set_values("means", ArrayData::F64(r.means))?;
    var.set_values("variances", ArrayData::F64(r.variances))?;
    var.set_values("residual_variances", ArrayData::F64(r.residual_variances))?;
    let rank = r.highly_variable_rank.iter().map(|&v| v as f32).collect();
    var.set_values("highly_variable_rank", ArrayData::F32(rank))?;
    if batch_key.is_some() {
        var.set_values(
            "highly_variable_nbatches",
            ArrayData::I64(r.highly_variable_nbatches),
        )?;
        var.set_values(
            "highly_variable_intersection",
            ArrayData::Bool(r.highly_variable_intersection),
        )?;
    }
    var.set_values("highly_variable", ArrayData::Bool(r.highly_variable))?;
    adata.uns.insert(
        "hvg".into(),
        Value::dict([("flavor", Value::str("pearson_residuals"))]),
    );
    Ok(selected)
}

/// `var['highly_variable']` as a mask, for subsetting.
pub fn highly_variable_mask(adata: &AnnData) -> Result<Vec<bool>> {
    match adata.var.column("highly_variable") {
        Some(Column::Values(ArrayData::Bool(v))) => Ok(v.clone()),
        Some(_) => Err(Error::invalid(
            "var['highly_variable']",
            "is not a boolean column",
        )),
        None => Err(Error::Missing {
            step: "subset to highly variable genes",
            problem: "var has no 'highly_variable' column: run highly_variable_genes first".into(),
        }),
    }
}

/// The batches of one rank's cells renumbered over the categories of all ranks, in order of
/// first appearance across the ranks' blocks (the numbering a run that is not split gives).
fn shared_categories(b: Batches, comm: &dyn sc_kernels::Communicator) -> Result<Batches> {
    if comm.size() == 1 {
        return Ok(b);
    }
    // Each rank's categories as length-prefixed UTF-8.
    let mut mine = Vec::new();
    for c in &b.categories {
        mine.extend_from_slice(&(c.len() as u64).to_le_bytes());
        mine.extend_from_slice(c.as_bytes());
    }
    let parts = comm
        .all_gather_bytes(&mine)
        .map_err(kernel_error("highly_variable_genes"))?;
    let mut categories: Vec<String> = Vec::new();
    let mut lookup = std::collections::HashMap::new();
    for p in parts {
        let mut at = 0;
        while at + 8 <= p.len() {
            let len = u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes")) as usize;
            let name = String::from_utf8_lossy(&p[at + 8..at + 8 + len]).into_owned();
            at += 8 + len;
            lookup.entry(name.clone()).or_insert_with(|| {
                categories.push(name);
                categories.len() as u32 - 1
            });
        }
    }
    let codes = b
        .codes
        .iter()
        .map(|&c| lookup[&b.categories[c as usize]])
        .collect();
    Ok(Batches { codes, categories })
}
