//! The GPU twin of [`super::combat`]: the same checks, design, model, priors and fixed point
//! on the host, and every pass over the cells on the device (`combat.cu`): the chunks' sums
//! and their folding in the host's order, then the adjusted values written over X's copy on
//! the device. The host's values (rounded to f32), bit for bit.

use super::{fit, Counted, Design, Fit, Passes, Term};
use crate::dense::{check_finite_rows, DenseMatrix};
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "combat",
    source: include_str!("combat.cu"),
};

/// The module [`combat_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// Genes a block of the sums (a thread each).
const GENES_PER_BLOCK: u32 = 128;

/// [`super::combat`] with its passes on `ctx`'s GPU: the corrected values in f32 (the host's
/// f64 values rounded), bit for bit.
pub fn combat_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    covariates: &[Vec<f64>],
) -> Result<DenseMatrix<f32>> {
    let mut host_trace = PhaseTrace::on_host("combat");
    let design = Design::new(x.n_rows, x.n_cols, batches, n_batches, covariates)?;
    check_finite_rows(&x.data, x.n_cols)?;
    host_trace.mark("checks (host)")?;
    let (n, g) = (x.n_rows, x.n_cols);
    if n == 0 || g == 0 {
        return Ok(DenseMatrix::zeros(n, g));
    }
    if u32::try_from(n).is_err() || u32::try_from(design.chunks().len()).is_err() {
        return Err(KernelError::Unsupported(format!(
            "combat on the GPU: {n} cells (at most 2^32)"
        )));
    }
    ctx.bind_to_thread()?;
    let mut trace = PhaseTrace::new(ctx, "combat");
    let cells = Counted::new(DeviceCells::new(ctx, x, &design)?);
    trace.mark("upload")?;
    let fit = fit(&cells, &design)?;
    trace.mark(&format!("fit ({} passes over the cells)", cells.passes()))?;
    cells.inner().adjust(&fit)?;
    trace.mark("adjust")?;
    let out = DenseMatrix::new(n, g, ctx.download(&cells.inner().x)?);
    trace.mark("download")?;
    out
}

/// X, its cells by batch and the chunks' tables on the device.
struct DeviceCells<'a> {
    ctx: &'a GpuContext,
    design: &'a Design<'a>,
    x: DeviceVec<f32>,
    members: DeviceVec<u32>,
    batches: DeviceVec<u32>,
    covariates: DeviceVec<f64>,
    /// Each chunk's first member, count and batch.
    first: DeviceVec<u64>,
    count: DeviceVec<u32>,
    batch: DeviceVec<u32>,
    /// Each batch's chunks: `lo[b]..hi[b]`.
    lo: DeviceVec<u64>,
    hi: DeviceVec<u64>,
    lo_host: Vec<usize>,
    hi_host: Vec<usize>,
    sums: CudaFunction,
    fold: CudaFunction,
}

impl<'a> DeviceCells<'a> {
    fn new(ctx: &'a GpuContext, x: &DenseMatrix<f32>, design: &'a Design<'a>) -> Result<Self> {
        let chunks = design.chunks();
        let nb = design.n_batches;
        let (mut lo_host, mut hi_host) = (vec![0usize; nb], vec![0usize; nb]);
        for (t, &(_, _, b)) in chunks.iter().enumerate().rev() {
            lo_host[b] = t;
        }
        for (t, &(_, _, b)) in chunks.iter().enumerate() {
            hi_host[b] = t + 1;
        }
        let wide = |v: &[usize]| v.iter().map(|&t| t as u64).collect::<Vec<_>>();
        let covariates: Vec<f64> = design.covariates.iter().flatten().copied().collect();
        Ok(DeviceCells {
            ctx,
            design,
            x: ctx.upload(&x.data)?,
            members: ctx.upload(&design.members)?,
            batches: ctx.upload(design.batches)?,
            covariates: ctx.upload(&if covariates.is_empty() {
                vec![0.0]
            } else {
                covariates
            })?,
            first: ctx.upload(&wide(&chunks.iter().map(|c| c.0).collect::<Vec<_>>()))?,
            count: ctx.upload(&chunks.iter().map(|c| c.1 as u32).collect::<Vec<_>>())?,
            batch: ctx.upload(&chunks.iter().map(|c| c.2 as u32).collect::<Vec<_>>())?,
            lo: ctx.upload(&wide(&lo_host))?,
            hi: ctx.upload(&wide(&hi_host))?,
            lo_host,
            hi_host,
            sums: ctx.function(SRC, "combat_chunk_sums")?,
            fold: ctx.function(SRC, "combat_fold")?,
        })
    }

