//! The GPU twins of [`super::pearson_residuals`] and
//! [`super::highly_variable_pearson_residuals`] on a device CSR X: the same checks, and the same
//! sums and residuals with the host's bits (`pearson.cu`). The sums over genes read the rows
//! densified, a wave of [`DENSE_CHUNK_ROWS`]-row chunks at a time.

use super::hvg::{batch_groups, check_params as check_hvg_params, residual_variances, select};
use super::{check_params, no_counts, PearsonHvg, PearsonParams};
use crate::error::Result;
use crate::gpu::compact::select_rows;
use crate::gpu::dense_reduce::{chunked_sums, csr_chunked_sums, first_zero, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::{col_moments, Transform};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_for, DeviceCsr, DeviceDense, DeviceVec, GpuContext};
use crate::normalize::{all_whole_gpu, check_counts_gpu};
use crate::stats::{mean_var_from_sums, DENSE_CHUNK_ROWS};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "pearson",
    source: include_str!("pearson.cu"),
};

/// The module the twins launch.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// What a chunk sum adds up per gene (`pearson_chunk_sums`' mode).
#[derive(Clone, Copy)]
enum Term<'a> {
    Values,
    Residuals,
    SquaredDeviations(&'a DeviceVec<f64>),
}

/// The negative binomial's expectations: each cell's and gene's totals, on the device.
struct Model {
    cells: DeviceVec<f64>,
    genes: DeviceVec<f64>,
    total: f64,
    theta: f64,
    clip: f64,
}

/// [`super::pearson_residuals`] on `ctx`'s GPU: the dense residuals on the device, with the
/// host's bits.
pub fn pearson_residuals_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    p: &PearsonParams,
) -> Result<DeviceDense> {
    if x.n_rows == 0 || x.n_cols == 0 {
        let host = super::pearson_residuals(&x.download(ctx)?, p)?;
        return DeviceDense::upload(ctx, &host);
    }
    let clip = check_params(x.n_rows, p)?;
    let mut trace = PhaseTrace::new(ctx, "pearson_residuals");
    check_counts(ctx, x)?;
    trace.mark("counts checked")?;
    let cells = row_sums(ctx, x)?;
    if let Some(i) = first_zero(ctx, &cells)? {
        return Err(no_counts("cell", i));
    }
    trace.mark("cells' sums")?;
    if let Some(out) = residuals_of_whole_counts(ctx, x, &cells, p.theta, clip, &mut trace)? {
        return Ok(out);
    }
    let mut out = x.to_dense(ctx)?;
    let genes = dense_chunk_sums(ctx, &out.data, x.n_rows, x.n_cols)?;
    if let Some(j) = genes.iter().position(|&s| s == 0.0) {
        return Err(no_counts("gene", j));
    }
    let total: f64 = genes.iter().sum();
    let genes = ctx.upload(&genes)?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let f = ctx.function(SRC, "pearson_residuals_in_place")?;
    let mut l = ctx.launcher(&f);
    l.arg(&mut out.data).arg(&n).arg(&g).arg(&cells).arg(&genes);
    let (theta, clip) = (p.theta as f32, clip as f32);
    l.arg(&total).arg(&theta).arg(&clip);
    ctx.launch(l, ctx.filling_rows(x.n_rows), "pearson_residuals_in_place")?;
    Ok(out)
}

/// Sums of whole numbers below 2^53 are exact in any order.
const EXACT_BELOW: f64 = 9_007_199_254_740_992.0;

