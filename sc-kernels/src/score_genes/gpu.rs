//! The GPU twin of [`super::score_genes`] on a device CSR X: the same checks and control genes
//! (drawn on the host from the columns' means), and the same means with the host's bits
//! (`score_genes.cu`). The columns' means read the rows densified, a wave of
//! [`DENSE_CHUNK_ROWS`]-row chunks at a time.

use super::{check_params, control_genes, GeneScores, ScoreGenesParams};
use crate::error::Result;
use crate::gpu::dense_reduce::csr_chunked_sums;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_for, grid_stride, DeviceCsr, GpuContext};
use crate::stats::DENSE_CHUNK_ROWS;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "score_genes",
    source: include_str!("score_genes.cu"),
};

/// The module [`score_genes_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::score_genes`] on `ctx`'s GPU: the same control genes and scores, bit for bit.
pub fn score_genes_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    genes: &[usize],
    pool: &[usize],
    params: &ScoreGenesParams,
) -> Result<GeneScores> {
    check_params(x.n_cols, genes, pool, params)?;
    let means = nan_col_means(ctx, x)?;
    let control = control_genes(&means, genes, pool, params)?;
    let mut mark = vec![0u8; x.n_cols];
    genes.iter().for_each(|&g| mark[g] = 1);
    control.iter().for_each(|&g| mark[g] = 2);
    let mark = ctx.upload(&mark)?;
    let (listed, controls) = (ctx.alloc::<f64>(x.n_rows)?, ctx.alloc::<f64>(x.n_rows)?);
    let f = ctx.function(SRC, "score_row_means")?;
    let n = x.n_rows as u64;
    let (n_listed, n_control) = (genes.len() as f64, control.len() as f64);
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&mark);
    l.arg(&n_listed).arg(&n_control).arg(&listed).arg(&controls);
    ctx.launch(l, grid_stride(x.n_rows), "score_row_means")?;
    let (listed, controls) = (ctx.download(&listed)?, ctx.download(&controls)?);
    Ok(GeneScores {
        scores: listed.iter().zip(&controls).map(|(a, b)| a - b).collect(),
        control,
    })
}

/// Each column's mean over the rows, NaN values left out (`nan_col_means`' bits).
fn nan_col_means(ctx: &GpuContext, x: &DeviceCsr) -> Result<Vec<f64>> {
    let (n, g) = (x.n_rows, x.n_cols);
    if n == 0 {
        return Ok(vec![f64::NAN; g]);
    }
    let f = ctx.function(SRC, "score_nan_chunk_sums")?;
    let sums = csr_chunked_sums(ctx, x, 2 * g, |wave, row0, first, count, out| {
        let (row0, n64, g64, chunk) = (row0 as u64, n as u64, g as u64, DENSE_CHUNK_ROWS as u64);
        let mut l = ctx.launcher(&f);
        l.arg(wave).arg(&row0).arg(&n64).arg(&g64).arg(&chunk);
        l.arg(&first).arg(&count).arg(out);
        ctx.launch(l, grid_for(count as usize * g), "score_nan_chunk_sums")
    })?;
    let (s, nans) = sums.split_at(g);
    Ok(s.iter()
        .zip(nans)
        .map(|(s, &k)| s / (n as f64 - k))
        .collect())
}
