//! Preprocessing steps with scanpy's names, parameters and outputs. Each step takes an
//! [`AnnData`], runs the matching `sc-kernels` function and writes the results
//! where scanpy writes them; each module's documentation lists what it writes.
//!
//! Each step's file also holds its row of the pipeline's step table ([`rows`]): when it runs,
//! its function on X wherever X lives, its function on the generated demo's blocks, its device
//! memory estimate and its checks of the input. The contract of a row ([`step`]), the run's
//! configuration ([`PipelineConfig`] and the steps' options) and the generated demo's blocks
//! ([`generated_blocks`]) live here, below the runner (`run/`), which walks the rows: a front
//! end may call a step without it.

mod aggregate;
mod bbknn;
mod combat;
mod config;
mod diffmap;
mod dpt;
mod draw_graph;
mod embedding_density;
mod filter;
pub mod generated_ahead;
pub mod generated_blocks;
mod harmony;
mod hvg;
mod ingest;
mod kmeans;
mod leiden;
mod log1p;
mod logreg;
mod louvain;
mod markers;
mod neighbors;
mod normalize;
mod paga;
mod pca;
mod pearson;
mod qc;
mod regress;
mod scale;
mod score_genes;
mod scrublet;
pub mod step;
mod tsne;
mod umap;

pub use aggregate::{aggregate, AggregateAxis};
pub use bbknn::bbknn;
pub use combat::combat;
/// The run's configuration and the options of the steps that take several.
pub use config::{
    EmbeddingDensityOptions, HarmonyOptions, HvgCutoffs, HvgOptions, LeidenOptions, LouvainOptions,
    MarkerOptions, MitoPrefix, PagaOptions, PipelineConfig, ScrubletOptions,
};
pub use diffmap::diffmap;
pub use dpt::{dpt, dpt_from, N_DCS as DPT_N_DCS};
pub use draw_graph::{draw_graph, Start as DrawGraphStart};
pub use embedding_density::{embedding_density, embedding_density_of_umap};
pub use filter::{filter_cells, filter_genes};
pub use harmony::{
    harmony_integrate, harmony_integrate_across, harmony_integrate_on, HarmonySummary,
    HARMONY_ADJUSTED_BASIS, HARMONY_BASIS,
};
pub use hvg::{
    highly_variable_genes, highly_variable_genes_pearson_residuals, highly_variable_mask,
};
pub use ingest::{ingest, NewRepresentation, Reference as IngestReference, ReferencePca};
pub use kmeans::kmeans;
pub use leiden::{leiden, leiden_all, leiden_all_on, leiden_on};
pub use log1p::log1p;
pub(crate) use logreg::GENERATED as LOGREG_ON_GENERATED;
pub use logreg::{rank_genes_groups_logreg, LogregOutcome};
pub use louvain::louvain_on;
pub use markers::{rank_genes_groups, rank_genes_groups_on};
pub use neighbors::{neighbors, neighbors_on};
pub use normalize::normalize_total;
pub use paga::{paga, paga_of};
pub use pca::{pca, pca_bytes};
pub use pearson::{normalize_pearson_residuals, x_holds_whole_numbers};
pub use qc::{annotate_gene_prefix, calculate_qc_metrics, default_percent_top};
pub use regress::regress_out;
pub(crate) use regress::GENERATED as REGRESS_OUT_ON_GENERATED;
pub use sc_kernels::filter::{CellFilter, GeneFilter};
pub use sc_kernels::harmony::{HarmonyFlavor, HarmonyParams};
pub use sc_kernels::hvg::Flavor;
pub use sc_kernels::normalize::NormalizeParams;
pub use sc_kernels::scale::ScaleParams;
pub use scale::scale;
pub use score_genes::score_genes;
pub(crate) use scrublet::GENERATED as SCRUBLET_ON_GENERATED;
pub use scrublet::{scrublet, scrublet_on_simulated, scrublet_simulate_doublets, ScrubletSummary};
pub use tsne::{tsne, tsne_on};
pub use umap::{umap, umap_on};

pub(crate) use generated_blocks::GeneratedPass;

