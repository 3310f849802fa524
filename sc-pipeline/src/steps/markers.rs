//! `rank_genes_groups` (scanpy's `tl.rank_genes_groups`, reference `'rest'`): the marker genes
//! of each group of cells, by a t-test or the Wilcoxon rank-sum test.
//!
//! Reads `.raw` (log-normalized, every filtered gene) when the data has one, else X, and the
//! groups from `obs[groupby]` (leiden's column by default). Writes
//! `uns['rank_genes_groups']` in scanpy's layout: `params` (`groupby`, `reference`, `method`,
//! `use_raw`, `corr_method`) and the record arrays `names`, `scores`, `logfoldchanges`, `pvals`,
//! `pvals_adj` (one field per group, in the groups' order, the top `n_genes` rows), which
//! `sc.get.rank_genes_groups_df` and `sc.pl.rank_genes_groups` read as scanpy's own.
//!
//! On the run's first GPU when it has one (`sc_kernels::rank_genes::rank_genes_groups_gpu`;
//! `.raw` used where it lies on that GPU, else copied there), else on the CPU. The GPU's Wilcoxon
//! scores and p-values are the CPU's bit for bit; its fold changes and t-tests agree to ~1e-12
//! (exact fixed-point sums against the CPU's f64 sums). When the GPU lacks the memory for the
//! matrix and its sort, the step runs on the CPU and says so.

use super::generated_blocks::{Chain, GeneratedPass};
use super::step::{no_budget_check, OnGenerated, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{in_category_order, kernel_error, markers_matrix, obs_labels};
use crate::anndata::{block_parts, stack_csr_on, ArrayData, BlockParts, DeviceData, Matrix, Value};
use crate::steps::{MarkerOptions, PipelineConfig};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::{radix_sort, DeviceCsr, GpuContext};
use sc_kernels::rank_genes::{GroupMarkers, RankGenesParams, CHUNK_KEYS};
use sc_kernels::{CsrMatrix, KernelError};
use std::sync::Arc;

const STEP: &str = "rank_genes_groups";

/// The pipeline's row: by `--groupby` (default: leiden's column), on `.raw`.
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::CellGraph,
    enabled: |c| c.markers_groupby().is_some(),
    run: |a, env: &StepEnv<'_>| {
        let (m, groupby) = settings(env);
        let gpu = env.gpus.first();
        if let Some(lr) = &m.logreg {
            let (on, outcome) = super::logreg::rank_genes_groups_logreg_in(
                a,
                &groupby,
                lr,
                m.params.n_genes,
                env.raw,
                gpu.map(|g| g.as_ref()),
            )?;
            return Ok(format!(
                "logreg by '{groupby}', on {on}, {}",
                outcome.describe(lr)
            ));
        }
        let r = rank_genes_groups_in(a, &groupby, &m.params, env.raw, gpu)?;
        Ok(format!(
            "{} by '{groupby}' ({} groups vs rest), on {}, on the {}",
            m.params.method, r.n_groups, r.on, r.device
        ))
    },
    generated: Some(OnGenerated {
        name: STEP,
        run: run_generated,
    }),
    device_bytes,
    kernels: &sc_kernels::rank_genes::KERNELS,
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// `.raw` copied to the GPU (as many values as X's counts, 8 bytes each with their gene, and
/// the row offsets), the sort's keys and scratch for a chunk of values, and the per-group sums
/// (taking up to 64 groups).
fn device_bytes(s: &Sizes, _: &PipelineConfig) -> StepBytes {
    let keys = s.nnz.min(CHUNK_KEYS);
    StepBytes {
        kept: 0,
        transient: s.nnz as u64 * 8
            + (s.n_obs as u64 + 1) * 8
            + keys as u64 * 8
            + radix_sort::scratch_bytes(keys)
            + 64 * 4 * 8 * s.n_vars as u64,
    }
}

