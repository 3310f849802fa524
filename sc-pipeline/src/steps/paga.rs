//! `paga` (scanpy's `tl.paga`, model v1.2): the connectivities of groups of cells in the kNN
//! graph (`obsp['distances']`, each stored entry one directed edge) and their maximum spanning
//! tree (`sc_kernels::paga`). [`paga`] leaves both dense (groups x groups f64) in
//! `uns['paga']` with the group sizes, for the Python front end, which stores them as scanpy
//! does; the row (`--paga`, off by default, after the clusterings) stores them as the file
//! keeps them ([`paga_of`]). The edges are counted on the run's GPU when it has one (the same
//! counts), else on the host; the rest is the groups' square, on the host.

use super::step::{no_budget_check, no_device_bytes, Phase, Step, StepEnv};
use super::{check_groups_column, kernel_error, obs_column};
use crate::anndata::{ArrayData, Column, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::paga::{connectivities, group_edge_counts, group_edge_counts_gpu, spanning_tree};
use sc_kernels::{CsrMatrix, DenseMatrix};

const STEP: &str = "paga";
/// The groups' column in the errors that name it.
const ROLE: &str = "--paga-groups";

/// The pipeline's row: the groups of `--paga-groups`, else leiden's first column.
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_paga,
    run: |a, env: &StepEnv<'_>| {
        let key = env
            .config
            .paga_groups()
            .expect("the row runs only with paga");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let n_groups = paga_of(a, &key, gpu)?;
        let on = if gpu.is_some() { "GPU" } else { "CPU" };
        Ok(format!(
            "{n_groups} '{key}' groups, edges counted on the {on}"
        ))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &sc_kernels::paga::KERNELS,
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// A `--paga-groups` column that no clustering step of the run makes must be in obs before
/// any step runs.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    match config.paga_groups() {
        Some(g) => check_groups_column(adata, config, STEP, ROLE, &g),
        None => Ok(()),
    }
}

/// The PAGA connectivities of `groups` (one per cell, `< n_groups`) over `obsp[graph]`:
/// `uns['paga']` with `connectivities` and `connectivities_tree` (dense `n_groups x n_groups`
/// f64) and `sizes`; the edges counted on `gpu` when given.
pub fn paga(
    adata: &mut AnnData,
    graph: &str,
    groups: &[u32],
    n_groups: usize,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    let Paga { conn, tree, sizes } = compute(adata, graph, groups, n_groups, gpu)?;
    let square = |v: Vec<f64>| -> Result<Value> {
        Ok(Value::Array(DenseArray::new(
            vec![n_groups, n_groups],
            ArrayData::F64(v),
        )?))
    };
    adata.uns.insert(
        STEP.into(),
        Value::dict([
            ("connectivities", square(conn)?),
            ("connectivities_tree", square(tree)?),
            ("sizes", sizes),
        ]),
    );
    Ok(())
}

/// scanpy's `tl.paga(adata, groups=key)` (`key` a categorical obs column, its categories the
/// groups in their order) as the file keeps it: `uns['paga']` with `connectivities` and
/// `connectivities_tree` as sparse matrices (f32: the model's sparse values; scanpy's are
/// f64) and `groups` (the key), and `uns[f'{key}_sizes']`. Returns the number of groups.
pub fn paga_of(adata: &mut AnnData, key: &str, gpu: Option<&GpuContext>) -> Result<usize> {
    let (codes, n_groups) = category_codes(adata, key)?;
    let Paga { conn, tree, sizes } = compute(adata, "distances", &codes, n_groups, gpu)?;
    let sparse = |v: Vec<f64>| -> Result<Value> {
        let dense = DenseMatrix::new(n_groups, n_groups, v.iter().map(|&w| w as f32).collect())
            .map_err(kernel_error(STEP))?;
        Ok(Value::Sparse(CsrMatrix::from_dense(&dense)))
    };
    let paga = Value::dict([
        ("connectivities", sparse(conn)?),
        ("connectivities_tree", sparse(tree)?),
        ("groups", Value::str(key)),
    ]);
    adata.uns.insert(STEP.into(), paga);
    adata.uns.insert(format!("{key}_sizes"), sizes);
    Ok(n_groups)
}

/// What both front ends store, each in its form.
struct Paga {
    /// `n_groups x n_groups`, row-major.
    conn: Vec<f64>,
    tree: Vec<f64>,
    /// Cells per group (i64, as scanpy writes them).
    sizes: Value,
}

fn compute(
    adata: &AnnData,
    graph: &str,
    groups: &[u32],
    n_groups: usize,
    gpu: Option<&GpuContext>,
) -> Result<Paga> {
    let g = adata.obsp.get(graph).ok_or_else(|| Error::Missing {
        step: STEP,
        problem: format!("obsp has no '{graph}': run neighbors first"),
    })?;
    let counts = match gpu {
        Some(ctx) => group_edge_counts_gpu(ctx, g, groups, n_groups),
        None => group_edge_counts(g, groups, n_groups),
    }
    .map_err(kernel_error(STEP))?;
    let mut sizes = vec![0u64; n_groups];
    groups.iter().for_each(|&c| sizes[c as usize] += 1);
    let conn = connectivities(&counts, &sizes);
    let tree = spanning_tree(&conn, n_groups);
    let sizes = Value::Array(DenseArray::new(
        vec![n_groups],
        ArrayData::I64(sizes.iter().map(|&s| s as i64).collect()),
    )?);
    Ok(Paga { conn, tree, sizes })
}

/// Each cell's category code in `obs[key]` and the number of categories (scanpy's groups are
/// the categories in their order); a column that is not categorical, or a cell without a
/// category, is refused by name.
fn category_codes(adata: &AnnData, key: &str) -> Result<(Vec<u32>, usize)> {
    let Column::Categorical {
        codes, categories, ..
    } = obs_column(adata, STEP, ROLE, key)?
    else {
        return Err(Error::InvalidParameter {
            step: STEP,
            problem: format!("obs['{key}'] is not categorical: PAGA's groups are categories"),
        });
    };
    let codes = codes
        .iter()
        .map(|&c| u32::try_from(c))
        .collect::<std::result::Result<Vec<u32>, _>>()
        .map_err(|_| Error::InvalidParameter {
            step: STEP,
            problem: format!("obs['{key}'] has cells without a category"),
        })?;
    Ok((codes, categories.len()))
}
