//! The GPU twin of [`super::regress_out`] on a dense device X, or on a CSR one written dense
//! with its residuals: the same sums in the same order (so the same bits), the small solves on
//! the host with the CPU's own code.

use super::{bucket_counts, buckets, category_fit, check_covariates, continuous_coef, Covariates};
use crate::error::Result;
use crate::gpu::dense_reduce::{
    chunked_sums, csr_chunked_sums_in_waves, finite_by_sums, PARTIAL_BYTES, WAVE_BYTES,
};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceCsr, DeviceDense, DeviceVec, GpuContext};
use crate::stats::DENSE_CHUNK_ROWS;
use rmm_cuda::cudarc::driver::{LaunchArgs, LaunchConfig, PushKernelArg};

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
    let fit = fit(ctx, Rows::Dense(x, partial_bytes), covariates, &mut trace)?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let name = fit.kernel(false);
    let f = ctx.function(SRC, name)?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.data).arg(&n).arg(&g);
    fit.push_args(&mut l);
    ctx.launch(l, ctx.filling_rows(x.n_rows), name)?;
    trace.mark("residuals")
}

/// The residuals of a CSR device X on `covariates`, dense: [`regress_out_gpu`]'s result on
/// `x.to_dense()`, bit for bit, without the dense copy of X's values. On continuous keys the
/// sums read the CSR values in place (each block writes a few of its rows at a time into a
/// dense tile of shared memory); on a category they read X densified a wave of chunks at a time
/// (at most [`WAVE_BYTES`] on the device). The residuals are written straight from the CSR
/// values (one pass writing the result, none reading a dense X; writing each value once through
/// shared memory measured slower on an H100: 5.8-6.0 ms against 4.7-4.8 at a million cells).
/// `x` is left as it is.
pub fn regress_out_csr_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    covariates: &Covariates,
) -> Result<DeviceDense> {
    regress_out_csr_gpu_in_waves(ctx, x, covariates, WAVE_BYTES)
}

/// [`regress_out_csr_gpu`] with the device bytes a wave may take: of densified rows (a category),
/// of the chunks' partial sums (continuous keys, at most [`PARTIAL_BYTES`]). The tests make it
/// small: several waves, each at least one chunk.
pub fn regress_out_csr_gpu_in_waves(
    ctx: &GpuContext,
    x: &DeviceCsr,
    covariates: &Covariates,
    wave_bytes: usize,
) -> Result<DeviceDense> {
    check_covariates(x.n_rows, covariates)?;
    let mut trace = PhaseTrace::new(ctx, "regress_out");
    let fit = fit(ctx, Rows::Csr(x, wave_bytes), covariates, &mut trace)?;
    let out = ctx.alloc::<f32>(x.n_rows * x.n_cols)?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let name = fit.kernel(true);
    let f = ctx.function(SRC, name)?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&g);
    fit.push_args(&mut l);
    l.arg(&out);
    ctx.launch(l, ctx.filling_rows(x.n_rows), name)?;
    trace.mark("residuals")?;
    Ok(DeviceDense {
        n_rows: x.n_rows,
        n_cols: x.n_cols,
        data: out,
    })
}

/// X as the sums read it: a dense device X (with the partial sums' device bytes), or a CSR one
/// densified a wave of chunks at a time (with the wave's device bytes).
enum Rows<'a> {
    Dense(&'a DeviceDense, usize),
    Csr(&'a DeviceCsr, usize),
}

impl Rows<'_> {
    /// (rows, columns).
    fn shape(&self) -> (usize, usize) {
        match self {
            Rows::Dense(d, _) => (d.n_rows, d.n_cols),
            Rows::Csr(c, _) => (c.n_rows, c.n_cols),
        }
    }
}

/// What the residual pass subtracts, on the device.
enum DeviceFit {
    /// `design` (`q x n`) times `coef` (`q x n_cols`), for the genes `keep` leaves alone.
    Continuous {
        design: DeviceVec<f64>,
        q: u32,
        coef: DeviceVec<f64>,
        keep: DeviceVec<u32>,
    },
    /// `b0 + b1 * means[bucket]`, gene by gene, for the genes `keep` leaves alone.
    Category {
        bucket: DeviceVec<u32>,
        means: DeviceVec<f32>,
        b0: DeviceVec<f64>,
        b1: DeviceVec<f64>,
        keep: DeviceVec<u32>,
    },
}

