//! The GPU twin of [`super::scale_csr_to_dense`]: column statistics by
//! [`crate::gpu::reduce::col_moments`], the per-column constants by the CPU's code, the dense
//! output written on the device.

use super::{check, clip, std_of, ScaleParams, ScaleStats};
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::{col_moments, Transform};
use crate::gpu::{blocks_for_rows, DeviceCsr, DeviceDense, GpuContext};
use crate::stats::mean_var_from_sums;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "scale",
    source: include_str!("scale.cu"),
};

/// Scales a device matrix with zero-centring into a dense device matrix (f32).
pub fn scale_csr_to_dense_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    params: &ScaleParams,
) -> Result<(DeviceDense, ScaleStats)> {
    check(params)?;
    if !params.zero_center {
        return Err(KernelError::Unsupported(
            "scale on the GPU zero-centres (a dense output); without centring use the CPU".into(),
        ));
    }
    let m = col_moments(ctx, x, Transform::Identity, None)?;
    let (mean, var) = mean_var_from_sums(&m.sums, &m.sq, x.n_rows);
    let st = ScaleStats {
        mean,
        std: std_of(var),
    };
    let zero_val: Vec<f32> = (0..x.n_cols)
        .map(|j| clip(-st.mean[j] / st.std[j], params) as f32)
        .collect();
    let pad = |v: &[f64]| if v.is_empty() { vec![0.0] } else { v.to_vec() };
    let d_mean = ctx.upload(&pad(&st.mean))?;
    let d_std = ctx.upload(&pad(&st.std))?;
    let d_zero = ctx.upload(if zero_val.is_empty() {
        &[0f32][..]
    } else {
        &zero_val
    })?;
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
        .arg(&d_mean)
        .arg(&d_std)
        .arg(&d_zero)
        .arg(&has_max)
        .arg(&max_value)
        .arg(&out);
    ctx.launch(l, blocks_for_rows(x.n_rows, 256), "scale_to_dense")?;
    Ok((
        DeviceDense {
            n_rows: x.n_rows,
            n_cols: x.n_cols,
            data: out,
        },
        st,
    ))
}