/// The residuals when every value is a whole number and their total stays below 2^53: the
/// genes' sums added atomically (exact, so the host's bits) and the dense residuals written
/// once from the CSR values, without the dense copy of the counts; `None` otherwise.
fn residuals_of_whole_counts(
    ctx: &GpuContext,
    x: &DeviceCsr,
    cells: &DeviceVec<f64>,
    theta: f64,
    clip: f64,
    trace: &mut PhaseTrace,
) -> Result<Option<DeviceDense>> {
    if !all_whole_gpu(ctx, &x.data)? {
        return Ok(None);
    }
    trace.mark("whole numbers checked")?;
    let genes = ctx.zeros::<f64>(x.n_cols)?;
    let nnz = x.nnz() as u64;
    let shared = x.n_cols * 8;
    if shared <= ctx.max_shared_per_block() {
        // A block's partial sums in shared memory, a few blocks an SM.
        let f = ctx.function_with_shared(SRC, "pearson_gene_sums_exact_shared", shared)?;
        let g = x.n_cols as u64;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indices).arg(&x.data).arg(&nnz).arg(&g).arg(&genes);
        let cfg = LaunchConfig {
            grid_dim: (ctx.multiprocessors() * 2, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        ctx.launch(l, cfg, "pearson_gene_sums_exact_shared")?;
    } else {
        let f = ctx.function(SRC, "pearson_gene_sums_exact")?;
        let mut l = ctx.launcher(&f);
        l.arg(&x.indices).arg(&x.data).arg(&nnz).arg(&genes);
        ctx.launch(l, ctx.filling_grid(x.nnz()), "pearson_gene_sums_exact")?;
    }
    let sums = ctx.download(&genes)?;
    if let Some(j) = sums.iter().position(|&s| s == 0.0) {
        return Err(no_counts("gene", j));
    }
    let total: f64 = sums.iter().sum();
    if !(total < EXACT_BELOW) {
        return Ok(None);
    }
    trace.mark("genes' sums")?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let mut out = ctx.alloc::<f32>(x.n_rows * x.n_cols)?;
    let (theta, clip) = (theta as f32, clip as f32);
    let f = ctx.function(SRC, "pearson_residuals_from_csr")?;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&g);
    l.arg(cells)
        .arg(&genes)
        .arg(&total)
        .arg(&theta)
        .arg(&clip)
        .arg(&mut out);
    ctx.launch(l, ctx.filling_rows(x.n_rows), "pearson_residuals_from_csr")?;
    trace.mark("residuals")?;
    Ok(Some(DeviceDense {
        n_rows: x.n_rows,
        n_cols: x.n_cols,
        data: out,
    }))
}

/// [`super::highly_variable_pearson_residuals`] on `ctx`'s GPU: the residual variances with
/// the host's bits (so the same genes); means and variances of X as the device's column
/// moments give them.
pub fn highly_variable_pearson_residuals_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    theta: f64,
    clip: Option<f64>,
    n_top_genes: usize,
    batches: Option<(&[u32], &[String])>,
) -> Result<PearsonHvg> {
    if x.n_rows == 0 || x.n_cols == 0 {
        let host = x.download(ctx)?;
        return super::highly_variable_pearson_residuals(&host, theta, clip, n_top_genes, batches);
    }
    check_hvg_params(theta, clip, n_top_genes)?;
    check_counts(ctx, x)?;
    let groups = batch_groups(x.n_rows, batches)?;
    let clip = clip.unwrap_or_else(|| (groups[0].len() as f64).sqrt());
    let mut vars = Vec::with_capacity(groups.len());
    for rows in &groups {
        let v = if rows.len() == x.n_rows {
            batch_residual_variances(ctx, x, rows, theta, clip)?
        } else {
            let mut keep = vec![false; x.n_rows];
            rows.iter().for_each(|&i| keep[i] = true);
            batch_residual_variances(ctx, &select_rows(ctx, x, &keep)?, rows, theta, clip)?
        };
        vars.push(v);
    }
    let m = col_moments(ctx, x, Transform::Identity, None)?;
    let (means, variances) = mean_var_from_sums(&m.sums, &m.sq, x.n_rows);
    Ok(select(vars, n_top_genes, means, variances))
}

/// hvg.rs' `batch_residual_variances` of the batch `x` (the rows `rows` of the whole matrix).
fn batch_residual_variances(
    ctx: &GpuContext,
    x: &DeviceCsr,
    rows: &[usize],
    theta: f64,
    clip: f64,
) -> Result<Vec<f64>> {
    let cells = row_sums(ctx, x)?;
    if let Some(i) = ctx.download(&cells)?.iter().position(|&s| s == 0.0) {
        return Err(no_counts("cell", rows[i]));
    }
    let genes = csr_chunk_sums(ctx, x, Term::Values, None)?;
    let model = Model {
        total: genes.iter().sum(),
        genes: ctx.upload(&genes)?,
        cells,
        theta,
        clip,
    };
    let n = x.n_rows as f64;
    let sums = csr_chunk_sums(ctx, x, Term::Residuals, Some(&model))?;
    let means = ctx.upload(&sums.iter().map(|s| s / n).collect::<Vec<_>>())?;
    let sq = csr_chunk_sums(ctx, x, Term::SquaredDeviations(&means), Some(&model))?;
    Ok(residual_variances(&genes, &sq, x.n_rows))
}

