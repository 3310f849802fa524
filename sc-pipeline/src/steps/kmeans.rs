//! `kmeans` (rapids-singlecell's `tl.kmeans`): k-means of the cells' representation
//! (`sc_kernels::kmeans`), its clusters into `obs[key]` as categories `"0"`, `"1"`, ... (the
//! clusters that kept cells, numbered in order), and `uns[key]` with the parameters and the
//! inertia. Its row (`--kmeans N`, off by default) runs after louvain on the representation
//! neighbors reads (`X_pca`, or harmony's). Lloyd's passes over the cells on the run's first
//! GPU when it has one (`kmeans_gpu`: the host's result bit for bit), else on the host.

use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{first_columns, kernel_error, obsm_f32, representation};
use crate::anndata::Value;
use crate::steps::PipelineConfig;
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::kmeans::{kmeans as cluster, kmeans_gpu, KMeansParams, KMeansResult};

/// The pipeline's row: on the first GPU of the run (none: the CPU).
pub(crate) const ROW: Step = Step {
    name: "kmeans",
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_kmeans,
    run: |a, env: &StepEnv<'_>| {
        let params = env.config.kmeans.expect("the row runs only with kmeans");
        let use_rep = env.config.neighbors_use_rep.as_deref();
        let gpu = env.gpus.first().map(|g| g.as_ref());
        let r = kmeans(a, use_rep, None, &params, "kmeans", gpu)?;
        let on = if gpu.is_some() { "GPU" } else { "CPU" };
        Ok(format!(
            "{} clusters: inertia {:.6e} after {} iterations on the {on}",
            params.n_clusters, r.inertia, r.n_iter
        ))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::kmeans::KERNELS,
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The representation (at most 50 f32 a cell), the labels (4 bytes a cell) and the chunks'
/// sums (a few MB) on the device.
fn device_bytes(s: &Sizes, _: &PipelineConfig) -> StepBytes {
    StepBytes {
        kept: 0,
        transient: s.n_obs as u64 * (50 * 4 + 4) + (64 << 20),
    }
}

/// Clusters `obsm[use_rep]` (see [`representation`]; its first `n_pcs` columns when given)
/// with Lloyd's passes on `gpu` when given (the same result), and writes `obs[key]` and
/// `uns[key]`.
pub fn kmeans(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    n_pcs: Option<usize>,
    params: &KMeansParams,
    key: &str,
    gpu: Option<&GpuContext>,
) -> Result<KMeansResult> {
    const STEP: &str = "kmeans";
    let run = |x: &[f32], n: usize, d: usize| {
        match gpu {
            Some(ctx) => kmeans_gpu(ctx, x, n, d, params),
            None => cluster(x, n, d, params),
        }
        .map_err(kernel_error(STEP))
    };
    // obsm's f32 matrix read whole in place; else the representation made (and cut to n_pcs).
    let whole = obsm_f32(adata, use_rep.unwrap_or("X_pca"))
        .filter(|&(_, _, cols)| n_pcs.is_none_or(|d| d == cols));
    let r = match whole {
        Some((x, n, d)) => run(x, n, d)?,
        None => {
            let (rep, _) = representation(adata, use_rep, STEP)?;
            let d = n_pcs.unwrap_or(rep.n_cols);
            if d == 0 || d > rep.n_cols {
                return Err(crate::Error::InvalidParameter {
                    step: STEP,
                    problem: format!(
                        "n_pcs: {d}, but the representation has {} columns",
                        rep.n_cols
                    ),
                });
            }
            let x = first_columns(rep, d).map_err(kernel_error(STEP))?;
            run(&x.data, x.n_rows, d)?
        }
    };
    // The clusters that kept rows, numbered in order.
    let mut number = vec![u32::MAX; params.n_clusters];
    r.labels.iter().for_each(|&l| number[l as usize] = 0);
    let mut n = 0;
    for c in number.iter_mut().filter(|c| **c == 0) {
        *c = n;
        n += 1;
    }
    let labels: Vec<u32> = r.labels.iter().map(|&l| number[l as usize]).collect();
    adata
        .obs
        .set(key, super::cluster_column(&labels, n as usize))?;
    adata.uns.insert(
        key.into(),
        Value::dict([
            (
                "params",
                Value::dict([
                    ("n_clusters", Value::int(params.n_clusters as i64)),
                    ("n_init", Value::int(params.n_init as i64)),
                    ("max_iter", Value::int(params.max_iter as i64)),
                    ("tol", Value::float(params.tol)),
                    ("random_state", Value::int(params.random_state as i64)),
                ]),
            ),
            ("inertia", Value::float(r.inertia)),
            ("n_iter", Value::int(r.n_iter as i64)),
        ]),
    );
    Ok(r)
}
