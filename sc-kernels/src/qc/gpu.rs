//! The GPU twin of [`super::calculate_qc_metrics`]: the sums on the device (`qc.cu`), the
//! columns assembled by the same host code as the CPU's.

use super::{assemble, check_params, QcMetrics, QcParams, QcSums};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::warps_for_rows;
use crate::gpu::streamed::{for_each_row_block, HostRows, RowBlocks};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;
use std::ops::Range;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "qc",
    source: include_str!("qc.cu"),
};

/// Rows per launch of `qc_rows`: a gene's small-integer values (below 1,024) of this many rows
/// sum to less than 2^32, the room its packed sum has (qc.cu).
const PACKED_ROWS: usize = 4_000_000;

/// The per-cell and per-gene sums of a device matrix (`ns`: `percent_top` ascending).
pub fn qc_sums_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &QcParams,
    ns: &[usize],
) -> Result<QcSums> {
    qc_sums_gpu_in_launches(ctx, x, params, ns, PACKED_ROWS)
}

/// [`qc_sums_gpu`] with at most `rows_per_launch` rows a launch (at most [`PACKED_ROWS`]; tests
/// use a few, to cover the launches' seams).
pub fn qc_sums_gpu_in_launches(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &QcParams,
    ns: &[usize],
    rows_per_launch: usize,
) -> Result<QcSums> {
    let rows_per_launch = rows_per_launch.clamp(1, PACKED_ROWS);
    let mut trace = PhaseTrace::new(ctx, "calculate_qc_metrics");
    let (n, g) = (x.n_rows, x.n_cols);
    let n_qc = params.qc_vars.len();
    let mut masks = vec![0u8; n_qc * g];
    for (q, (_, m)) in params.qc_vars.iter().enumerate() {
        for (j, &b) in m.iter().enumerate() {
            masks[q * g + j] = b as u8;
        }
    }
    let ns32: Vec<u32> = ns.iter().map(|&v| v as u32).collect();
    // Empty device arrays still need a valid (non-null) allocation for the kernel signature.
    let d_masks = ctx.upload(if masks.is_empty() { &[0u8][..] } else { &masks })?;
    let d_ns = ctx.upload(if ns32.is_empty() { &[0u32][..] } else { &ns32 })?;
    let n_genes = ctx.alloc::<i32>(n)?;
    let total = ctx.alloc::<f64>(n)?;
    let qc = ctx.alloc::<f64>((n_qc * n).max(1))?;
    let top = ctx.alloc::<f64>((ns.len() * n).max(1))?;
    let gene_n_cells = ctx.zeros::<u64>(g)?;
    let gene_sums = ctx.zeros::<f64>(g)?;
    let gene_packed = ctx.zeros::<u64>(g)?;
    let f = ctx.function(SRC, "qc_rows")?;
    let f_unpack = ctx.function(SRC, "qc_unpack_genes")?;
    trace.mark("module and memory")?;
    let (n64, g64, nq, nt) = (n as u64, g as u64, n_qc as u32, ns.len() as u32);
    for r0 in (0..n).step_by(rows_per_launch) {
        let r1 = (r0 + rows_per_launch).min(n);
        let (r0_64, r1_64) = (r0 as u64, r1 as u64);
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr)
            .arg(&x.indices)
            .arg(&x.data)
            .arg(&r0_64)
            .arg(&r1_64)
            .arg(&n64)
            .arg(&g64)
            .arg(&d_masks)
            .arg(&nq)
            .arg(&d_ns)
            .arg(&nt)
            .arg(&n_genes)
            .arg(&total)
            .arg(&qc)
            .arg(&top)
            .arg(&gene_n_cells)
            .arg(&gene_sums)
            .arg(&gene_packed);
        // A warp per row, 8 rows per block of 256 threads (qc.cu: QC_WARPS).
        ctx.launch(l, warps_for_rows(r1 - r0), "qc_rows")?;
        let mut l = ctx.launcher(&f_unpack);
        l.arg(&gene_packed)
            .arg(&g64)
            .arg(&gene_n_cells)
            .arg(&gene_sums);
        ctx.launch(l, grid_stride(g), "qc_unpack_genes")?;
    }
    trace.mark("kernel")?;
    // Each column straight into its own array (cutting them from one download copied 40 MB on
    // one thread at a million cells).
    let columns = |v: &DeviceVec<f64>, count: usize| -> Result<Vec<Vec<f64>>> {
        (0..count)
            .map(|c| ctx.download_range(v, c * n..(c + 1) * n))
            .collect()
    };
    let sums = QcSums {
        n_genes: ctx.download(&n_genes)?,
        total: ctx.download(&total)?,
        top: columns(&top, ns.len())?,
        qc: columns(&qc, n_qc)?,
        gene_n_cells: ctx
            .download(&gene_n_cells)?
            .into_iter()
            .map(|c| c as i64)
            .collect(),
        gene_sums: ctx.download(&gene_sums)?,
    };
    trace.mark("downloads")?;
    Ok(sums)
}

