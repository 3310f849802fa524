//! The spectral start's Lanczos vectors on the GPU ([`super::spectral::Space`], kernels in
//! `umap.cu`): the graph, `sqrt(d)`, the trivial vector, the basis (`m` columns of `n` doubles:
//! 800 MB for a million cells) and the work vector live on the device; each sum runs in the
//! host's blocks and order, so the start equals the host's bit for bit. Graphs below
//! [`HOST_BELOW`] nodes stay on the host (the launches would cost more than the work).

use super::spectral::{host_space, Space, ROWS};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{blocks_for_rows, grid_for, DeviceCsr, DeviceVec, GpuContext, BLOCK};
use rmm_cuda::cudarc::driver::PushKernelArg;

// `spectral_block_dots` holds a block's rows in registers, 32 a lane (`LANE_ROWS`).
const _: () = assert!(ROWS == 32 * 32);

/// The Lanczos kernels (`spectral.cu`).
pub(crate) const SRC: KernelSource = KernelSource {
    name: "umap_spectral",
    source: include_str!("spectral.cu"),
};

/// Graphs of fewer nodes have their Lanczos vectors on the host.
pub const HOST_BELOW: usize = 50_000;

/// The space of `graph` on `ctx` (on the host below [`HOST_BELOW`] nodes).
pub(crate) fn gpu_space<'a>(
    ctx: &'a GpuContext,
    graph: &CsrMatrix<f32>,
    sqrt_d: Vec<f64>,
    m: usize,
) -> Result<Box<dyn Space + 'a>> {
    let n = graph.n_rows;
    if n < HOST_BELOW {
        return host_space(graph, sqrt_d, m);
    }
    let trivial: Vec<f64> = {
        let norm = super::spectral::dot(&sqrt_d, &sqrt_d).sqrt();
        let scale = 1.0 / norm;
        sqrt_d.iter().map(|x| x * scale).collect()
    };
    let n_blocks = n.div_ceil(ROWS);
    Ok(Box::new(GpuSpace {
        ctx,
        n,
        graph: DeviceCsr::upload(ctx, graph)?,
        sqrt_d: ctx.upload(&sqrt_d)?,
        trivial: ctx.upload(&trivial)?,
        q: ctx.alloc::<f64>(n * (m + 1))?,
        len: 0,
        w: ctx.zeros::<f64>(n)?,
        z: ctx.alloc::<f64>(n)?,
        partial: ctx.alloc::<f64>(n_blocks * (m + 1))?,
        coeffs: ctx.alloc::<f64>(m + 1)?,
    }))
}

struct GpuSpace<'a> {
    ctx: &'a GpuContext,
    n: usize,
    graph: DeviceCsr,
    sqrt_d: DeviceVec<f64>,
    trivial: DeviceVec<f64>,
    /// The basis: column `j` at `j * n`.
    q: DeviceVec<f64>,
    len: usize,
    w: DeviceVec<f64>,
    /// The product's gathered vector, `q_j / sqrt(d)`.
    z: DeviceVec<f64>,
    partial: DeviceVec<f64>,
    coeffs: DeviceVec<f64>,
}