/// What calculate_qc_metrics' pass over the cells of a run whose X is never held takes for the
/// steps after it ([`generated_ahead`]), each part from its step's settings.
pub(crate) fn generated_ahead_plan(
    config: &PipelineConfig,
    a: &AnnData,
) -> Option<generated_ahead::Plan> {
    generated_ahead::Plan::new(
        filter::generated_cell_filter(config),
        filter::generated_gene_filter(config).is_some(),
        normalize::generated_params(config),
        config.log1p,
        [
            hvg::generated_pass(config, a),
            scale::generated_pass(config),
        ]
        .into_iter()
        .flatten(),
    )
}

/// The pipeline's rows of the step table (the runner lists them in their order), one per step (HVG has two: before
/// normalize_total for the flavours that read counts, after log1p for the others).
pub(crate) mod rows {
    pub(crate) use super::diffmap::ROW as DIFFMAP;
    pub(crate) use super::dpt::ROW as DPT;
    pub(crate) use super::draw_graph::ROW as DRAW_GRAPH;
    pub(crate) use super::embedding_density::ROW as EMBEDDING_DENSITY;
    pub(crate) use super::filter::{FILTER_CELLS, FILTER_GENES};
    pub(crate) use super::harmony::ROW as HARMONY;
    pub(crate) use super::hvg::{
        ON_COUNTS as HVG_ON_COUNTS, ON_LOG_NORMALIZED as HVG, SUBSET as HVG_SUBSET,
    };
    pub(crate) use super::kmeans::ROW as KMEANS;
    pub(crate) use super::leiden::ROW as LEIDEN;
    pub(crate) use super::log1p::ROW as LOG1P;
    pub(crate) use super::louvain::ROW as LOUVAIN;
    pub(crate) use super::markers::ROW as MARKERS;
    pub(crate) use super::neighbors::ROW as NEIGHBORS;
    pub(crate) use super::normalize::ROW as NORMALIZE;
    pub(crate) use super::paga::ROW as PAGA;
    pub(crate) use super::pca::ROW as PCA;
    pub(crate) use super::qc::ROW as QC;
    pub(crate) use super::regress::ROW as REGRESS_OUT;
    pub(crate) use super::scale::ROW as SCALE;
    pub(crate) use super::scrublet::ROW as SCRUBLET;
    pub(crate) use super::tsne::ROW as TSNE;
    pub(crate) use super::umap::ROW as UMAP;
}

use crate::anndata::{ArrayData, DenseArray, DeviceData, DeviceMatrix, Matrix};
use crate::{AnnData, Error};
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::{CsrMatrix, DenseMatrix};
use std::sync::Arc;

/// Cluster labels (`0..n`) as scanpy writes them: a categorical column of the categories
/// `"0"`, `"1"`, ... `n - 1`.
pub(crate) fn cluster_column(labels: &[u32], n: usize) -> crate::anndata::Column {
    crate::anndata::Column::Categorical {
        codes: labels.iter().map(|&c| c as i32).collect(),
        categories: ArrayData::Str((0..n).map(|c| c.to_string()).collect()),
        ordered: false,
    }
}

/// The neighbors graph, or an error saying to run neighbors first.
pub(crate) fn connectivities<'a>(
    adata: &'a AnnData,
    step: &'static str,
) -> crate::Result<&'a CsrMatrix<f32>> {
    adata
        .obsp
        .get("connectivities")
        .ok_or_else(|| Error::Missing {
            step,
            problem: "obsp has no 'connectivities': run neighbors first".into(),
        })
}

/// Representation used: `obsm[use_rep]` when named (an error when it is missing); otherwise
/// `X_pca` when present; otherwise X when it has at most 50 genes (as scanpy decides);
/// otherwise an error asking for PCA first.
pub(crate) fn representation(
    adata: &AnnData,
    use_rep: Option<&str>,
    step: &'static str,
) -> crate::Result<(DenseMatrix<f32>, String)> {
    let rep = use_rep.unwrap_or("X_pca");
    if let Some(m) = obsm_matrix(adata, rep)? {
        return Ok((m, rep.to_string()));
    }
    if let Some(rep) = use_rep {
        return Err(Error::Missing {
            step,
            problem: format!("use_rep: obsm has no '{rep}'"),
        });
    }
    if adata.n_vars() <= 50 {
        let dense = match &adata.x {
            Matrix::Dense(d) => d.clone(),
            Matrix::Sparse(s) => s.to_dense(),
            Matrix::Device(d) => match d.download().map_err(kernel_error(step))? {
                Matrix::Dense(d) => d,
                Matrix::Sparse(s) => s.to_dense(),
                Matrix::Device(_) => unreachable!("downloaded"),
            },
        };
        return Ok((dense, "X".to_string()));
    }
    Err(Error::Missing {
        step,
        problem: format!(
            "obsm has no 'X_pca' and X has {} genes (> 50): run pca first",
            adata.n_vars()
        ),
    })
}

