//! `scale` (scanpy's `pp.scale`): each gene to zero mean and unit variance (ddof 1), clipped at
//! `max_value`. X becomes dense float32 (zero-centred data is dense); writes `var['mean']` and
//! `var['std']`. Without zero-centring a sparse X stays sparse.

use super::kernel_error;
use super::step::{
    no_budget_check, no_input_check, OnGenerated, Phase, Sizes, Step, StepBytes, StepEnv,
};
use crate::anndata::{ArrayData, DeviceData, DeviceMatrix, Matrix};
use crate::steps::{GeneratedPass, PipelineConfig};
use crate::{AnnData, Result};
use sc_kernels::gpu::reduce::Transform;
use sc_kernels::gpu::streamed::RowBlocks;
use sc_kernels::scale::{DenseScaler, ScaleParams};

/// The pipeline's row: `scale(max_value=...)`, zero-centred (X becomes dense).
pub(crate) const ROW: Step = Step {
    name: "scale",
    phase: Phase::PerCell,
    enabled: |c| c.scale_max_value.is_some(),
    run: run_step,
    generated: Some(OnGenerated {
        name: "scale",
        run: run_generated,
    }),
    device_bytes,
    kernels: &[sc_kernels::scale::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

fn params(env: &StepEnv<'_>) -> ScaleParams {
    ScaleParams {
        zero_center: true,
        max_value: env
            .config
            .scale_max_value
            .expect("the row runs only with scale"),
    }
}

fn clipping(p: &ScaleParams) -> String {
    p.max_value
        .map_or("no clipping".into(), |m| format!("max_value={m}"))
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let p = params(env);
    scale(a, &p)?;
    Ok(clipping(&p))
}

/// The dense float32 matrix of the genes X keeps, made here and kept for the rest of the run.
fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    StepBytes {
        kept: s.n_obs as u64 * config.genes_after_subset(s.n_vars) as u64 * 4,
        transient: 0,
    }
}

/// The moments scale reads on a run whose X is never held (`None`: the step does not run).
pub(crate) fn generated_pass(config: &PipelineConfig) -> Option<Transform> {
    config.scale_max_value.map(|_| Transform::Identity)
}

/// On the generated demo: the statistics now, each block scaled as PCA generates it.
fn run_generated(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let p = params(env);
    let known =
        (pass.ahead.take()).and_then(|ahead| ahead.moments(&pass.chain, Transform::Identity));
    let rows = pass.rows();
    let st = match &known {
        Some(k) => sc_kernels::scale::stats_of_moments(&k.moments, rows.n_rows()),
        None => sc_kernels::scale::scale_stats_blocks(&pass.ctx, &rows)
            .map_err(kernel_error("scale"))?,
    };
    let scaler = DenseScaler::new(&pass.ctx, &st, &p).map_err(kernel_error("scale"))?;
    a.var.set_values("mean", ArrayData::F64(st.mean))?;
    a.var.set_values("std", ArrayData::F64(st.std))?;
    pass.scaler = Some(scaler);
    let how = match known {
        Some(_) => "taken in calculate_qc_metrics' pass",
        None => "now",
    };
    Ok(format!(
        "{}; statistics {how}, each block scaled as it is generated for PCA",
        clipping(&p)
    ))
}

pub fn scale(adata: &mut AnnData, params: &ScaleParams) -> Result<()> {
    const STEP: &str = "scale";
    let comm = super::comm_of(adata);
    if let Some((ctx, m)) = super::device_csr(adata).filter(|_| params.zero_center) {
        let (dense, stats) =
            sc_kernels::scale::scale_csr_to_dense_gpu_across(&ctx, m, params, &*comm)
                .map_err(kernel_error(STEP))?;
        adata.x = Matrix::Device(DeviceMatrix::dense(&ctx, dense));
        adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
        adata.var.set_values("std", ArrayData::F64(stats.std))?;
        return Ok(());
    }
    if let Some((ctx, m, block)) = super::streamed_csr(adata).filter(|_| params.zero_center) {
        let (dense, stats) = sc_kernels::scale::scale_csr_to_dense_streamed(&ctx, m, params, block)
            .map_err(kernel_error(STEP))?;
        adata.x = Matrix::Device(DeviceMatrix::streamed_dense(&ctx, dense, block));
        adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
        adata.var.set_values("std", ArrayData::F64(stats.std))?;
        return Ok(());
    }
    if let Matrix::Device(DeviceMatrix {
        ctx,
        data: DeviceData::Dense(d),
    }) = &mut adata.x
    {
        let stats = sc_kernels::scale::scale_dense_gpu_across(ctx, d, params, &*comm)
            .map_err(kernel_error(STEP))?;
        adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
        adata.var.set_values("std", ArrayData::F64(stats.std))?;
        return Ok(());
    }
    if let Matrix::Device(_) = &adata.x {
        // Without centring, or streamed from host memory dense, the CPU implementation runs
        // on the host.
        adata.x = std::mem::replace(
            &mut adata.x,
            Matrix::Sparse(sc_kernels::CsrMatrix::zeros(0, 0)),
        )
        .into_host()?;
    }
    let split = comm.size() > 1;
    let stats = match &mut adata.x {
        Matrix::Device(_) => unreachable!("moved to the host above"),
        Matrix::Sparse(m) if params.zero_center => {
            let (dense, stats) =
                sc_kernels::scale::scale_csr_to_dense_across::<f32, f32>(m, params, &*comm)
                    .map_err(kernel_error(STEP))?;
            adata.x = Matrix::Dense(dense);
            stats
        }
        _ if split => {
            return Err(crate::Error::param(
                STEP,
                "when the cells are split across ranks, scale zero-centres a sparse X \
                 (zero_center=False and a dense X run on one GPU)",
            ))
        }
        Matrix::Sparse(m) => {
            let (scaled, stats) =
                sc_kernels::scale::scale_csr_no_center::<f32, f32>(m, params.max_value)
                    .map_err(kernel_error(STEP))?;
            adata.x = Matrix::Sparse(scaled);
            stats
        }
        Matrix::Dense(d) => {
            sc_kernels::scale::scale_dense(d, params).map_err(kernel_error(STEP))?
        }
    };
    adata.var.set_values("mean", ArrayData::F64(stats.mean))?;
    adata.var.set_values("std", ArrayData::F64(stats.std))?;
    Ok(())
}
