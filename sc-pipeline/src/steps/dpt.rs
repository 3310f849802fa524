//! `dpt` (scanpy's `tl.dpt`): the diffusion pseudotime from a root cell (`sc_kernels::dpt`)
//! into `obs['dpt_pseudotime']` (f32), from `obsm['X_diffmap']`'s first `n_dcs` components,
//! their eigenvalues and the graph's connected components; with `n_branchings`, scanpy's
//! segments (`obs['dpt_groups']`, `dpt_order`, `dpt_order_indices`, `uns['dpt_changepoints']`,
//! `uns['dpt_grouptips']`). Its row (`--dpt-root CELL`, off by default) runs after diffmap from
//! the root cell named, with scanpy's 10 components (and `--dpt-branchings N` of its segments),
//! and records `uns['iroot']`. The pseudotime's distances run on the run's GPU when it has
//! one (the host's values), the branchings on the host.

use super::step::{no_budget_check, no_device_bytes, Phase, Step, StepEnv};
use super::{connectivities, first_columns, kernel_error, obsm_matrix};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::dpt::BranchingParams;
use sc_kernels::gpu::GpuContext;
use sc_kernels::graph::connected_components;

/// scanpy's `tl.dpt(n_dcs=10)`.
pub const N_DCS: usize = 10;

/// The pipeline's row: from the root cell `--dpt-root` names, on the host.
pub(crate) const ROW: Step = Step {
    name: "dpt",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_dpt,
    run: |a, env: &StepEnv<'_>| {
        let name = env
            .config
            .dpt_root
            .as_deref()
            .expect("the row runs only with a root");
        let branchings = env.config.dpt_branchings;
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let (root, n_segments) = dpt_from(a, name, branchings, gpu)?;
        let segments = match n_segments {
            Some(s) => format!(", {branchings} branchings: {s} segments"),
            None => String::new(),
        };
        Ok(format!(
            "from cell '{name}' (index {root}), {N_DCS} diffusion components{segments}, on the {}",
            if gpu.is_some() { "GPU" } else { "CPU" }
        ))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &sc_kernels::dpt::KERNELS,
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The root must be one of the input's cells.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    match config.dpt_root.as_deref() {
        Some(name) if !adata.obs.index.iter().any(|n| n == name) => Err(Error::param(
            "--dpt-root",
            format!("no cell named '{name}' in the input's obs names"),
        )),
        _ => Ok(()),
    }
}

/// scanpy's `adata.uns['iroot'] = <the cell named root>; tl.dpt(adata, n_branchings=...)`: the
/// pseudotime from the cell `root` (an obs name) over `X_diffmap`'s first [`N_DCS`] components
/// and `uns['diffmap_evals']`, and `n_branchings` of scanpy's segments (its other defaults);
/// returns the root's index and how many segments there are (with branchings). The
/// pseudotime's distances on `gpu` when given.
pub fn dpt_from(
    adata: &mut AnnData,
    root: &str,
    n_branchings: usize,
    gpu: Option<&GpuContext>,
) -> Result<(usize, Option<usize>)> {
    const STEP: &str = "dpt";
    let i = adata
        .obs
        .index
        .iter()
        .position(|n| n == root)
        .ok_or_else(|| {
            Error::param(
                "--dpt-root",
                format!("cell '{root}' is not among the cells left (filter_cells removed it?)"),
            )
        })?;
    let evals = match adata.uns.get("diffmap_evals") {
        Some(Value::Array(a)) => a.data.to_f64(),
        _ => None,
    }
    .ok_or_else(|| Error::Missing {
        step: STEP,
        problem: "uns has no 'diffmap_evals': run diffmap first".into(),
    })?;
    if evals.len() < N_DCS {
        return Err(Error::InvalidParameter {
            step: STEP,
            problem: format!(
                "n_dcs: {N_DCS}, but the diffusion map has {} components (--diffmap-comps)",
                evals.len()
            ),
        });
    }
    let evals: Vec<f32> = evals[..N_DCS].iter().map(|&v| v as f32).collect();
    let branching = BranchingParams {
        n_branchings,
        min_group_size: 0.01,
        allow_kendall_tau_shift: true,
    };
    let segments = dpt(
        adata,
        "X_diffmap",
        &evals,
        Some(i),
        (n_branchings > 0).then_some(&branching),
        gpu,
    )?;
    adata.uns.insert("iroot".into(), Value::int(i as i64));
    Ok((i, segments))
}

/// Writes `obs['dpt_pseudotime']` from `obsm[basis]` (its first `evals.len()` columns) and the
/// eigenvalues `evals`, root `root` (none: no pseudotime, as scanpy); with `branching`, the
/// segments too, and returns how many. The pseudotime's distances on `gpu` when given.
pub fn dpt(
    adata: &mut AnnData,
    basis: &str,
    evals: &[f32],
    root: Option<usize>,
    branching: Option<&BranchingParams>,
    gpu: Option<&GpuContext>,
) -> Result<Option<usize>> {
    const STEP: &str = "dpt";
    let x = obsm_matrix(adata, basis)?.ok_or_else(|| Error::Missing {
        step: STEP,
        problem: format!("obsm has no '{basis}': run diffmap first"),
    })?;
    let k = evals.len();
    if k == 0 || k > x.n_cols {
        return Err(Error::InvalidParameter {
            step: STEP,
            problem: format!("n_dcs: {k}, but '{basis}' has {} components", x.n_cols),
        });
    }
    let first = first_columns(x, k).map_err(kernel_error(STEP))?;
    let (component, _) = connected_components(connectivities(adata, STEP)?);
    let t = root
        .map(|r| match gpu {
            Some(ctx) => sc_kernels::dpt::pseudotime_gpu(ctx, &first, evals, r, &component),
            None => sc_kernels::dpt::pseudotime(&first, evals, r, &component),
        })
        .transpose()
        .map_err(kernel_error(STEP))?;
    let segments = branching
        .map(|p| sc_kernels::dpt::branchings(&first, evals, &component, root.zip(t.as_deref()), p))
        .transpose()
        .map_err(kernel_error(STEP))?;
    if let Some(t) = t {
        adata.obs.set_values("dpt_pseudotime", ArrayData::F32(t))?;
    }
    let n_segments = segments.as_ref().map(|b| b.tips.len());
    if let Some(b) = segments {
        let ints = |v: &[usize]| ArrayData::I64(v.iter().map(|&i| i as i64).collect());
        let mut place = vec![0usize; b.order.len()];
        for (p, &c) in b.order.iter().enumerate() {
            place[c] = p;
        }
        adata
            .obs
            .set("dpt_groups", super::cluster_column(&b.groups, b.tips.len()))?;
        adata.obs.set_values("dpt_order", ints(&place))?;
        adata.obs.set_values("dpt_order_indices", ints(&b.order))?;
        let changepoints = DenseArray::new(vec![b.changepoints.len()], ints(&b.changepoints))?;
        adata
            .uns
            .insert("dpt_changepoints".into(), Value::Array(changepoints));
        let tips: Vec<usize> = b.tips.iter().flatten().copied().collect();
        let tips = DenseArray::new(vec![b.tips.len(), 2], ints(&tips))?;
        adata.uns.insert("dpt_grouptips".into(), Value::Array(tips));
    }
    Ok(n_segments)
}
