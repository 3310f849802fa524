//! The GPU twin of [`super::embedding_density`]: the same checks, groups, bandwidths and
//! scaling on the host, each group's `n^2` kernel sums on the device (`embedding_density.cu`).

use super::{by_group, Kernel};
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_for, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "embedding_density",
    source: include_str!("embedding_density.cu"),
};

/// The module [`embedding_density_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::embedding_density`] on `ctx`'s GPU: within 1e-5 of the host's scaled densities.
pub fn embedding_density_gpu(
    ctx: &GpuContext,
    xy: &[f64],
    groups: &[u32],
    n_groups: usize,
) -> Result<Vec<f64>> {
    ctx.bind_to_thread()?;
    let f = ctx.function(SRC, "embedding_density_sums")?;
    by_group(
        xy,
        groups,
        n_groups,
        &mut |points, Kernel { ia, ib, ic }| {
            let n = (points.len() / 2) as u64;
            let d = ctx.upload(points)?;
            let mut z = ctx.alloc::<f64>(n as usize)?;
            let mut l = ctx.launcher(&f);
            l.arg(&d).arg(&n).arg(&ia).arg(&ib).arg(&ic).arg(&mut z);
            // Blocks of `gpu::BLOCK` (256) threads, the kernel's tile.
            ctx.launch(l, grid_for(n as usize), "embedding_density_sums")?;
            ctx.download(&z)
        },
    )
}
