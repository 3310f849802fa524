//! The GPU twin of [`super::scale_csr_to_dense`]: column statistics by
//! [`crate::gpu::reduce::col_moments`], the per-column constants by the CPU's code, the dense
//! output written on the device; and of [`super::scale_dense`] on a dense device matrix.

use super::{check, clip, stats_across, ScaleParams, ScaleStats};
use crate::comm::{Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::dense_reduce::{dense_col_moments, finite_by_sums};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::{col_moments, ColumnMoments, Transform};
use crate::gpu::streamed::{csr_blocks_with_output, for_each_row_block, HostRows, RowBlocks};
use crate::gpu::{blocks_for_rows, DeviceCsr, DeviceDense, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "scale",
    source: include_str!("scale.cu"),
};

/// Scaling on the GPU zero-centres (its output is dense).
fn check_centred(params: &ScaleParams) -> Result<()> {
    check(params)?;
    if !params.zero_center {
        return Err(KernelError::Unsupported(
            "scale on the GPU zero-centres (a dense output); without centring use the CPU".into(),
        ));
    }
    Ok(())
}

/// The per-column constants of the scaling kernel, on the device.
struct Constants {
    n_cols: usize,
    mean: DeviceVec<f64>,
    std: DeviceVec<f64>,
    /// What a stored zero becomes: `clip(-mean / std)`.
    zero: DeviceVec<f32>,
}

impl Constants {
    fn new(ctx: &GpuContext, st: &ScaleStats, params: &ScaleParams) -> Result<Self> {
        let zero_val: Vec<f32> = (0..st.mean.len())
            .map(|j| clip(-st.mean[j] / st.std[j], params) as f32)
            .collect();
        let pad = |v: &[f64]| if v.is_empty() { vec![0.0] } else { v.to_vec() };
        Ok(Constants {
            n_cols: st.mean.len(),
            mean: ctx.upload(&pad(&st.mean))?,
            std: ctx.upload(&pad(&st.std))?,
            zero: ctx.upload(if zero_val.is_empty() {
                &[0f32][..]
            } else {
                &zero_val
            })?,
        })
    }
}

/// The dense scaled copy of `x` with the given constants.
fn scale_block(
    ctx: &GpuContext,
    x: &DeviceCsr,
    c: &Constants,
    params: &ScaleParams,
) -> Result<DeviceDense> {
    let out = ctx.alloc::<f32>(x.n_rows * x.n_cols)?;
    let (n, g64) = (x.n_rows as u64, x.n_cols as u64);
    let has_max = params.max_value.is_some() as i32;
    let max_value = params.max_value.unwrap_or(0.0);
    let f = ctx.function(SRC, "scale_to_dense")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&g64)
        .arg(&c.mean)
        .arg(&c.std)
        .arg(&c.zero)
        .arg(&has_max)
        .arg(&max_value)
        .arg(&out);
    ctx.launch(l, blocks_for_rows(x.n_rows, 256), "scale_to_dense")?;
    Ok(DeviceDense {
        n_rows: x.n_rows,
        n_cols: x.n_cols,
        data: out,
    })
}

/// Scales a dense device matrix in place, as [`super::scale_dense`] does on the host (the same
/// bits; with or without centring), the statistics taken over the cells of all ranks of
/// `comm`. Every check runs before the one write: a refused call leaves `x` as it was.
pub fn scale_dense_gpu_across(
    ctx: &GpuContext,
    x: &mut DeviceDense,
    params: &ScaleParams,
    comm: &dyn Communicator,
) -> Result<ScaleStats> {
    check(params)?;
    let (sums, sq) = dense_col_moments(ctx, x)?;
    finite_by_sums(ctx, x, &sums)?;
    let st = stats_across(sums, sq, x.n_rows, comm)?;
    if x.n_rows > 0 && x.n_cols > 0 {
        let c = Constants::new(ctx, &st, params)?;
        let (n, g) = (x.n_rows as u64, x.n_cols as u64);
        let center = params.zero_center as i32;
        let has_max = params.max_value.is_some() as i32;
        let max_value = params.max_value.unwrap_or(0.0);
        let f = ctx.function(SRC, "scale_dense_in_place")?;
        let mut l = ctx.launcher(&f);
        l.arg(&x.data)
            .arg(&n)
            .arg(&g)
            .arg(&c.mean)
            .arg(&c.std)
            .arg(&center)
            .arg(&has_max)
            .arg(&max_value);
        ctx.launch(l, ctx.filling_rows(x.n_rows), "scale_dense_in_place")?;
    }
    Ok(st)
}

