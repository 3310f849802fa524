//! `draw_graph` (scanpy's `tl.draw_graph`, its default layout `'fa'`): the ForceAtlas2 layout
//! of the neighbors graph (`sc_kernels::draw_graph`) into `obsm['X_draw_graph_fa']` (f64) and
//! `uns['draw_graph']['params']` (`layout`, `random_state`), from scanpy's start (numpy's
//! uniform draws of `random_state`) or a given one. Its row (`--draw-graph`, off by default)
//! runs after tsne. On the run's first GPU when it has one (`force_atlas2_gpu`: the host's
//! layout bit for bit), else on the host's cores (Barnes-Hut: seconds at 10,000 cells, minutes
//! from about 100,000 on a few cores).

use super::step::{no_budget_check, no_input_check, Phase, Sizes, Step, StepBytes, StepEnv};
use super::{connectivities, kernel_error};
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::steps::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::draw_graph::{force_atlas2, force_atlas2_gpu, numpy_start, Fa2Params};
use sc_kernels::gpu::GpuContext;

const STEP: &str = "draw_graph";

/// scanpy's layout name, the key's ending.
pub const LAYOUT: &str = "fa";

/// The pipeline's row: on the first GPU of the run (none: the CPU), from scanpy's start of
/// seed 0.
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::CellGraph,
    enabled: PipelineConfig::runs_draw_graph,
    run: |a, env: &StepEnv<'_>| {
        let params = env
            .config
            .draw_graph
            .expect("the row runs only with draw_graph");
        let gpu = env.gpus.first().map(|g| g.as_ref());
        draw_graph(a, &params, Start::Numpy(0), None, gpu)?;
        let on = if gpu.is_some() { "GPU" } else { "CPU" };
        Ok(format!(
            "ForceAtlas2, {} iterations on the {on}",
            params.iterations
        ))
    },
    generated: None,
    device_bytes,
    kernels: &sc_kernels::draw_graph::KERNELS,
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The layout's buffers and the graph on the device (its stored values counted from the cells:
/// a kNN graph's few dozen a cell, twice for safety).
fn device_bytes(s: &Sizes, _: &PipelineConfig) -> StepBytes {
    let n = s.n_obs as u64;
    StepBytes {
        kept: 0,
        transient: sc_kernels::draw_graph::device_bytes(n, 2 * 30 * n),
    }
}

/// Where the layout starts.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    /// scanpy's `init_pos=None`: `np.random.seed(seed); np.random.random((n, 2))`.
    Numpy(u32),
    /// Given coordinates (`n x 2`, row-major; scanpy's `init_pos` naming an obsm key or
    /// `'paga'`), with the `random_state` to record.
    Given(&'a [f64], u32),
}

/// Lays out `obsp['connectivities']` from `start` into `obsm['X_draw_graph_{key_ext or
/// 'fa'}']` on `gpu` when given (the same bits), else on the host, and records
/// `uns['draw_graph']['params']` as scanpy.
pub fn draw_graph(
    adata: &mut AnnData,
    params: &Fa2Params,
    start: Start<'_>,
    key_ext: Option<&str>,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    let graph = connectivities(adata, STEP)?;
    let n = graph.n_rows;
    let (drawn, seed);
    let start = match start {
        Start::Numpy(s) => {
            seed = s;
            drawn = numpy_start(n, s);
            &drawn[..]
        }
        Start::Given(xy, s) => {
            seed = s;
            if xy.len() != 2 * n {
                return Err(Error::param(
                    STEP,
                    format!(
                        "the start has {} values, expected 2 for each of the {n} cells",
                        xy.len()
                    ),
                ));
            }
            xy
        }
    };
    let layout = match gpu {
        Some(ctx) => force_atlas2_gpu(ctx, graph, start, params),
        None => force_atlas2(graph, start, params),
    }
    .map_err(kernel_error(STEP))?;
    adata.obsm.insert(
        format!("X_draw_graph_{}", key_ext.unwrap_or(LAYOUT)),
        DenseArray::new(vec![n, 2], ArrayData::F64(layout))?,
    );
    adata.uns.insert(
        STEP.into(),
        Value::dict([(
            "params",
            Value::dict([
                ("layout", Value::str(LAYOUT)),
                ("random_state", Value::int(i64::from(seed))),
            ]),
        )]),
    );
    Ok(())
}
