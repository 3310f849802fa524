//! The bounding box of 2-D points on the device (`bounds.cu`): a part per block of a filling
//! grid, folded on the host (min and max are exact in any order). t-SNE's interpolation grid and
//! ForceAtlas2's Morton keys are laid over it each iteration.

use super::module_cache::KernelSource;
use super::{DeviceVec, GpuContext};
use crate::error::Result;
use rmm_cuda::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

pub const SRC: KernelSource = KernelSource {
    name: "bounds",
    source: include_str!("bounds.cu"),
};

/// The box of `n` points (x, y interleaved) as often as asked, with its buffer of parts.
pub struct Box2d {
    cfg: LaunchConfig,
    n: u64,
    parts: DeviceVec<f64>,
    kernel: CudaFunction,
}

impl Box2d {
    pub fn new(ctx: &GpuContext, n: usize) -> Result<Box2d> {
        let cfg = ctx.filling_grid(n);
        Ok(Box2d {
            cfg,
            n: n as u64,
            parts: ctx.alloc::<f64>(4 * cfg.grid_dim.0 as usize)?,
            kernel: ctx.function(SRC, "box_2d_parts")?,
        })
    }

    /// `[min x, min y, max x, max y]` of `points` (`n` of them), waited for.
    pub fn of(&mut self, ctx: &GpuContext, points: &DeviceVec<f64>) -> Result<[f64; 4]> {
        let mut l = ctx.launcher(&self.kernel);
        l.arg(points).arg(&self.n).arg(&mut self.parts);
        ctx.launch(l, self.cfg, "box_2d_parts")?;
        let inf = f64::INFINITY;
        Ok(ctx
            .download(&self.parts)?
            .chunks(4)
            .fold([inf, inf, -inf, -inf], |b, q| {
                [
                    b[0].min(q[0]),
                    b[1].min(q[1]),
                    b[2].max(q[2]),
                    b[3].max(q[3]),
                ]
            }))
    }
}