    /// The model's arrays on the device (zeros before the fit has them): beta, grand mean,
    /// variance, standard deviation.
    fn model_arrays(&self, term: &Term<'_>) -> Result<[DeviceVec<f64>; 4]> {
        let d = self.design;
        let model = match *term {
            Term::Weighted(_) => None,
            Term::Residual(m) | Term::Standard(m) | Term::Squared(m, _) => Some(m),
        };
        let ctx = self.ctx;
        Ok(match model {
            Some(m) => [
                ctx.upload(&m.beta)?,
                ctx.upload(&m.grand)?,
                ctx.upload(&m.var)?,
                ctx.upload(&m.sd)?,
            ],
            None => [
                ctx.zeros((d.n_batches + d.covariates.len()) * d.g)?,
                ctx.zeros(d.g)?,
                ctx.zeros(d.g)?,
                ctx.zeros(d.g)?,
            ],
        })
    }
}

impl Passes for DeviceCells<'_> {
    fn sums(&self, term: Term<'_>, only: Option<usize>) -> Result<Vec<f64>> {
        let (ctx, d) = (self.ctx, self.design);
        let (g, nb) = (d.g, d.n_batches);
        let (chunk0, chunk1) = match only {
            Some(b) => (self.lo_host[b], self.hi_host[b]),
            None => (0, self.hi_host[nb - 1]),
        };
        let [beta, grand, var, sd] = self.model_arrays(&term)?;
        let (kind, weight, centre) = match term {
            Term::Weighted(m) => (0i32, m.map_or(-1, |m| m as i32), None),
            Term::Residual(_) => (1, -1, None),
            Term::Standard(_) => (2, -1, None),
            Term::Squared(_, c) => (3, -1, Some(c)),
        };
        let mut centre = centre.map(<[f64]>::to_vec).unwrap_or_default();
        centre.resize(nb * g, 0.0);
        let centre = ctx.upload(&centre)?;
        let partial = ctx.alloc::<f64>((chunk1 - chunk0) * g)?;
        let (c0, n64, g64) = (chunk0 as u64, d.n as u64, g as u64);
        let (n_cov, nb32) = (d.covariates.len() as u32, nb as u32);
        let gene_blocks = g.div_ceil(GENES_PER_BLOCK as usize) as u32;
        let mut l = ctx.launcher(&self.sums);
        l.arg(&self.x).arg(&self.members);
        l.arg(&self.first).arg(&self.count).arg(&self.batch);
        l.arg(&c0).arg(&kind).arg(&weight).arg(&self.covariates);
        l.arg(&n64).arg(&n_cov).arg(&nb32).arg(&g64);
        l.arg(&beta)
            .arg(&grand)
            .arg(&var)
            .arg(&sd)
            .arg(&centre)
            .arg(&partial);
        let chunks = u32::try_from(chunk1 - chunk0)
            .ok()
            .filter(|&c| c <= 65_535)
            .ok_or_else(|| {
                KernelError::Unsupported(format!("{} chunks in one pass", chunk1 - chunk0))
            })?;
        let cfg = LaunchConfig {
            grid_dim: (gene_blocks, chunks, 1),
            block_dim: (GENES_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        ctx.launch(l, cfg, "combat_chunk_sums")?;
        let out = ctx.zeros::<f64>(nb * g)?;
        let c1 = chunk1 as u64;
        let mut l = ctx.launcher(&self.fold);
        l.arg(&partial).arg(&self.lo).arg(&self.hi);
        l.arg(&c0).arg(&c1).arg(&g64).arg(&out);
        let cfg = LaunchConfig {
            grid_dim: (gene_blocks, nb32, 1),
            block_dim: (GENES_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        ctx.launch(l, cfg, "combat_fold")?;
        ctx.download(&out)
    }
}

impl DeviceCells<'_> {
    /// `Fit::adjusted_row` of every cell, over X's copy.
    fn adjust(&self, fit: &Fit) -> Result<()> {
        let (ctx, d) = (self.ctx, self.design);
        let m = &fit.model;
        let (beta, grand, var, sd) = (
            ctx.upload(&m.beta)?,
            ctx.upload(&m.grand)?,
            ctx.upload(&m.var)?,
            ctx.upload(&m.sd)?,
        );
        let (gs, ds) = (ctx.upload(&fit.gamma_star)?, ctx.upload(&fit.delta_star)?);
        let (n64, g64) = (d.n as u64, d.g as u64);
        let (n_cov, nb32) = (d.covariates.len() as u32, d.n_batches as u32);
        let f = ctx.function(SRC, "combat_adjust")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.x).arg(&self.batches).arg(&self.covariates);
        l.arg(&n64).arg(&n_cov).arg(&nb32).arg(&g64);
        l.arg(&beta)
            .arg(&grand)
            .arg(&var)
            .arg(&sd)
            .arg(&gs)
            .arg(&ds);
        ctx.launch(l, grid_stride(d.n * d.g), "combat_adjust")
    }
}