/// `calculate_qc_metrics` of a device matrix of counts (finite values, as the pipeline checks
/// before uploading).
pub fn calculate_qc_metrics_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &QcParams,
) -> Result<QcMetrics> {
    let ns = check_params(x.n_cols, params)?;
    let sums = qc_sums_gpu(ctx, x, params, &ns)?;
    let mut trace = PhaseTrace::new(ctx, "calculate_qc_metrics");
    let metrics = assemble::<f32>(&sums, params, &ns, x.n_rows);
    trace.mark("host")?;
    Ok(metrics)
}

/// `calculate_qc_metrics` of a host matrix of counts streamed through the device in row blocks
/// of at most `block_bytes` (see [`crate::gpu::streamed`]).
pub fn calculate_qc_metrics_streamed(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    params: &QcParams,
    block_bytes: usize,
) -> Result<QcMetrics> {
    let src = HostRows::new(x, block_bytes);
    calculate_qc_metrics_blocks(ctx, &src, params)
}

/// `calculate_qc_metrics` of counts made on the device block by block: the per-cell sums of
/// each block follow one another, its per-gene sums are added up.
pub fn calculate_qc_metrics_blocks(
    ctx: &GpuContext,
    src: &dyn RowBlocks,
    params: &QcParams,
) -> Result<QcMetrics> {
    let mut qc = QcBlocks::new(src.n_cols(), params)?;
    for_each_row_block(ctx, src, |block, _| qc.add(ctx, &block).map(|_| ()))?;
    Ok(qc.finish())
}

/// [`calculate_qc_metrics_blocks`] one block at a time, for a pass over the blocks that does
/// more with each: the blocks are the cells in order.
pub struct QcBlocks<'a> {
    params: &'a QcParams,
    /// `percent_top` ascending.
    ns: Vec<usize>,
    sums: QcSums,
}

impl<'a> QcBlocks<'a> {
    /// The metrics of no cell yet, of `n_cols` genes.
    pub fn new(n_cols: usize, params: &'a QcParams) -> Result<Self> {
        let ns = check_params(n_cols, params)?;
        let sums = QcSums::empty(params.qc_vars.len(), ns.len(), n_cols);
        Ok(QcBlocks { params, ns, sums })
    }

    /// Takes the sums of the cells after those so far; returns their positions.
    pub fn add(&mut self, ctx: &GpuContext, block: &DeviceCsr) -> Result<Range<usize>> {
        let sums = qc_sums_gpu(ctx, block, self.params, &self.ns)?;
        let start = self.sums.n_genes.len();
        self.sums.append(sums);
        Ok(start..self.sums.n_genes.len())
    }

    /// The stored non-zero values of each cell so far.
    pub fn n_genes(&self) -> &[i32] {
        &self.sums.n_genes
    }

    /// The metrics of all cells added.
    pub fn finish(self) -> QcMetrics {
        let n = self.sums.n_genes.len();
        assemble::<f32>(&self.sums, self.params, &self.ns, n)
    }
}