/// The first `k` (at most all) columns of `m`: `m` itself when it has `k`.
pub(crate) fn first_columns(m: DenseMatrix<f32>, k: usize) -> sc_kernels::Result<DenseMatrix<f32>> {
    if k == m.n_cols {
        return Ok(m);
    }
    m.select_cols(&(0..m.n_cols).map(|c| c < k).collect::<Vec<_>>())
}

/// `obsm[key]` borrowed, `(values, rows, columns)`, when it is a 2-D f32 array: a step that
/// reads it whole needs no copy of it (a million cells' 50 PCs are 200 MB).
pub(crate) fn obsm_f32<'a>(adata: &'a AnnData, key: &str) -> Option<(&'a [f32], usize, usize)> {
    match adata.obsm.get(key)? {
        DenseArray {
            shape,
            data: ArrayData::F32(v),
        } if shape.len() == 2 => Some((v.as_slice(), shape[0], shape[1])),
        _ => None,
    }
}

/// `obsm[key]` as an `f32` matrix (`f64` arrays rounded); `None` when there is no such key.
pub(crate) fn obsm_matrix(adata: &AnnData, key: &str) -> crate::Result<Option<DenseMatrix<f32>>> {
    let Some(DenseArray { shape, data }) = adata.obsm.get(key) else {
        return Ok(None);
    };
    let what = format!("obsm['{key}']");
    if shape.len() != 2 {
        return Err(Error::invalid(
            what,
            format!("must be 2-dimensional, has shape {shape:?}"),
        ));
    }
    let values: Vec<f32> = match data {
        ArrayData::F32(v) => v.clone(),
        ArrayData::F64(v) => v.iter().map(|&x| x as f32).collect(),
        other => {
            return Err(Error::invalid(
                what,
                format!("holds {}, not numbers", other.type_name()),
            ))
        }
    };
    DenseMatrix::new(shape[0], shape[1], values)
        .map(Some)
        .map_err(|e| Error::invalid(what, e.to_string()))
}

/// Runs `f` on `obsm[key]` as an `f32` matrix (`None` when obsm has no `key`). A 2-dimensional
/// `f32` array is moved out of `adata` for the call and back after it, not copied (the
/// embedding of a million cells is 200 MB).
pub(crate) fn with_obsm_matrix<T>(
    adata: &mut AnnData,
    key: &str,
    f: impl FnOnce(&DenseMatrix<f32>) -> T,
) -> crate::Result<Option<T>> {
    let movable = matches!(
        adata.obsm.get(key),
        Some(DenseArray { shape, data: ArrayData::F32(v) })
            if shape.len() == 2 && shape[0].checked_mul(shape[1]) == Some(v.len())
    );
    if !movable {
        return Ok(obsm_matrix(adata, key)?.map(|m| f(&m)));
    }
    let DenseArray { shape, data } = adata.obsm.remove(key).expect("checked above");
    let ArrayData::F32(values) = data else {
        unreachable!("checked above")
    };
    let m = DenseMatrix {
        n_rows: shape[0],
        n_cols: shape[1],
        data: values,
    };
    let out = f(&m);
    adata.obsm.insert(
        key.to_string(),
        DenseArray {
            shape,
            data: ArrayData::F32(m.data),
        },
    );
    Ok(Some(out))
}

/// Each cell's code in `obs[key]` and the labels (see `Column::group_labels`); a missing column
/// is an error naming `step`, the column's `role` and the columns obs has ([`obs_column`]).
pub(crate) fn obs_labels(
    adata: &AnnData,
    step: &'static str,
    role: &str,
    key: &str,
) -> crate::Result<(Vec<u32>, Vec<String>)> {
    obs_column(adata, step, role, key)?.group_labels(key)
}

