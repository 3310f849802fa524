//! `scrublet` (scanpy's `pp.scrublet`): each cell's doublet score and call, from X's raw counts,
//! on each batch of `batch_key` apart (`sc_kernels::scrublet`). Writes what scanpy writes:
//! - `obs['doublet_score']` (float64; NaN for a cell scrublet's own filter dropped: fewer than 3
//!   genes, counting only genes in at least 3 cells of its batch) and
//!   `obs['predicted_doublet']` (bool; false where no threshold was found or the cell was not
//!   scored);
//! - `uns['scrublet']`: `doublet_scores_sim`, `doublet_parents` (rows among the batch's scored
//!   cells), `parameters` (`expected_doublet_rate`, `sim_doublet_ratio`, `n_neighbors`,
//!   `random_state`) and `threshold` (and, when asked, `doublet_neighbor_parents`: each cell's
//!   doublet neighbours' parents, ragged as `values` and `offsets`, which the Python side
//!   turns into scanpy's list of arrays); with a batch key, one such dict per batch under
//!   `batches`, and `batched_by`.
//!
//! X is only read (where it lies: a CSR X on the run's GPU is read there, each batch's rows
//! selected on the device). With a GPU in the run, the preparation (filters, normalization,
//! highly variable genes, embedding: scanpy's default settings) and the neighbour counts run
//! on it (`sc_kernels::scrublet`), the rest on the host.

use super::kernel_error;
use super::step::{no_budget_check, no_device_bytes, OnGenerated, Phase, Step, StepEnv};
use crate::anndata::{ArrayData, DenseArray, DeviceData, DeviceMatrix, Matrix, Value};
use crate::steps::{PipelineConfig, ScrubletOptions};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::compact::select_rows;
use sc_kernels::gpu::GpuContext;
use sc_kernels::scrublet::{
    call_doublets, scrublet as scrublet_batch, scrublet_device, simulate_doublets, Doublets,
    ScrubletParams,
};
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;

const STEP: &str = "scrublet";

/// The pipeline's row: `scrublet(batch_key=--scrublet-batch-key)` on the filtered counts,
/// before normalize_total, as scanpy's clustering tutorial runs it (off by default here: a run
/// opts in with `--scrublet`).
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::PerCell,
    enabled: |c| c.scrublet.is_some(),
    run: run_step,
    generated: Some(OnGenerated {
        name: STEP,
        run: |_, _, _| Err(Error::param(STEP, GENERATED)),
    }),
    device_bytes: no_device_bytes,
    kernels: &sc_kernels::scrublet::KERNELS,
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// Why the generated demo refuses the step (`run::generated` refuses it before any step runs).
pub(crate) const GENERATED: &str = "scrublet needs every cell's counts at once, which the \
    generated demo never holds: run it on a file";

/// The batch key must be an obs column of the input, with no batch of fewer than 2 cells.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    match &config.scrublet {
        Some(ScrubletOptions {
            batch_key: Some(key),
            ..
        }) => batches(adata, key, "--scrublet-batch-key").map(|_| ()),
        _ => Ok(()),
    }
}

/// The cells of each batch of `obs[key]` (named by `role` in the errors), in order; a batch of
/// fewer than 2 cells is refused before any batch is scored.
fn batches(adata: &AnnData, key: &str, role: &str) -> Result<Vec<(String, Vec<usize>)>> {
    let (codes, names) = super::obs_labels(adata, STEP, role, key)?;
    let (cells, starts) = sc_kernels::group_by::group_by_key(&codes, names.len());
    let groups: Vec<(String, Vec<usize>)> = names
        .into_iter()
        .enumerate()
        .map(|(b, name)| {
            let rows = cells[starts[b]..starts[b + 1]].iter().map(|&i| i as usize);
            (name, rows.collect())
        })
        .collect();
    match groups.iter().find(|(_, rows)| rows.len() < 2) {
        Some((name, rows)) => Err(Error::param(
            STEP,
            format!(
                "batch '{name}' of obs['{key}'] has {} cell(s); scrublet needs at least 2 a batch",
                rows.len()
            ),
        )),
        None => Ok(groups),
    }
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    if super::comm_of(a).size() > 1 {
        return Err(Error::param(
            STEP,
            "scrublet runs on one device: a batch's cells split across ranks would be scored \
             apart (run without splitting the cells)",
        ));
    }
    let options = env.config.scrublet.as_ref().expect("enabled");
    let s = scrublet(a, options, env.gpus.first().map(|g| g.as_ref()))?;
    let mut note = format!("{} of {} cells called doublets", s.predicted, s.scored);
    if !s.without_threshold.is_empty() {
        note.push_str(&format!(
            "; no threshold found in {} batch(es), their cells not called",
            s.without_threshold.len()
        ));
    }
    Ok(note)
}

