//! [`super::pseudotime`] on a GPU: the distances from the root (`dpt.cu`, a thread a cell,
//! the host's operations: the same bits), scaled as the host scales them.

use super::{check_pseudotime, scaled, STATIONARY};
use crate::dense::DenseMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_stride, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "dpt",
    source: include_str!("dpt.cu"),
};

/// The module [`pseudotime_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::pseudotime`] with the distances on `ctx`'s GPU: the same values, bit for bit.
pub fn pseudotime_gpu(
    ctx: &GpuContext,
    basis: &DenseMatrix<f32>,
    evals: &[f32],
    root: usize,
    component: &[u32],
) -> Result<Vec<f32>> {
    check_pseudotime(basis, evals, root, component)?;
    let (n, k) = (basis.n_rows, basis.n_cols);
    ctx.bind_to_thread()?;
    let x = ctx.upload(&basis.data)?;
    let (ev, comp) = (ctx.upload(evals)?, ctx.upload(component)?);
    let out = ctx.alloc::<f32>(n)?;
    let (n64, k32, from) = (n as u64, k as u32, root as u64);
    let f = ctx.function(SRC, "dpt_distance_row")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x).arg(&n64).arg(&k32).arg(&ev).arg(&STATIONARY);
    l.arg(&from).arg(&comp).arg(&out);
    ctx.launch(l, grid_stride(n), "dpt_distance_row")?;
    Ok(scaled(ctx.download(&out)?))
}
