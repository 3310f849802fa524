//! The GPU twin of [`super::regress_out`] on a dense device X: the same sums in the same order
//! (so the same bits), the small solves on the host with the CPU's own code.

use super::{bucket_counts, buckets, category_fit, check_covariates, continuous_coef, Covariates};
use crate::error::Result;
use crate::gpu::dense_reduce::{chunked_sums, finite_by_sums, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceDense, DeviceVec, GpuContext};
use crate::stats::DENSE_CHUNK_ROWS;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "regress",
    source: include_str!("regress.cu"),
};

/// Replaces each gene (column) of the device matrix `x` by its residuals on `covariates`, as
/// [`super::regress_out`] does on the host, bit for bit. Every check runs before the one
/// write (X's values are checked by the sums' own pass), so a refused call leaves `x` as it
/// was.
pub fn regress_out_gpu(
    ctx: &GpuContext,
    x: &mut DeviceDense,
    covariates: &Covariates,
) -> Result<()> {
    regress_out_gpu_in_waves(ctx, x, covariates, PARTIAL_BYTES)
}

/// [`regress_out_gpu`] with the device bytes the chunks' partial sums may take at once (the
/// tests make it small to add the chunks in several waves).
pub fn regress_out_gpu_in_waves(
    ctx: &GpuContext,
    x: &mut DeviceDense,
    covariates: &Covariates,
    partial_bytes: usize,
) -> Result<()> {
    check_covariates(x.n_rows, covariates)?;
    let mut trace = PhaseTrace::new(ctx, "regress_out");
    match covariates {
        Covariates::Continuous(columns) => {
            let q = columns.len() + 1;
            let design = upload_design(ctx, columns, x.n_rows)?;
            trace.mark("design")?;
            let (ax, differs) =
                chunk_sums(ctx, x, Weights::Design(&design, q as u32), partial_bytes)?;
            // The intercept's row of Aᵀx is X's plain column sums.
            finite_by_sums(ctx, x, &ax[..x.n_cols])?;
            trace.mark("sums")?;
            let (coef, singular) = continuous_coef(columns, x.n_rows, &ax, x.n_cols)?;
            let keep = kept_genes(ctx, &differs, singular)?;
            let coef = ctx.upload(&coef)?;
            trace.mark("solve")?;
            let f = ctx.function(SRC, "regress_subtract_fit")?;
            let mut l = ctx.launcher(&f);
            let (n, g, q32) = (x.n_rows as u64, x.n_cols as u64, q as u32);
            l.arg(&x.data)
                .arg(&n)
                .arg(&g)
                .arg(&design)
                .arg(&q32)
                .arg(&coef)
                .arg(&keep);
            ctx.launch(l, ctx.filling_rows(x.n_rows), "regress_subtract_fit")?;
        }
        Covariates::Categorical {
            codes,
            n_categories,
        } => {
            let n_buckets = n_categories + 1;
            let bucket = buckets(codes, *n_categories);
            let counts = bucket_counts(&bucket, n_buckets);
            let bucket = ctx.upload(&bucket)?;
            let (sums, differs) = chunk_sums(
                ctx,
                x,
                Weights::Buckets(&bucket, n_buckets as u32),
                partial_bytes,
            )?;
            finite_by_sums(ctx, x, &sums)?;
            trace.mark("sums")?;
            let fit = category_fit(&sums, &counts, x.n_cols);
            let keep = kept_genes(ctx, &differs, true)?;
            let means = ctx.upload(&fit.means)?;
            let b0 = ctx.upload(&fit.coef.iter().map(|c| c.0).collect::<Vec<_>>())?;
            let b1 = ctx.upload(&fit.coef.iter().map(|c| c.1).collect::<Vec<_>>())?;
            trace.mark("solve")?;
            let f = ctx.function(SRC, "regress_subtract_category_fit")?;
            let mut l = ctx.launcher(&f);
            let (n, g) = (x.n_rows as u64, x.n_cols as u64);
            l.arg(&x.data)
                .arg(&n)
                .arg(&g)
                .arg(&bucket)
                .arg(&means)
                .arg(&b0)
                .arg(&b1)
                .arg(&keep);
            ctx.launch(
                l,
                ctx.filling_rows(x.n_rows),
                "regress_subtract_category_fit",
            )?;
        }
    }
    trace.mark("residuals")
}

/// The design `[1, covariates...]` on the device, its columns one after another (`q x n`),
/// written straight into the pinned staging buffers.
fn upload_design(ctx: &GpuContext, columns: &[Vec<f64>], n: usize) -> Result<DeviceVec<f64>> {
    ctx.upload_with((columns.len() + 1) * n, |first, mut out| {
        let mut p = first;
        while !out.is_empty() {
            let (k, i) = (p / n, p % n);
            let take = (n - i).min(out.len());
            let (head, rest) = out.split_at_mut(take);
            if k == 0 {
                head.fill(1.0);
            } else {
                head.copy_from_slice(&columns[k - 1][i..i + take]);
            }
            p += take;
            out = rest;
        }
        Ok(())
    })
}

/// What the rows' values are summed by.
enum Weights<'a> {
    /// The design's `q` columns (`q x n`): `Aᵀx`, `q x n_cols`.
    Design(&'a DeviceVec<f64>, u32),
    /// Each cell's bucket of `n_buckets`: the sums per bucket, `n_buckets x n_cols`.
    Buckets(&'a DeviceVec<u32>, u32),
}

/// The sums over X's rows by `weights`, in the host's chunks and order, and which genes have
/// a value other than their first row's (found in the same pass).
fn chunk_sums(
    ctx: &GpuContext,
    x: &DeviceDense,
    weights: Weights<'_>,
    partial_bytes: usize,
) -> Result<(Vec<f64>, DeviceVec<u32>)> {
    let (kernel, len_per_row) = match weights {
        Weights::Design(_, q) => ("regress_chunk_sums", q),
        Weights::Buckets(_, nb) => ("regress_chunk_bucket_sums", nb),
    };
    let f = ctx.function(SRC, kernel)?;
    let (n, g, rows) = (x.n_rows as u64, x.n_cols as u64, DENSE_CHUNK_ROWS as u64);
    let len = len_per_row as usize * x.n_cols;
    let differs = ctx.zeros::<u32>(x.n_cols.max(1))?;
    let sums = chunked_sums(ctx, x.n_rows, len, partial_bytes, |first, count, out| {
        let mut l = ctx.launcher(&f);
        l.arg(&x.data).arg(&n).arg(&g);
        match &weights {
            Weights::Design(d, q) => l.arg(*d).arg(q),
            Weights::Buckets(b, nb) => l.arg(*b).arg(nb),
        };
        l.arg(&rows).arg(&first).arg(&count).arg(out).arg(&differs);
        // Blocks over the genes (x) and the wave's chunks (y).
        let cfg = LaunchConfig {
            grid_dim: (x.n_cols.div_ceil(256).max(1) as u32, count as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        ctx.launch(l, cfg, kernel)
    })?;
    Ok((sums, differs))
}

/// Which genes the residuals leave alone: none, or (`constant`) those whose values are all
/// equal (`differs` 0), as [`super::constant_genes`] finds them.
fn kept_genes(
    ctx: &GpuContext,
    differs: &DeviceVec<u32>,
    constant: bool,
) -> Result<DeviceVec<u32>> {
    if !constant {
        return ctx.zeros(differs.len());
    }
    let keep: Vec<u32> = ctx
        .download(differs)?
        .iter()
        .map(|&d| (d == 0) as u32)
        .collect();
    ctx.upload(&keep)
}