impl DeviceFit {
    /// The residual kernel of this fit, on a dense X or (`csr`) written from a CSR one.
    fn kernel(&self, csr: bool) -> &'static str {
        match (self, csr) {
            (DeviceFit::Continuous { .. }, false) => "regress_subtract_fit",
            (DeviceFit::Category { .. }, false) => "regress_subtract_category_fit",
            (DeviceFit::Continuous { .. }, true) => "regress_csr_subtract_fit",
            (DeviceFit::Category { .. }, true) => "regress_csr_subtract_category_fit",
        }
    }

    /// The fit's arguments of the residual kernels, after X's.
    fn push_args<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        match self {
            DeviceFit::Continuous {
                design,
                q,
                coef,
                keep,
            } => l.arg(design).arg(q).arg(coef).arg(keep),
            DeviceFit::Category {
                bucket,
                means,
                b0,
                b1,
                keep,
            } => l.arg(bucket).arg(means).arg(b0).arg(b1).arg(keep),
        };
    }
}

/// The fit of every gene on `covariates`: the sums over X's rows on the device (X's values
/// checked by them), the small solves on the host with the CPU's own code.
fn fit(
    ctx: &GpuContext,
    x: Rows<'_>,
    covariates: &Covariates,
    trace: &mut PhaseTrace,
) -> Result<DeviceFit> {
    let (n_rows, n_cols) = x.shape();
    match covariates {
        Covariates::Continuous(columns) => {
            let q = columns.len() + 1;
            let design = upload_design(ctx, columns, n_rows)?;
            trace.mark("design")?;
            let (ax, differs) = chunk_sums(ctx, &x, Weights::Design(&design, q as u32))?;
            // The intercept's row of Aᵀx is X's plain column sums.
            check_finite(ctx, &x, &ax[..n_cols])?;
            trace.mark("sums")?;
            let (coef, singular) = continuous_coef(columns, n_rows, &ax, n_cols)?;
            let keep = kept_genes(ctx, &differs, singular)?;
            let coef = ctx.upload(&coef)?;
            trace.mark("solve")?;
            Ok(DeviceFit::Continuous {
                design,
                q: q as u32,
                coef,
                keep,
            })
        }
        Covariates::Categorical {
            codes,
            n_categories,
        } => {
            let n_buckets = n_categories + 1;
            let bucket = buckets(codes, *n_categories);
            let counts = bucket_counts(&bucket, n_buckets);
            let bucket = ctx.upload(&bucket)?;
            let (sums, differs) = chunk_sums(ctx, &x, Weights::Buckets(&bucket, n_buckets as u32))?;
            check_finite(ctx, &x, &sums)?;
            trace.mark("sums")?;
            let fit = category_fit(&sums, &counts, n_cols);
            let keep = kept_genes(ctx, &differs, true)?;
            let means = ctx.upload(&fit.means)?;
            let b0 = ctx.upload(&fit.coef.iter().map(|c| c.0).collect::<Vec<_>>())?;
            let b1 = ctx.upload(&fit.coef.iter().map(|c| c.1).collect::<Vec<_>>())?;
            trace.mark("solve")?;
            Ok(DeviceFit::Category {
                bucket,
                means,
                b0,
                b1,
                keep,
            })
        }
    }
}