/// A device matrix of counts refused as the host refuses it (the first bad value named).
fn check_counts(ctx: &GpuContext, x: &DeviceCsr) -> Result<()> {
    if let Err(e) = check_counts_gpu(ctx, x, "pearson residuals") {
        // The host's check names the first bad value; a device failure stays what it was.
        x.download(ctx)?.check_counts()?;
        return Err(e);
    }
    Ok(())
}

/// Each row's sum of its stored values (`stats::row_sums`' bits).
fn row_sums(ctx: &GpuContext, x: &DeviceCsr) -> Result<DeviceVec<f64>> {
    // The twins take an empty matrix to the host, and batches are never empty.
    let sums = ctx.alloc::<f64>(x.n_rows)?;
    let f = ctx.function(SRC, "pearson_row_sums")?;
    let n = x.n_rows as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr).arg(&x.data).arg(&n).arg(&sums);
    // A warp a row.
    ctx.launch(l, ctx.filling_grid(x.n_rows * 32), "pearson_row_sums")?;
    Ok(sums)
}

/// Per gene, the sum of `term` over the rows of the CSR `x`, densified a wave of chunks at a
/// time.
fn csr_chunk_sums(
    ctx: &GpuContext,
    x: &DeviceCsr,
    term: Term<'_>,
    model: Option<&Model>,
) -> Result<Vec<f64>> {
    let (n, g) = (x.n_rows, x.n_cols);
    csr_chunked_sums(ctx, x, g, |wave, row0, first, count, out| {
        launch_chunk_sums(ctx, wave, row0, n, g, (first, count), term, model, out)
    })
}

/// Per gene, the sum of the values of the dense `n x g` matrix `x`.
fn dense_chunk_sums(ctx: &GpuContext, x: &DeviceVec<f32>, n: usize, g: usize) -> Result<Vec<f64>> {
    chunked_sums(ctx, n, g, PARTIAL_BYTES, |first, count, out| {
        launch_chunk_sums(ctx, x, 0, n, g, (first, count), Term::Values, None, out)
    })
}

/// Queues `pearson_chunk_sums` over the chunks `first .. first + count` (`chunks`).
#[allow(clippy::too_many_arguments)]
fn launch_chunk_sums(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    row0: usize,
    n: usize,
    g: usize,
    (first, count): (u64, u64),
    term: Term<'_>,
    model: Option<&Model>,
    out: &DeviceVec<f64>,
) -> Result<()> {
    let none = 0u64;
    let (mode, mean): (i32, Option<&DeviceVec<f64>>) = match term {
        Term::Values => (0, None),
        Term::Residuals => (1, None),
        Term::SquaredDeviations(m) => (2, Some(m)),
    };
    let (row0, n64, g64, rows) = (row0 as u64, n as u64, g as u64, DENSE_CHUNK_ROWS as u64);
    let (total, theta, clip) = model.map_or((0.0, 0.0, 0.0), |m| (m.total, m.theta, m.clip));
    let f = ctx.function(SRC, "pearson_chunk_sums")?;
    let mut l = ctx.launcher(&f);
    l.arg(x).arg(&row0).arg(&n64).arg(&g64).arg(&rows);
    l.arg(&first).arg(&count).arg(&mode);
    match model {
        Some(m) => l.arg(&m.cells).arg(&m.genes),
        None => l.arg(&none).arg(&none),
    };
    l.arg(&total).arg(&theta).arg(&clip);
    match mean {
        Some(m) => l.arg(m),
        None => l.arg(&none),
    };
    l.arg(out);
    ctx.launch(l, grid_for(count as usize * g), "pearson_chunk_sums")
}
