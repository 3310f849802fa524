//! The GPU twin of [`super::log1p`].

use super::check_base;
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::streamed::{csr_blocks, update_values_in_place};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceCsr, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "log1p",
    source: include_str!("log1p.cu"),
};

/// Log-transforms the stored values of a device matrix in place (finite values, as the pipeline
/// checks before upload). `log1pf` is within 2 ulp of the CPU's `ln_1p`.
pub fn log1p_gpu(ctx: &GpuContext, x: &mut DeviceCsr, base: Option<f64>) -> Result<()> {
    check_base(base)?;
    let n = x.nnz() as u64;
    let ln_base = base.map_or(0.0, f64::ln);
    let mut trace = PhaseTrace::new(ctx, "log1p");
    let f = ctx.function(SRC, "log1p_values")?;
    trace.mark("module")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.data).arg(&n).arg(&ln_base);
    ctx.launch(l, ctx.filling_grid(x.nnz()), "log1p_values")?;
    trace.mark("kernel")
}

/// [`log1p_gpu`] of a host matrix streamed through the device in row blocks of at most
/// `block_bytes`, the values written back in place (the same values bit for bit).
pub fn log1p_streamed(
    ctx: &GpuContext,
    x: &mut CsrMatrix<f32>,
    base: Option<f64>,
    block_bytes: usize,
) -> Result<()> {
    check_base(base)?;
    // log1p reads the values alone.
    let blocks = csr_blocks(x, block_bytes);
    update_values_in_place(ctx, x, &blocks, false, |block, _| {
        log1p_gpu(ctx, block, base)
    })
}
