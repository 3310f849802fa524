//! `tsne` (scanpy's `tl.tsne`): the 2-D t-SNE embedding of the cells' representation
//! (`sc_kernels::tsne`) into `obsm[key]` (f32) and scanpy's `uns[...]['params']`. Its row
//! (`--tsne`, off by default) runs after umap on the representation neighbors reads (`X_pca`,
//! or harmony's). Computed on the host (every cell's Barnes-Hut forces, 1,000 iterations:
//! minutes from about 100,000 cells on a few cores).

use super::step::{no_budget_check, no_device_bytes, no_input_check, Phase, Step, StepEnv};
use super::{kernel_error, representation};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::tsne::{tsne as embed, TsneParams};

/// The pipeline's row: on the host.
pub(crate) const ROW: Step = Step {
    name: "tsne",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_tsne,
    run: |a, env: &StepEnv<'_>| {
        let params = env.config.tsne.expect("the row runs only with tsne");
        tsne(
            a,
            env.config.neighbors_use_rep.as_deref(),
            &params,
            "X_tsne",
        )?;
        Ok(format!(
            "perplexity {}, {} iterations on the CPU",
            params.perplexity, params.max_iter
        ))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
};

/// Embeds the representation `use_rep` (see [`representation`]) into `obsm[key]`; writes
/// `uns[key without its 'X_' prefix]['params']` as scanpy.
pub fn tsne(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    params: &TsneParams,
    key: &str,
) -> Result<()> {
    const STEP: &str = "tsne";
    let (rep, _) = representation(adata, use_rep, STEP)?;
    let y = embed(&rep, params).map_err(kernel_error(STEP))?;
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