/// What [`rank_genes_groups_in`] did.
pub(crate) struct Ranked {
    pub n_groups: usize,
    /// The matrix: `.raw` or X.
    pub on: &'static str,
    /// Where: the GPU, or the CPU (and why, when a GPU was there).
    pub device: &'static str,
}

/// A `--groupby` column that no clustering step of the run makes must be in obs before any
/// step runs.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let Some(groupby) = config.markers.as_ref().and_then(|m| m.groupby.as_ref()) else {
        return Ok(());
    };
    if config.makes_obs_column(groupby) {
        return Ok(());
    }
    let (_, groups) = obs_labels(adata, STEP, "--groupby", groupby)?;
    if groups.len() < 2 {
        return Err(Error::invalid(
            format!("obs['{groupby}']"),
            format!(
                "has {} group(s); marker genes need at least 2",
                groups.len()
            ),
        ));
    }
    Ok(())
}

/// Ranks the genes of each group of `obs[groupby]` against the rest (scanpy's
/// `tl.rank_genes_groups`), on `.raw` when `adata` has one, else on X.
pub fn rank_genes_groups(
    adata: &mut AnnData,
    groupby: &str,
    params: &RankGenesParams,
) -> Result<()> {
    let gpu = super::x_gpu(adata);
    rank_genes_groups_on(adata, groupby, params, gpu.as_ref())
}

/// [`rank_genes_groups`] on `gpu` (none: the CPU).
pub fn rank_genes_groups_on(
    adata: &mut AnnData,
    groupby: &str,
    params: &RankGenesParams,
    gpu: Option<&Arc<GpuContext>>,
) -> Result<()> {
    rank_genes_groups_in(adata, groupby, params, None, gpu).map(|_| ())
}

/// [`rank_genes_groups`] with `.raw` held apart from `adata` (while the run writes it), on
/// `gpu` when given.
pub(crate) fn rank_genes_groups_in(
    adata: &mut AnnData,
    groupby: &str,
    params: &RankGenesParams,
    raw_apart: Option<&crate::anndata::Raw>,
    gpu: Option<&Arc<GpuContext>>,
) -> Result<Ranked> {
    let (codes, groups) = obs_labels(adata, STEP, "groupby", groupby)?;
    let (codes, groups) = in_category_order(adata, groupby, codes, groups);
    let (value, r) = markers_record(adata, groupby, &codes, &groups, params, raw_apart, gpu)?;
    adata.uns.insert("rank_genes_groups".into(), value);
    Ok(r)
}

/// The markers of each group of `codes` in `x`: on `gpu` when given and its memory suffices,
/// else on the CPU. Returns them and where they were computed.
fn markers_of(
    x: &Matrix,
    codes: &[u32],
    n_groups: usize,
    params: &RankGenesParams,
    gpu: Option<&Arc<GpuContext>>,
) -> std::result::Result<(Vec<GroupMarkers>, &'static str), KernelError> {
    let host = |x: &Matrix| -> std::result::Result<_, KernelError> {
        let csr = x
            .to_csr()
            .map_err(|e| KernelError::Gpu(format!("reading the matrix: {e}")))?;
        sc_kernels::rank_genes::rank_genes_groups(&csr, codes, n_groups, params)
    };
    let Some(ctx) = gpu else {
        return Ok((host(x)?, "CPU"));
    };
    let on_gpu = |dx: &DeviceCsr| {
        sc_kernels::rank_genes::rank_genes_groups_gpu(ctx, dx, codes, n_groups, params)
    };
    let upload_and_rank = |x: &Matrix| {
        let csr: std::borrow::Cow<'_, CsrMatrix<f32>> = x
            .to_csr()
            .map_err(|e| KernelError::Gpu(format!("reading the matrix: {e}")))?;
        DeviceCsr::upload(ctx, &csr).and_then(|dx| on_gpu(&dx))
    };
    let result = match x {
        // Already there: no copy.
        Matrix::Device(d) if Arc::ptr_eq(&d.ctx, ctx) && matches!(d.data, DeviceData::Csr(_)) => {
            let DeviceData::Csr(dx) = &d.data else {
                unreachable!("matched as CSR")
            };
            on_gpu(dx)
        }
        // Streamed: the matrix does not fit the GPU.
        Matrix::Device(d) if matches!(d.data, DeviceData::StreamedCsr(_)) => {
            return Ok((host(x)?, "CPU (the matrix is streamed)"));
        }
        // Blocks of rows on several GPUs (a split run's `.raw`): stacked on this one, device
        // to device.
        Matrix::Device(d) if matches!(d.data, DeviceData::Rows(_)) => {
            match block_parts(&d.blocks().iter().collect::<Vec<_>>()) {
                Some(BlockParts::Csr(parts)) => {
                    stack_csr_on(ctx, &parts).and_then(|dx| on_gpu(&dx))
                }
                _ => upload_and_rank(x),
            }
        }
        _ => upload_and_rank(x),
    };
    match result {
        Ok(m) => Ok((m, "GPU")),
        Err(KernelError::Memory(_)) => Ok((host(x)?, "CPU (too little GPU memory)")),
        Err(e) => Err(e),
    }
}

