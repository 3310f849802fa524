//! `regress_out` (scanpy's `pp.regress_out`): each gene's residuals on obs covariates, either
//! continuous columns (with an intercept) or one categorical column (each gene's mean within
//! the cell's category). X becomes dense float32. A GPU X is regressed on its GPU (the same
//! bits as the host; a CSR one is written dense with its residuals in one pass); one streamed
//! from host memory is regressed on the host and put back on its GPU, dense. A run makes it
//! with `--regress-out KEYS`.

use super::kernel_error;
use super::step::{no_budget_check, OnGenerated, Phase, Sizes, Step, StepBytes, StepEnv};
use crate::anndata::{Column, DeviceData, DeviceMatrix, Matrix};
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::dense::DenseMatrix;
use sc_kernels::regress::{regress_out_csr_gpu, regress_out_gpu, Covariates};

/// The pipeline's row: `regress_out(keys=--regress-out)` after the highly variable subset and
/// before scale, as scanpy's older tutorial runs it (off by default, as there).
pub(crate) const ROW: Step = Step {
    name: "regress_out",
    phase: Phase::PerCell,
    enabled: |c| !c.regress_out.is_empty(),
    run: run_step,
    generated: Some(OnGenerated {
        name: "regress_out",
        run: |_, _, _| Err(Error::param(STEP, GENERATED)),
    }),
    device_bytes,
    kernels: &[sc_kernels::regress::KERNELS],
    check_input,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

const STEP: &str = "regress_out";

/// Why the generated demo refuses the step (`run::generated` refuses it before any step runs).
pub(crate) const GENERATED: &str = "regress_out needs every cell's values of a gene at once, \
    which the generated demo never holds: run it on a file";

/// The obs columns the QC step writes (its `pct_counts_in_top_N_genes` aside), which the
/// covariates may name before they exist.
const QC_COLUMNS: &[&str] = &[
    "n_genes_by_counts",
    "log1p_n_genes_by_counts",
    "total_counts",
    "log1p_total_counts",
    "total_counts_mt",
    "log1p_total_counts_mt",
    "pct_counts_mt",
];

/// Each key must be an obs column of the input, or one the QC step will write, before any step
/// runs (found after QC, the error would cost the run its first steps).
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let qc = config.qc_mito_prefix.is_some();
    let from_qc = |k: &str| {
        qc && (QC_COLUMNS.contains(&k)
            || (k.starts_with("pct_counts_in_top_") && k.ends_with("_genes")))
    };
    for k in &config.regress_out {
        if adata.obs.column(k).is_none() && !from_qc(k) {
            return Err(Error::param(
                STEP,
                format!(
                    "--regress-out: obs has no column '{k}'{}",
                    if qc {
                        " (QC writes total_counts, n_genes_by_counts, pct_counts_mt, ...)"
                    } else {
                        " and QC does not run"
                    }
                ),
            ));
        }
    }
    Ok(())
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    if super::comm_of(a).size() > 1 {
        return Err(Error::param(
            STEP,
            "regress_out runs on one device: its sums over every cell are not yet combined \
             across ranks (run without splitting the cells)",
        ));
    }
    regress_out(a, &env.config.regress_out)?;
    Ok(format!("keys={}", env.config.regress_out.join(",")))
}

/// X becomes dense float32 (cells x the genes kept), kept for the rest of the run; the chunks'
/// partial sums take at most `PARTIAL_BYTES` meanwhile, and a CSR X's rows densified a wave at
/// a time for the sums at most `WAVE_BYTES`.
fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    use sc_kernels::gpu::dense_reduce::{PARTIAL_BYTES, WAVE_BYTES};
    let kept = s.n_obs as u64 * config.genes_after_subset(s.n_vars) as u64 * 4;
    StepBytes {
        kept,
        transient: PARTIAL_BYTES as u64 + kept.min(WAVE_BYTES as u64),
    }
}

/// Regresses X's genes on the obs columns `keys` (one categorical column, or numeric ones).
/// X is left as it was when the regression is refused.
pub fn regress_out(adata: &mut AnnData, keys: &[String]) -> Result<()> {
    let covariates = covariates(adata, keys)?;
    let on_device = match &mut adata.x {
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Dense(d),
        }) => {
            // Every check runs before the one write: a refused call leaves X as it was.
            regress_out_gpu(ctx, d, &covariates).map_err(kernel_error(STEP))?;
            return Ok(());
        }
        Matrix::Device(DeviceMatrix {
            ctx,
            data: DeviceData::Csr(m),
        }) => {
            // Written dense with its residuals in one pass (no dense copy of X to read back).
            let dense = regress_out_csr_gpu(ctx, m, &covariates).map_err(kernel_error(STEP))?;
            Some((ctx.clone(), dense))
        }
        _ => None,
    };
    if let Some((ctx, dense)) = on_device {
        adata.x = Matrix::Device(DeviceMatrix::dense(&ctx, dense));
        return Ok(());
    }
    // On the host: a host X, or one streamed through the GPU or split over several.
    let mut x = match &adata.x {
        Matrix::Sparse(c) => c.to_dense(),
        Matrix::Dense(d) => d.clone(),
        Matrix::Device(_) => host_dense(adata.x.host_copy()?)?,
    };
    sc_kernels::regress::regress_out(&mut x, &covariates).map_err(kernel_error(STEP))?;
    adata.x = super::dense_x_on(super::x_gpu(adata).as_ref(), x, STEP)?;
    Ok(())
}

/// A host copy of a device X as a dense matrix.
fn host_dense(m: Matrix) -> Result<DenseMatrix<f32>> {
    match m {
        Matrix::Sparse(c) => Ok(c.to_dense()),
        Matrix::Dense(d) => Ok(d),
        Matrix::Device(_) => Err(Error::Device(
            "regress_out: X did not come back from the GPU".into(),
        )),
    }
}

/// The covariates of `keys`: one categorical column alone, else numeric (or boolean) columns.
fn covariates(adata: &AnnData, keys: &[String]) -> Result<Covariates> {
    let column = |k: &str| {
        adata.obs.column(k).ok_or_else(|| Error::Missing {
            step: "regress_out",
            problem: format!("obs has no column '{k}'"),
        })
    };
    if keys.is_empty() {
        return Err(Error::InvalidParameter {
            step: "regress_out",
            problem: "give at least one obs column in keys".into(),
        });
    }
    if let Column::Categorical {
        codes, categories, ..
    } = column(&keys[0])?
    {
        if keys.len() > 1 {
            return Err(Error::InvalidParameter {
                step: "regress_out",
                problem: format!(
                    "'{}' is categorical: a categorical column must be the only key (scanpy \
                     regresses on each gene's mean within its categories)",
                    keys[0]
                ),
            });
        }
        return Ok(Covariates::Categorical {
            codes: codes.clone(),
            n_categories: categories.len(),
        });
    }
    let mut columns = Vec::with_capacity(keys.len());
    for k in keys {
        let values = match column(k)? {
            Column::Values(v) => v.to_f64(),
            _ => None,
        };
        columns.push(values.ok_or_else(|| Error::InvalidParameter {
            step: "regress_out",
            problem: format!(
                "obs column '{k}' is not numeric (only the first and only key may be categorical)"
            ),
        })?);
    }
    Ok(Covariates::Continuous(columns))
}