/// What the call found, for a summary.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrubletSummary {
    /// Cells called doublets.
    pub predicted: usize,
    /// Cells scored.
    pub scored: usize,
    /// Batches where no threshold was found (their cells are not called).
    pub without_threshold: Vec<String>,
}

/// Scores and calls the doublets of X's raw counts, the neighbour counts on `gpu` when given;
/// X is left as it was.
pub fn scrublet(
    adata: &mut AnnData,
    options: &ScrubletOptions,
    gpu: Option<&GpuContext>,
) -> Result<ScrubletSummary> {
    let groups = match &options.batch_key {
        Some(key) => batches(adata, key, "batch_key")?,
        None => vec![(String::new(), (0..adata.n_obs()).collect())],
    };
    // X kept on the run's GPU is read there; any other X on the host.
    let counts = match (&adata.x, gpu) {
        (
            Matrix::Device(DeviceMatrix {
                data: DeviceData::Csr(x),
                ..
            }),
            Some(ctx),
        ) => Counts::Device(ctx, x),
        _ => Counts::Host(adata.x.to_csr()?),
    };
    let n = adata.n_obs();
    let mut score = vec![f64::NAN; n];
    let mut predicted = vec![false; n];
    let mut summary = ScrubletSummary {
        predicted: 0,
        scored: 0,
        without_threshold: Vec::new(),
    };
    let mut records = BTreeMap::new();
    for (name, rows) in &groups {
        // One batch of every cell: X itself, not a copy.
        let whole = options.batch_key.is_none();
        let found = match &counts {
            Counts::Device(ctx, x) if whole => scrublet_device(ctx, x, &options.params),
            Counts::Device(ctx, x) => select_rows(ctx, x, &row_mask(n, rows))
                .and_then(|batch| scrublet_device(ctx, &batch, &options.params)),
            Counts::Host(x) if whole => scrublet_batch(x, &options.params, gpu),
            Counts::Host(x) => scrublet_batch(&x.take_rows(rows), &options.params, gpu),
        }
        .map_err(|e| {
            let e = kernel_error(STEP)(e);
            match &options.batch_key {
                Some(key) => Error::param(STEP, format!("batch '{name}' of obs['{key}']: {e}")),
                None => e,
            }
        })?;
        let scored: Vec<usize> = rows
            .iter()
            .zip(&found.scored)
            .filter(|(_, &s)| s)
            .map(|(&r, _)| r)
            .collect();
        for (j, &r) in scored.iter().enumerate() {
            score[r] = found.scores.obs[j];
            if let Some(call) = &found.call {
                predicted[r] = call.predicted[j];
            }
        }
        summary.scored += scored.len();
        if found.call.is_none() {
            summary.without_threshold.push(name.clone());
        }
        records.insert(name.clone(), record(&found, &options.params)?);
    }
    let uns = match &options.batch_key {
        None => records.into_values().next().expect("one group"),
        Some(key) => Value::dict([
            ("batches", Value::Dict(records)),
            ("batched_by", Value::str(key.clone())),
        ]),
    };
    write(adata, score, predicted, uns, summary)
}

/// X's counts where scrublet reads them.
enum Counts<'a> {
    /// On the run's GPU.
    Device(&'a GpuContext, &'a sc_kernels::gpu::DeviceCsr),
    Host(std::borrow::Cow<'a, CsrMatrix<f32>>),
}

/// The `n` entries of a mask true at `rows`.
fn row_mask(n: usize, rows: &[usize]) -> Vec<bool> {
    let mut mask = vec![false; n];
    for &r in rows {
        mask[r] = true;
    }
    mask
}

