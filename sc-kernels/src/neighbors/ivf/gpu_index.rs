//! The inverted file on one GPU with its probes settled: what every part searches.

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::ivf::probes::{settle_probes, target_of};
use crate::neighbors::ivf::recall::{exact_sample_gpu, recall_cells, SampleKnn};
use crate::neighbors::ivf::{default_bound_probes, IvfParams, IvfShape, IvfStats};
use crate::neighbors::knn::{check_k, EXTRA};
use crate::neighbors::lists::gpu::{centroids_gpu, ListLayout};
use crate::neighbors::lists::{probe_table, refs_per_cell, Lists};
use crate::neighbors::scan::device::{RefTable, MAX_DIMS, MAX_K};

/// The inverted file on one GPU, with its probes settled: what every part searches.
pub(crate) struct GpuIndex {
    pub(crate) lists: Lists,
    pub(crate) perm: DeviceVec<u32>,
    /// The cells in list order, and their reference-major table.
    pub(crate) xp: DeviceVec<f32>,
    pub(crate) table: RefTable,
    pub(crate) sample: SampleKnn,
    pub(crate) stats: IvfStats,
    pub(crate) probe_ptr: Vec<u32>,
    pub(crate) probes: Vec<u32>,
    /// Candidates a cell keeps (`k + EXTRA`, at most the cells): each row of the probe table
    /// reaches at least this many cells.
    pub(crate) kc: usize,
    /// Lists the tensor scan's first pass bounds from (see [`IvfParams::bound_probes`]).
    pub(crate) bound_probes: usize,
}

/// The index's shape for `k` neighbours of the cells of `x`, after the checks every GPU
/// index makes before any device work.
pub(crate) fn gpu_shape(x: &DenseMatrix<f32>, k: usize, params: &IvfParams) -> Result<IvfShape> {
    let (n, d) = (x.n_rows, x.n_cols);
    check_k(n, k)?;
    x.check_finite()?;
    let shape = params.settle(n)?;
    if d == 0 || d > MAX_DIMS || k > MAX_K {
        return Err(KernelError::Unsupported(format!(
            "the GPU kNN takes 1 to {} dimensions and k up to {} (got {d} and {k})",
            MAX_DIMS, MAX_K
        )));
    }
    Ok(shape)
}

impl GpuIndex {
    /// Centroids trained with the device's assignments, every cell's list, the sample's exact
    /// kNN (which chooses the probes, alike on every part) and the probe table.
    pub(crate) fn build(
        ctx: &GpuContext,
        x: &DenseMatrix<f32>,
        xd: &DeviceVec<f32>,
        k: usize,
        params: &IvfParams,
        trace: &mut PhaseTrace<'_>,
    ) -> Result<GpuIndex> {
        let shape = gpu_shape(x, k, params)?;
        ctx.bind_to_thread()?;
        let centroids = centroids_gpu(ctx, xd, x.n_rows, x.n_cols, shape.n_lists)?;
        trace.mark("train")?;
        GpuIndex::with_centroids(ctx, x, xd, k, &shape, centroids, None, trace)
    }

    /// The index of `shape` from its trained `centroids`; `sample`, the recall sample's exact
    /// kNN when measured elsewhere (else measured here, on the cells in list order).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_centroids(
        ctx: &GpuContext,
        x: &DenseMatrix<f32>,
        xd: &DeviceVec<f32>,
        k: usize,
        shape: &IvfShape,
        centroids: Vec<f32>,
        sample: Option<SampleKnn>,
        trace: &mut PhaseTrace<'_>,
    ) -> Result<GpuIndex> {
        let (n, d) = (x.n_rows, x.n_cols);
        let kc = (k + EXTRA).min(n);
        let (assign, layout) = ListLayout::new(ctx, xd, d, &centroids, shape.n_lists)?;
        let ListLayout {
            lists,
            perm,
            xp,
            table,
        } = layout;
        trace.mark("lists")?;
        let sample = match sample {
            Some(s) => s,
            None => exact_sample_gpu(ctx, &x.data, &table, Some(&perm), recall_cells(n), k)?,
        };
        let n_probes = settle_probes(shape.probes, &sample, &assign, &centroids, d);
        let (probe_ptr, probes) = probe_table(&centroids, d, &lists.sizes, n_probes, kc);
        trace.mark("recall sample")?;
        let stats = IvfStats {
            n_lists: shape.n_lists,
            n_probes,
            target_recall: target_of(shape.probes),
            refs_per_cell: refs_per_cell(&lists.sizes, &probe_ptr, &probes, n),
            recall: None,
            f32_queries: None,
            bound_probes: None,
            descent_rounds: 0,
            scan_recall: None,
            descent_replaced: 0,
            descent_declined: None,
        };
        Ok(GpuIndex {
            lists,
            perm,
            xp,
            table,
            sample,
            stats,
            probe_ptr,
            probes,
            kc,
            bound_probes: shape
                .bound_probes
                .map_or_else(|| default_bound_probes(n_probes), |b| b.min(n_probes)),
        })
    }
}