/// The test's results as scanpy's `uns['rank_genes_groups']`, and what they were computed on.
fn markers_record(
    adata: &AnnData,
    groupby: &str,
    codes: &[u32],
    groups: &[String],
    params: &RankGenesParams,
    raw_apart: Option<&crate::anndata::Raw>,
    gpu: Option<&Arc<GpuContext>>,
) -> Result<(Value, Ranked)> {
    let (x, genes, on, use_raw) = markers_matrix(adata, raw_apart);
    let (markers, device) =
        markers_of(x, codes, groups.len(), params, gpu).map_err(|e| match e {
            KernelError::Unsupported(m) => Error::invalid(format!("obs['{groupby}']"), m),
            e => kernel_error(STEP)(e),
        })?;
    let record = |f: &dyn Fn(&GroupMarkers) -> ArrayData| {
        Value::Records(groups.iter().cloned().zip(markers.iter().map(f)).collect())
    };
    let value = Value::dict([
        (
            "params",
            Value::dict([
                ("groupby", Value::str(groupby)),
                ("reference", Value::str("rest")),
                ("method", Value::str(params.method.to_string())),
                ("use_raw", Value::bool(use_raw)),
                ("layer", Value::Null),
                ("corr_method", Value::str("benjamini-hochberg")),
            ]),
        ),
        (
            "names",
            record(&|m| {
                ArrayData::Str(m.genes.iter().map(|&g| genes[g as usize].clone()).collect())
            }),
        ),
        ("scores", record(&|m| ArrayData::F32(m.scores.clone()))),
        (
            "logfoldchanges",
            record(&|m| ArrayData::F32(m.logfoldchanges.clone())),
        ),
        ("pvals", record(&|m| ArrayData::F64(m.pvals.clone()))),
        (
            "pvals_adj",
            record(&|m| ArrayData::F64(m.pvals_adj.clone())),
        ),
    ]);
    let ranked = Ranked {
        n_groups: groups.len(),
        on,
        device,
    };
    Ok((value, ranked))
}

/// The row's options and grouping (the row runs only when both are set).
fn settings<'a>(env: &StepEnv<'a>) -> (&'a MarkerOptions, String) {
    let m = env
        .config
        .markers
        .as_ref()
        .expect("the row runs only with markers");
    let groupby = env
        .config
        .markers_groupby()
        .expect("the row runs only with a grouping");
    (m, groupby)
}

/// The row's form on a run that holds no X (the generated demo, an input larger than the host
/// memory): [`markers_on_subset`] by the row's grouping. The runner runs it after the other
/// cell-graph steps.
fn run_generated(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let (m, groupby) = settings(env);
    markers_on_subset(a, pass, &groupby, &m.params)
}

/// Cells the generated demo ranks its marker genes on, at most.
const MARKER_CELLS: usize = 200_000;