/// Before any step runs: a grouping column (`key`, in the role `role`) that no clustering step
/// of the run makes must be in obs and group the cells.
pub(crate) fn check_groups_column(
    adata: &AnnData,
    config: &PipelineConfig,
    step: &'static str,
    role: &str,
    key: &str,
) -> crate::Result<()> {
    if config.makes_obs_column(key) {
        return Ok(());
    }
    obs_labels(adata, step, role, key).map(|_| ())
}

/// `obs[key]`; a missing column is an error naming `step`, the column's `role` and the columns
/// obs has.
pub(crate) fn obs_column<'a>(
    adata: &'a AnnData,
    step: &'static str,
    role: &str,
    key: &str,
) -> crate::Result<&'a crate::anndata::Column> {
    adata.obs.column(key).ok_or_else(|| Error::Missing {
        step,
        problem: {
            let names: Vec<_> = adata.obs.column_names().collect();
            match names.is_empty() {
                true => format!("obs has no column '{key}' ({role}); obs has no columns"),
                false => format!(
                    "obs has no column '{key}' ({role}); obs has: {}",
                    names.join(", ")
                ),
            }
        },
    })
}

/// The matrix marker genes rank (scanpy's `use_raw`): `.raw` (`raw_apart`'s, else the data's)
/// when there is one, else X; with its genes, what it is called, and whether it is `.raw`.
pub(crate) fn markers_matrix<'a>(
    adata: &'a AnnData,
    raw_apart: Option<&'a crate::anndata::Raw>,
) -> (&'a crate::anndata::Matrix, &'a [String], &'static str, bool) {
    match raw_apart.or(adata.raw.as_ref()) {
        Some(r) => (&r.x, &r.var.index, ".raw", true),
        None => (&adata.x, &adata.var.index, "X (no .raw)", false),
    }
}

/// The groups in the order scanpy reports them: a categorical's categories as ordered (those
/// without cells left out), else the labels sorted.
pub(crate) fn in_category_order(
    adata: &AnnData,
    groupby: &str,
    codes: Vec<u32>,
    groups: Vec<String>,
) -> (Vec<u32>, Vec<String>) {
    let order: Vec<String> = match adata.obs.column(groupby) {
        Some(crate::anndata::Column::Categorical { categories, .. }) => {
            crate::anndata::array_as_strings(categories)
                .into_iter()
                .filter(|c| groups.contains(c))
                .collect()
        }
        _ => {
            let mut g = groups.clone();
            g.sort();
            g
        }
    };
    let new_code: Vec<u32> = groups
        .iter()
        .map(|g| {
            order
                .iter()
                .position(|o| o == g)
                .expect("every group is listed") as u32
        })
        .collect();
    (codes.iter().map(|&c| new_code[c as usize]).collect(), order)
}

/// The communicator of `adata`'s ranks (a single rank when its cells are not split), held apart
/// from `adata` so a step can borrow X mutably while it combines statistics.
pub(crate) fn comm_of(adata: &AnnData) -> Arc<dyn sc_kernels::Communicator> {
    match &adata.ranks {
        Some(r) => r.0.clone(),
        None => Arc::new(sc_kernels::SingleRank),
    }
}

/// Wraps a kernel's refusal into the step's error.
pub(crate) fn kernel_error(step: &'static str) -> impl Fn(sc_kernels::KernelError) -> Error {
    move |e| match e {
        sc_kernels::KernelError::InvalidParameter { name, reason } => Error::InvalidParameter {
            step,
            problem: format!("{name}: {reason}"),
        },
        sc_kernels::KernelError::Memory(rmm_core::MemoryError::OutOfMemory(oom)) => {
            Error::OutOfMemory {
                step: step.to_string(),
                oom: Box::new(oom),
            }
        }
        e @ (sc_kernels::KernelError::Memory(_)
        | sc_kernels::KernelError::Gpu(_)
        | sc_kernels::KernelError::Comm(_)) => Error::Gpu {
            step,
            problem: e.to_string(),
        },
        other => Error::InvalidData {
            what: format!("{step} input"),
            problem: other.to_string(),
        },
    }
}

