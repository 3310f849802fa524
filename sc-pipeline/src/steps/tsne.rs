//! `tsne` (scanpy's `tl.tsne`): the 2-D t-SNE embedding of the cells' representation
//! (`sc_kernels::tsne`) into `obsm[key]` (f32) and scanpy's `uns[...]['params']`. Its row
//! (`--tsne`, off by default) runs after umap on the representation neighbors reads (`X_pca`,
//! or harmony's). On the run's first GPU when it has one (`sc_kernels::tsne::tsne_gpu`: the
//! repulsion by FFT, seconds at a million cells), else on the host (Barnes-Hut: minutes from
//! about 100,000 cells on a few cores).

use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{kernel_error, representation};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::tsne::TsneParams;

/// The pipeline's row: on the first GPU of the run (none: the CPU).
pub(crate) const ROW: Step = Step {
    name: "tsne",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_tsne,
    run: |a, env: &StepEnv<'_>| {
        let params = env.config.tsne.expect("the row runs only with tsne");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        tsne_on(
            a,
            env.config.neighbors_use_rep.as_deref(),
            &params,
            "X_tsne",
            gpu,
        )?;
        Ok(format!(
            "perplexity {}, {} iterations on the {}",
            params.perplexity,
            params.max_iter,
            if gpu.is_some() { "GPU" } else { "CPU" }
        ))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::tsne::KERNELS,
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The GPU holds the representation (at most 50 f32 a cell) and the kNN of `3 perplexity + 2`
/// (index and distance, 8 bytes each) while the affinities are made from it (`k` entries a cell
/// of 28 bytes: column, value, mirror key and the sort's second buffer); then the descent holds
/// the affinities (20 bytes an entry), ten f64 vectors of a cell, and the grid's transforms
/// (at most 5 arrays of 6,000^2 doubles, real and complex: 2.9 GB; far less until the
/// embedding is thousands of units across).
fn device_bytes(s: &Sizes, config: &PipelineConfig) -> StepBytes {
    let n = s.n_obs as u64;
    let perplexity = config.tsne.map_or(30.0, |p| p.perplexity);
    let k = (3.0 * perplexity) as u64 + 1;
    let affinities = n * 50 * 4 + n * (k + 1) * 8 + n * k * 28 + 2 * (n + 1) * 8;
    let descent = n * k * 20 + 2 * (n + 1) * 8 + 10 * n * 8 + 2 * 5 * 36_000_000 * 8;
    StepBytes {
        kept: 0,
        transient: affinities.max(descent),
    }
}

/// Embeds the representation `use_rep` (see [`representation`]) into `obsm[key]` on `gpu`
/// (none: the CPU); writes `uns[key without its 'X_' prefix]['params']` as scanpy.
pub fn tsne_on(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    params: &TsneParams,
    key: &str,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    const STEP: &str = "tsne";
    let (rep, _) = representation(adata, use_rep, STEP)?;
    let y = match gpu {
        Some(ctx) => sc_kernels::tsne::tsne_gpu(ctx, &rep, params),
        None => sc_kernels::tsne::tsne(&rep, params),
    }
    .map_err(kernel_error(STEP))?;
    adata.obsm.insert(
        key.into(),
        DenseArray::new(vec![y.n_rows, 2], ArrayData::F32(y.data))?,
    );
    let mut p = vec![
        ("perplexity", Value::float(params.perplexity)),
        (
            "early_exaggeration",
            Value::float(params.early_exaggeration),
        ),
        ("learning_rate", Value::float(params.learning_rate)),
        ("metric", Value::str("euclidean")),
        ("n_components", Value::int(2)),
    ];
    if let Some(r) = use_rep {
        p.push(("use_rep", Value::str(r)));
    }
    adata.uns.insert(
        key.strip_prefix("X_").unwrap_or(key).into(),
        Value::dict([("params", Value::dict(p))]),
    );
    Ok(())
}

/// [`tsne_on`] where X lives (its GPU when on one).
pub fn tsne(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    params: &TsneParams,
    key: &str,
) -> Result<()> {
    let gpu = super::x_gpu(adata);
    tsne_on(adata, use_rep, params, key, gpu.as_deref())
}