/// Scrublet's classifier on X and simulated doublets `sim` (both already prepared: filtered,
/// normalized, over the same genes), as scanpy's `scrublet(adata, adata_sim=...)`: every cell
/// is scored. `parents`: the doublets' parents (`adata_sim.obsm['doublet_parents']`).
pub fn scrublet_on_simulated(
    adata: &mut AnnData,
    sim: &CsrMatrix<f32>,
    parents: Vec<[u32; 2]>,
    params: &ScrubletParams,
    gpu: Option<&GpuContext>,
) -> Result<ScrubletSummary> {
    let obs = adata.x.to_csr()?;
    let found = call_doublets(&obs, sim, parents, params, gpu).map_err(kernel_error(STEP))?;
    drop(obs);
    let predicted = match &found.call {
        Some(c) => c.predicted.clone(),
        None => vec![false; found.scores.obs.len()],
    };
    let summary = ScrubletSummary {
        predicted: 0,
        scored: found.scores.obs.len(),
        without_threshold: match found.call {
            None => vec![String::new()],
            Some(_) => Vec::new(),
        },
    };
    let uns = record(&found, params)?;
    write(adata, found.scores.obs, predicted, uns, summary)
}

/// scanpy's `scrublet_simulate_doublets`: an AnnData of `int(n_obs * ratio)` doublets, each the
/// counts of two of X's cells added (X holds raw counts), with `obs['n_counts']`,
/// `obsm['doublet_parents']` and `uns['scrublet']['parameters']['sim_doublet_ratio']`.
pub fn scrublet_simulate_doublets(
    adata: &AnnData,
    ratio: f64,
    umi_subsampling: f64,
    seed: u64,
) -> Result<AnnData> {
    let counts = adata.x.to_csr()?;
    let sim = simulate_doublets(&counts, ratio, umi_subsampling, seed)
        .map_err(kernel_error("scrublet_simulate_doublets"))?;
    let n_sim = sim.parents.len();
    let mut out = AnnData::new(Matrix::Sparse(sim.counts));
    out.obs.set_values("n_counts", ArrayData::F64(sim.totals))?;
    let parents = sim
        .parents
        .iter()
        .flat_map(|&[a, b]| [a as i64, b as i64])
        .collect();
    out.obsm.insert(
        "doublet_parents".into(),
        DenseArray::new(vec![n_sim, 2], ArrayData::I64(parents))?,
    );
    out.uns.insert(
        "scrublet".into(),
        Value::dict([(
            "parameters",
            Value::dict([("sim_doublet_ratio", Value::float(ratio))]),
        )]),
    );
    Ok(out)
}

/// Writes the scores, the calls and `uns['scrublet']`.
fn write(
    adata: &mut AnnData,
    score: Vec<f64>,
    predicted: Vec<bool>,
    uns: Value,
    mut summary: ScrubletSummary,
) -> Result<ScrubletSummary> {
    summary.predicted = predicted.iter().filter(|&&p| p).count();
    adata
        .obs
        .set_values("doublet_score", ArrayData::F64(score))?;
    adata
        .obs
        .set_values("predicted_doublet", ArrayData::Bool(predicted))?;
    adata.uns.insert("scrublet".into(), uns);
    Ok(summary)
}

/// One batch's `uns['scrublet']`, as scanpy writes it.
fn record(found: &Doublets, p: &ScrubletParams) -> Result<Value> {
    let parents: Vec<i64> = found
        .parents
        .iter()
        .flat_map(|&[a, b]| [a as i64, b as i64])
        .collect();
    let mut entries = vec![
        (
            "doublet_scores_sim",
            Value::vector(ArrayData::F64(found.scores.sim.clone())),
        ),
        (
            "doublet_parents",
            Value::Array(DenseArray::new(
                vec![found.parents.len(), 2],
                ArrayData::I64(parents),
            )?),
        ),
        (
            "parameters",
            Value::dict([
                (
                    "expected_doublet_rate",
                    Value::float(p.expected_doublet_rate),
                ),
                ("sim_doublet_ratio", Value::float(p.sim_doublet_ratio)),
                ("n_neighbors", Value::int(found.n_neighbors as i64)),
                ("random_state", Value::int(p.random_state as i64)),
            ]),
        ),
    ];
    if let Some(call) = &found.call {
        entries.push(("threshold", Value::float(call.threshold)));
    }
    if let Some(lists) = &found.neighbor_parents {
        // Ragged: the parents one cell after another, and where each cell's start.
        let mut offsets = vec![0i64];
        let mut values = Vec::new();
        for l in lists {
            values.extend(l.iter().map(|&p| p as i64));
            offsets.push(values.len() as i64);
        }
        entries.push((
            "doublet_neighbor_parents",
            Value::dict([
                ("values", Value::vector(ArrayData::I64(values))),
                ("offsets", Value::vector(ArrayData::I64(offsets))),
            ]),
        ));
    }
    Ok(Value::dict(entries))
}