/// The GPU X is on, if it is on one.
pub(crate) fn x_gpu(adata: &AnnData) -> Option<Arc<GpuContext>> {
    match &adata.x {
        Matrix::Device(d) => Some(d.ctx.clone()),
        _ => None,
    }
}

/// A dense X computed on the host, put on `gpu` (the GPU X was on, [`x_gpu`]) or left on the
/// host (`None`).
pub(crate) fn dense_x_on(
    gpu: Option<&Arc<GpuContext>>,
    x: DenseMatrix<f32>,
    step: &'static str,
) -> crate::Result<Matrix> {
    Ok(match gpu {
        Some(ctx) => Matrix::Device(DeviceMatrix::dense(
            ctx,
            sc_kernels::gpu::DeviceDense::upload(ctx, &x).map_err(kernel_error(step))?,
        )),
        None => Matrix::Dense(x),
    })
}

/// X when it lives on the GPU as CSR: its context and the matrix.
pub(crate) fn device_csr(adata: &AnnData) -> Option<(Arc<GpuContext>, &DeviceCsr)> {
    match &adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Csr(m),
        }) => Some((ctx.clone(), m)),
        _ => None,
    }
}

/// As [`device_csr`], mutable.
pub(crate) fn device_csr_mut(adata: &mut AnnData) -> Option<(Arc<GpuContext>, &mut DeviceCsr)> {
    match &mut adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Csr(m),
        }) => Some((ctx.clone(), m)),
        _ => None,
    }
}

/// X when it is a host CSR matrix streamed through a GPU: its context, the matrix and the
/// device bytes a block may take.
pub(crate) fn streamed_csr(adata: &AnnData) -> Option<(Arc<GpuContext>, &CsrMatrix<f32>, usize)> {
    match &adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::StreamedCsr(s),
        }) => Some((ctx.clone(), &s.host, s.block_bytes)),
        _ => None,
    }
}

/// As [`streamed_csr`], mutable.
pub(crate) fn streamed_csr_mut(
    adata: &mut AnnData,
) -> Option<(Arc<GpuContext>, &mut CsrMatrix<f32>, usize)> {
    match &mut adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::StreamedCsr(s),
        }) => Some((ctx.clone(), &mut s.host, s.block_bytes)),
        _ => None,
    }
}

/// X as a mutable CSR matrix; a dense X is converted to CSR first (the steps that change X in
/// place work on the stored values).
pub(crate) fn x_csr_mut(adata: &mut AnnData) -> &mut CsrMatrix<f32> {
    if let Matrix::Dense(d) = &adata.x {
        adata.x = Matrix::Sparse(CsrMatrix::from_dense(d));
    }
    match &mut adata.x {
        Matrix::Sparse(m) => m,
        Matrix::Dense(_) | Matrix::Device(_) => {
            unreachable!("converted above; device matrices take their GPU branch first")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_out_of_memory_names_the_step_the_request_and_what_to_try() {
        let oom = rmm_core::OutOfMemory::new("pool", 3 << 30)
            .held(8 << 30)
            .maximum(8 << 30);
        let e = kernel_error("filter_cells")(sc_kernels::KernelError::Memory(
            rmm_core::MemoryError::OutOfMemory(oom),
        ))
        .to_string();
        for part in [
            "filter_cells",
            "3.00 GiB requested",
            "holds 8.00 GiB",
            "--allocator managed",
            "--pool-max",
            "smaller input",
        ] {
            assert!(e.contains(part), "{part:?} missing from: {e}");
        }
        // An out-of-memory error raised below a step (a matrix selection) names the step.
        let inner = Error::OutOfMemory {
            step: "GPU matrix".into(),
            oom: Box::new(rmm_core::OutOfMemory::new("pool", 1 << 20)),
        };
        let e = inner.in_step("filter_cells").to_string();
        assert!(e.starts_with("filter_cells: out of GPU memory"), "{e}");
        let g = kernel_error("pca")(sc_kernels::KernelError::Gpu(
            "cusolverDnDsyevdx: boom".into(),
        ))
        .to_string();
        assert!(
            g.starts_with("pca: ") && g.contains("cusolverDnDsyevdx"),
            "{g}"
        );
    }
}