impl GpuSpace<'_> {
    /// The device address of column `j` of the basis (kernels take addresses as pointers).
    fn col(&self, j: usize) -> u64 {
        self.q.ptr() + (j * self.n * std::mem::size_of::<f64>()) as u64
    }

    /// The dot products of the vector at `x` with the `k` columns from `q` (block sums into
    /// `partial`, a warp a block, then in block order into `coeffs`).
    fn dots(&self, q: u64, k: usize, x: u64) -> Result<()> {
        let (n, rows, k64) = (self.n as u64, ROWS as u64, k as u64);
        let n_blocks = self.n.div_ceil(ROWS);
        let nb = n_blocks as u64;
        let f = self.ctx.function(SRC, "spectral_block_dots")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&q)
            .arg(&k64)
            .arg(&x)
            .arg(&n)
            .arg(&rows)
            .arg(&self.partial);
        self.ctx
            .launch(l, grid_for(n_blocks * 32), "spectral_block_dots")?;
        let f = self.ctx.function(SRC, "spectral_block_sums")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&self.partial).arg(&k64).arg(&nb).arg(&self.coeffs);
        self.ctx
            .launch(l, blocks_for_rows(k, BLOCK), "spectral_block_sums")
    }

    /// The first coefficient.
    fn first_coeff(&self) -> Result<f64> {
        Ok(self.ctx.download(&self.coeffs)?[0])
    }

    /// `w -= sum_b coeffs[b] q_b` over the `k` columns from `q`.
    fn subtract(&mut self, q: u64, k: usize) -> Result<()> {
        let (n, k64) = (self.n as u64, k as u64);
        let f = self.ctx.function(SRC, "spectral_subtract")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&q)
            .arg(&k64)
            .arg(&self.coeffs)
            .arg(&mut self.w)
            .arg(&n);
        self.ctx.launch(l, grid_for(self.n), "spectral_subtract")
    }

    /// The next column of the basis: `w * scale`.
    fn push_scaled_w(&mut self, scale: f64) -> Result<()> {
        let n = self.n as u64;
        let out = self.col(self.len);
        let f = self.ctx.function(SRC, "spectral_scale")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&self.w).arg(&scale).arg(&out).arg(&n);
        self.ctx.launch(l, grid_for(self.n), "spectral_scale")?;
        self.len += 1;
        Ok(())
    }
}

impl Space for GpuSpace<'_> {
    fn push(&mut self, v: &[f64], scale: f64) -> Result<()> {
        // Through w: uploaded, then scaled into the next column.
        self.w = self.ctx.upload(v)?;
        self.push_scaled_w(scale)
    }

    fn apply(&mut self, j: usize) -> Result<()> {
        let n = self.n as u64;
        let x = self.col(j);
        let f = self.ctx.function(SRC, "spectral_divide")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&x).arg(&self.sqrt_d).arg(&mut self.z).arg(&n);
        self.ctx.launch(l, grid_for(self.n), "spectral_divide")?;
        let f = self.ctx.function(SRC, "spectral_apply")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&self.graph.indptr)
            .arg(&self.graph.indices)
            .arg(&self.graph.data)
            .arg(&self.sqrt_d)
            .arg(&self.z)
            .arg(&mut self.w)
            .arg(&n);
        let cfg = self.ctx.filling_grid(self.n * 8);
        self.ctx.launch(l, cfg, "spectral_apply")
    }

    fn dot_w(&mut self, j: usize) -> Result<f64> {
        self.dots(self.col(j), 1, self.w.ptr())?;
        self.first_coeff()
    }

    fn norm_w(&mut self) -> Result<f64> {
        self.dots(self.w.ptr(), 1, self.w.ptr())?;
        Ok(self.first_coeff()?.sqrt())
    }

    fn orthogonalize_w(&mut self) -> Result<()> {
        let trivial = self.trivial.ptr();
        self.dots(trivial, 1, self.w.ptr())?;
        self.subtract(trivial, 1)?;
        let (q, k) = (self.q.ptr(), self.len);
        self.dots(q, k, self.w.ptr())?;
        self.subtract(q, k)
    }

    fn push_w(&mut self, scale: f64) -> Result<()> {
        self.push_scaled_w(scale)
    }

    fn ritz(&self, coef: &[f64], steps: usize, dim: usize) -> Result<Vec<f64>> {
        let c = self.ctx.upload(coef)?;
        let out = self.ctx.alloc::<f64>(self.n * dim)?;
        let (s64, d64, n) = (steps as u64, dim as u64, self.n as u64);
        let f = self.ctx.function(SRC, "spectral_ritz")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&self.q).arg(&s64).arg(&c).arg(&d64).arg(&n).arg(&out);
        self.ctx.launch(l, grid_for(self.n), "spectral_ritz")?;
        self.ctx.download(&out)
    }
}