/// Fails, naming the first NaN or infinite value as the host does, when the plain sums (each
/// value in one of them) are not all finite. A CSR X is densified for the naming only.
fn check_finite(ctx: &GpuContext, x: &Rows<'_>, plain_sums: &[f64]) -> Result<()> {
    match x {
        Rows::Dense(d, _) => finite_by_sums(ctx, d, plain_sums),
        Rows::Csr(_, _) if plain_sums.iter().all(|s| s.is_finite()) => Ok(()),
        Rows::Csr(c, _) => finite_by_sums(ctx, &c.to_dense(ctx)?, plain_sums),
    }
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
    x: &Rows<'_>,
    weights: Weights<'_>,
) -> Result<(Vec<f64>, DeviceVec<u32>)> {
    let (kernel, len_per_row) = match weights {
        Weights::Design(_, q) => ("regress_chunk_sums", q),
        Weights::Buckets(_, nb) => ("regress_chunk_bucket_sums", nb),
    };
    let f = ctx.function(SRC, kernel)?;
    let (n_rows, n_cols) = x.shape();
    let (n, g, rows) = (n_rows as u64, n_cols as u64, DENSE_CHUNK_ROWS as u64);
    let len = len_per_row as usize * n_cols;
    let differs = ctx.zeros::<u32>(n_cols.max(1))?;
    // The chunks of rows `first .. first + count`, whose rows from `row0` on `wave` holds.
    let partials = |wave: &DeviceVec<f32>,
                    row0: usize,
                    first_row: &DeviceVec<f32>,
                    first: u64,
                    count: u64,
                    out: &DeviceVec<f64>| {
        let mut l = ctx.launcher(&f);
        let row0 = row0 as u64;
        l.arg(wave).arg(&row0).arg(&n).arg(&g).arg(first_row);
        match &weights {
            Weights::Design(d, q) => l.arg(*d).arg(q),
            Weights::Buckets(b, nb) => l.arg(*b).arg(nb),
        };
        l.arg(&rows).arg(&first).arg(&count).arg(out).arg(&differs);
        // Blocks over the genes (x) and the wave's chunks (y).
        let cfg = LaunchConfig {
            grid_dim: (n_cols.div_ceil(256).max(1) as u32, count as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        ctx.launch(l, cfg, kernel)
    };
    let sums = match x {
        Rows::Dense(d, partial_bytes) => {
            chunked_sums(ctx, n_rows, len, *partial_bytes, |first, count, out| {
                partials(&d.data, 0, &d.data, first, count, out)
            })?
        }
        Rows::Csr(c, bytes) => {
            let mut first_row = ctx.alloc::<f32>(n_cols.max(1))?;
            c.rows_to_dense_into(ctx, 0, n_rows.min(1), &mut first_row)?;
            match &weights {
                Weights::Design(design, q) => {
                    let x = (*c, &first_row, &differs);
                    csr_design_sums(ctx, x, design, *q, (*bytes).min(PARTIAL_BYTES))?
                }
                Weights::Buckets(..) => csr_chunked_sums_in_waves(
                    ctx,
                    c,
                    len,
                    *bytes,
                    |wave, row0, first, count, out| {
                        partials(wave, row0, &first_row, first, count, out)
                    },
                )?,
            }
        }
    };
    Ok((sums, differs))
}

/// Rows of a CSR X that [`csr_design_sums`] writes into dense tiles of shared memory at a time:
/// as many as 64 KiB hold (two blocks an SM on an H100, so a chunk a block runs in one wave at
/// a million cells), up to the kernel's 16.
fn csr_tile_rows(ctx: &GpuContext, window: usize) -> usize {
    let bytes = ctx.max_shared_per_block().min(CSR_TILE_BYTES);
    (bytes / (window.max(1) * 4)).clamp(1, CSR_TILE_MAX)
}

/// Shared memory a block of `regress_csr_chunk_sums` takes for its tile at most.
const CSR_TILE_BYTES: usize = 64 << 10;

/// Genes a block of `regress_csr_chunk_sums` adds (`REGRESS_CSR_WINDOW`), its threads, and the
/// most rows of its tile (`REGRESS_CSR_TILE_MAX`).
const CSR_WINDOW: usize = 2048;
const CSR_THREADS: u32 = 512;
const CSR_TILE_MAX: usize = 16;

/// `regress_chunk_sums`'s sums (`Aᵀx` by chunks, and `differs`) over a CSR X (`x`: the matrix,
/// its row 0 dense, `differs`), read once in place: each block writes its chunk's rows into a
/// dense tile of shared memory a few rows at a time, so no dense copy of X is made. The
/// partial sums take at most `partial_bytes` at once.
fn csr_design_sums(
    ctx: &GpuContext,
    (x, first_row, differs): (&DeviceCsr, &DeviceVec<f32>, &DeviceVec<u32>),
    design: &DeviceVec<f64>,
    q: u32,
    partial_bytes: usize,
) -> Result<Vec<f64>> {
    let (n_rows, n_cols) = (x.n_rows, x.n_cols);
    let window = n_cols.min(CSR_WINDOW);
    let tile_rows = csr_tile_rows(ctx, window);
    let shared = tile_rows * window.max(1) * 4;
    let name = "regress_csr_chunk_sums";
    let f = ctx.function_with_shared(SRC, name, shared)?;
    let (n, g, rows) = (n_rows as u64, n_cols as u64, DENSE_CHUNK_ROWS as u64);
    let tile_rows = tile_rows as u32;
    let len = q as usize * n_cols;
    chunked_sums(ctx, n_rows, len, partial_bytes, |first, count, out| {
        let mut l = ctx.launcher(&f);
        l.arg(&x.indptr).arg(&x.indices).arg(&x.data);
        l.arg(&n).arg(&g).arg(first_row).arg(design).arg(&q);
        l.arg(&rows).arg(&first).arg(&count).arg(&tile_rows);
        l.arg(out).arg(differs);
        // Blocks over the windows of genes (x) and the wave's chunks (y).
        let cfg = LaunchConfig {
            grid_dim: (n_cols.div_ceil(CSR_WINDOW).max(1) as u32, count as u32, 1),
            block_dim: (CSR_THREADS, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        ctx.launch(l, cfg, name)
    })
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