/// rank_genes_groups of a run that holds no X on a stated subset: every `s`-th cell (at most
/// [`MARKER_CELLS`]), its row made again by the source as `.raw` would hold it (normalized and log1p,
/// every gene filter_genes kept: the pass's genes selected), grouped by `groupby` of `adata`. The
/// result goes to `adata.uns` as on a whole run; the note says which cells.
fn markers_on_subset(
    adata: &mut AnnData,
    pass: &GeneratedPass<'_>,
    groupby: &str,
    params: &sc_kernels::rank_genes::RankGenesParams,
) -> Result<String> {
    let again = pass.source.again();
    use sc_kernels::gpu::streamed::RowBlocks;
    let ctx = &pass.ctx;
    let raw = GeneratedPass {
        ctx: ctx.clone(),
        source: pass.source,
        genes: pass.genes,
        cells: pass.cells,
        chain: Chain {
            keep_hvg: None,
            ..pass.chain.clone()
        },
        scaler: None,
        genes_per_cell: None,
        ahead: None,
    };
    let rows = raw.rows();
    let n = rows.n_rows();
    let stride = n.div_ceil(MARKER_CELLS).max(1);
    let keep: Vec<bool> = (0..n).map(|i| i % stride == 0).collect();
    let mut parts = Vec::new();
    for (b, range) in rows.ranges().iter().enumerate() {
        let block_keep = &keep[range.clone()];
        if !block_keep.contains(&true) {
            continue;
        }
        let x = rows.make_picked(ctx, b, block_keep).map_err(gpu_error)?;
        parts.push(Matrix::Sparse(x.download(ctx).map_err(gpu_error)?));
    }
    let x = Matrix::stack_rows(&parts.iter().collect::<Vec<_>>())?;
    drop(parts);
    let mut sub = AnnData::new(x);
    sub.obs = adata.obs.select_rows(&keep);
    sub.var = match &raw.chain.keep_genes {
        Some(k) => pass.genes.select_rows(k),
        None => pass.genes.clone(),
    };
    let cells = sub.n_obs();
    let r = rank_genes_groups_in(&mut sub, groupby, params, None, Some(ctx))?;
    let ranked = sub
        .uns
        .remove("rank_genes_groups")
        .expect("rank_genes_groups records its result");
    adata.uns.insert("rank_genes_groups".into(), ranked);
    let which = match stride {
        1 => format!("every cell ({cells})"),
        s => format!("a subset: every {s}th cell ({cells} of {n})"),
    };
    Ok(format!(
        "{} by '{groupby}' ({} groups vs rest), on {which}, {again} as .raw would hold it \
         (log-normalized, {} genes), on the {}",
        params.method,
        r.n_groups,
        sub.n_vars(),
        r.device
    ))
}

/// The step a GPU error of the marker genes on a run that holds no X is reported under: that
/// run's.
const GENERATED: &str = "generated demo";

fn gpu_error(e: sc_kernels::KernelError) -> Error {
    Error::Gpu {
        step: GENERATED,
        problem: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_steps_name_what_they_miss() {
        let p = crate::synthetic::SyntheticParams::new(300, 400, 1);
        let mut a = crate::synthetic::generate(&p).unwrap();
        let e = crate::steps::leiden(&mut a, &Default::default(), "leiden")
            .unwrap_err()
            .to_string();
        assert!(e.contains("run neighbors first"), "{e}");
        let e = crate::steps::umap(&mut a, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("run neighbors first"), "{e}");
        // A group of one cell: scanpy's rule, named.
        let n = a.n_obs();
        let labels: Vec<String> = (0..n)
            .map(|i| {
                if i == 0 {
                    "alone"
                } else if i % 2 == 0 {
                    "a"
                } else {
                    "b"
                }
                .to_string()
            })
            .collect();
        a.obs.set_values("kind", ArrayData::Str(labels)).unwrap();
        let e = rank_genes_groups(&mut a, "kind", &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind") && e.contains("1"), "{e}");
    }
}