/// Scales a device matrix with zero-centring into a dense device matrix (f32).
pub fn scale_csr_to_dense_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &ScaleParams,
) -> Result<(DeviceDense, ScaleStats)> {
    scale_csr_to_dense_gpu_across(ctx, x, params, &SingleRank)
}

/// [`scale_csr_to_dense_gpu`] of one rank's cells, the means and deviations taken over the
/// cells of all ranks of `comm`.
pub fn scale_csr_to_dense_gpu_across(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &ScaleParams,
    comm: &dyn Communicator,
) -> Result<(DeviceDense, ScaleStats)> {
    check_centred(params)?;
    let m = col_moments(ctx, x, Transform::Identity, None)?;
    let st = stats_across(m.sums, m.sq, x.n_rows, comm)?;
    let dense = scale_block(ctx, x, &Constants::new(ctx, &st, params)?, params)?;
    Ok((dense, st))
}

/// [`scale_csr_to_dense_gpu`] of a host matrix streamed through the device in row blocks of at
/// most `block_bytes` (of CSR input; the block's dense output comes on top): one pass for the
/// column statistics, one that scales each block and copies it into the host result.
pub fn scale_csr_to_dense_streamed(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    params: &ScaleParams,
    block_bytes: usize,
) -> Result<(DenseMatrix<f32>, ScaleStats)> {
    check_centred(params)?;
    let g = x.n_cols;
    // A block's dense output (rows x genes f32) shares the budget with its input.
    let src = HostRows {
        x,
        ranges: csr_blocks_with_output(x, block_bytes, g * 4),
    };
    let st = scale_stats_blocks(ctx, &src)?;
    let scaler = DenseScaler::new(ctx, &st, params)?;
    let mut out = DenseMatrix::zeros(x.n_rows, g);
    for_each_row_block(ctx, &src, |block, rows| {
        let dense = scaler.apply(ctx, &block)?;
        ctx.download_into(&dense.data, &mut out.data[rows.start * g..rows.end * g])
    })?;
    Ok((out, st))
}

/// The column means and deviations `scale` uses, over the rows of every block of `src`.
pub fn scale_stats_blocks(ctx: &GpuContext, src: &dyn RowBlocks) -> Result<ScaleStats> {
    let mut m = ColumnMoments::zeros(src.n_cols());
    for_each_row_block(ctx, src, |block, _| {
        m.add(&col_moments(ctx, &block, Transform::Identity, None)?);
        Ok(())
    })?;
    Ok(super::stats_of_moments(&m, src.n_rows()))
}

/// Zero-centred scaling with fixed statistics, for rows made one block at a time (on any
/// stream: the constants are on the device before [`DenseScaler::new`] returns).
pub struct DenseScaler {
    constants: Constants,
    params: ScaleParams,
}

impl DenseScaler {
    pub fn new(ctx: &GpuContext, st: &ScaleStats, params: &ScaleParams) -> Result<Self> {
        check_centred(params)?;
        let constants = Constants::new(ctx, st, params)?;
        ctx.synchronize()?;
        Ok(DenseScaler {
            constants,
            params: params.clone(),
        })
    }

    /// A bound on the scaled values' magnitude: `max_value` where they are clipped (zero-centred
    /// scaling clips on both sides).
    pub fn max_abs(&self) -> Option<f32> {
        self.params.max_value.map(|m| m as f32)
    }

    /// The dense scaled copy of `x` (its columns those of the statistics), on `ctx`'s stream.
    pub fn apply(&self, ctx: &GpuContext, x: &DeviceCsr) -> Result<DeviceDense> {
        if x.n_cols != self.constants.n_cols {
            return Err(KernelError::Shape(format!(
                "scaling {} columns with statistics of {}",
                x.n_cols, self.constants.n_cols
            )));
        }
        scale_block(ctx, x, &self.constants, &self.params)
    }
}
