//! `pca` (scanpy's `pp.pca`), by the covariance route of `sc-kernels`, on dense or sparse X.
//!
//! As scanpy (1.10+), when `var['highly_variable']` exists only those genes are used
//! (`mask_var`). Writes `obsm['X_pca']` (float32, cells x comps), `varm['PCs']` (genes x
//! comps; zero rows for genes outside the mask) and `uns['pca']` with `variance`,
//! `variance_ratio` and `params` (`zero_center`, `use_highly_variable`, `mask_var`).

use super::kernel_error;
use super::step::{
    no_budget_check, no_input_check, OnGenerated, Phase, Sizes, Step, StepBytes, StepEnv,
};
use crate::anndata::{ArrayData, Column, DenseArray, DeviceData, Matrix, Value};
use crate::steps::{GeneratedPass, PipelineConfig};
use crate::{AnnData, Error, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::pca::{pca_dense_across, pca_sparse, pca_sparse_across, PcaParams, PcaResult};

/// The pipeline's row: `pca(n_comps=...)` on the highly variable genes.
pub(crate) const ROW: Step = Step {
    name: "pca",
    phase: Phase::PerCell,
    enabled: |c| c.n_comps.is_some(),
    run: |a, env| Ok(format!("n_comps={}", pca(a, n_comps(env))?)),
    generated: Some(OnGenerated {
        name: "pca",
        run: run_generated,
    }),
    device_bytes,
    kernels: &[sc_kernels::pca::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

fn n_comps(env: &StepEnv<'_>) -> usize {
    env.config.n_comps.expect("the row runs only with n_comps")
}

/// Device bytes PCA of `genes` genes needs besides its input: the Gram matrix's accumulator
/// (`gram_bytes`: the f64 total, its f32 block product, the block split for tensor cores), the
/// covariance handed to the eigensolver (8 g^2) and cuSOLVER's workspace (about 4 g^2 doubles,
/// 32 g^2).
pub fn pca_bytes(genes: usize) -> u64 {
    sc_kernels::pca::gram_bytes(genes) + 40 * (genes as u64).pow(2)
}

fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    StepBytes {
        kept: 0,
        transient: pca_bytes(config.genes_after_subset(s.n_vars)),
    }
}

/// On the generated demo: the blocks scaled as scale's statistics say, in two passes (the Gram
/// matrix, then the scores).
fn run_generated(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let scaler = pass
        .scaler
        .as_ref()
        .expect("the generated run refuses PCA without scale");
    let src = pass.rows();
    let params = PcaParams {
        n_comps: n_comps(env),
        zero_center: true,
    };
    use sc_kernels::gpu::streamed::RowBlocks;
    let make = |lane: &GpuContext, k: usize| scaler.apply(lane, &src.make(lane, k)?);
    let result = sc_kernels::pca::pca_dense_blocks(
        &pass.ctx,
        src.n_rows(),
        src.n_cols(),
        pass.cells.len(),
        make,
        scaler.max_abs(),
        &params,
    )
    .map_err(kernel_error("pca"))?;
    // X holds the highly variable genes only: every gene is in the mask.
    let used = store_pca(a, result, None)?;
    Ok(format!("n_comps={used}"))
}

/// Runs PCA with `n_comps` components (clipped to min(cells, genes) - 1 as scanpy does);
/// returns the number of components computed.
pub fn pca(adata: &mut AnnData, n_comps: usize) -> Result<usize> {
    const STEP: &str = "pca";
    if n_comps == 0 {
        return Err(Error::param(STEP, "n_comps must be at least 1"));
    }
    let mask = match adata.var.column("highly_variable") {
        Some(Column::Values(ArrayData::Bool(m))) => Some(m.clone()),
        _ => None,
    };
    let params = PcaParams {
        n_comps,
        zero_center: true,
    };
    let masked;
    let x: &Matrix = match &mask {
        Some(m) if m.iter().any(|&k| !k) => {
            masked = adata.x.select_cols(m)?;
            &masked
        }
        _ => &adata.x,
    };
    let comm = adata.comm();
    let result = match x {
        Matrix::Dense(d) => pca_dense_across(d, &params, comm),
        Matrix::Sparse(s) => pca_sparse_across(s, &params, comm),
        Matrix::Device(d) => match &d.data {
            DeviceData::Dense(m) => sc_kernels::pca::pca_dense_gpu_across(&d.ctx, m, &params, comm),
            DeviceData::StreamedDense(s) => {
                sc_kernels::pca::pca_dense_streamed(&d.ctx, &s.host, &params, s.block_bytes)
            }
            DeviceData::StreamedCsr(s) => pca_sparse(&s.host, &params),
            DeviceData::Csr(_) => match x.to_csr()? {
                c => pca_sparse_across(c.as_ref(), &params, comm),
            },
            // Blocks of rows on several GPUs (a stacked split run): gathered on the host.
            DeviceData::Rows(_) => match d.download().map_err(kernel_error(STEP))? {
                Matrix::Dense(h) => pca_dense_across(&h, &params, comm),
                h => pca_sparse_across(h.to_csr()?.as_ref(), &params, comm),
            },
        },
    }
    .map_err(kernel_error(STEP))?;
    store_pca(adata, result, mask)
}

/// Writes `obsm['X_pca']`, `varm['PCs']` (zero rows for genes outside `mask`) and `uns['pca']`;
/// returns the number of components.
fn store_pca(adata: &mut AnnData, result: PcaResult, mask: Option<Vec<bool>>) -> Result<usize> {
    let k = result.x_pca.n_cols;

    // varm['PCs']: genes x comps, genes outside the mask get zero loadings.
    let n_vars = adata.n_vars();
    let used: Vec<usize> = match &mask {
        Some(m) => (0..n_vars).filter(|&j| m[j]).collect(),
        None => (0..n_vars).collect(),
    };
    let mut loadings = vec![0f32; n_vars * k];
    for (c, comp) in result
        .components
        .data
        .chunks(result.components.n_cols)
        .enumerate()
    {
        for (pos, &j) in used.iter().enumerate() {
            loadings[j * k + c] = comp[pos] as f32;
        }
    }
    adata.obsm.insert(
        "X_pca".into(),
        DenseArray::matrix_f32(result.x_pca.n_rows, k, result.x_pca.data)?,
    );
    adata
        .varm
        .insert("PCs".into(), DenseArray::matrix_f32(n_vars, k, loadings)?);
    let mut params = vec![
        ("zero_center", Value::bool(true)),
        ("use_highly_variable", Value::bool(mask.is_some())),
    ];
    if mask.is_some() {
        params.push(("mask_var", Value::str("highly_variable")));
    }
    adata.uns.insert(
        "pca".into(),
        Value::dict([
            ("params", Value::dict(params)),
            ("variance", Value::vector(ArrayData::F64(result.variance))),
            (
                "variance_ratio",
                Value::vector(ArrayData::F64(result.variance_ratio)),
            ),
        ]),
    );
    Ok(k)
}
