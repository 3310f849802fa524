//! The GPU twin of [`super::pca_dense`] for a dense device matrix (the pipeline's scaled
//! cells x genes matrix): the column sums (`pca.cu`), the Gram matrix `X^T X` (cuBLAS
//! `GemmEx` on TF32 tensor cores over blocks of rows, each block split in two TF32 parts for
//! f32's accuracy, each block's f32 product added into an f64 total on the device, as the CPU
//! accumulates), the top of the symmetric eigendecomposition (cuSOLVER `dsyevdx`, f64) and the scores
//! `X V - mu V` (`project_rows` in `pca.cu`) run on the device; the covariance, the sign rule
//! and the variances are the CPU's shared host code on the `g x g` and `g x k` matrices.
//!
//! Conventions: `X` is row-major `n x g`, which cuBLAS reads as the column-major `g x n` matrix
//! `X^T` with leading dimension `g`; the `g x g` matrices are column-major with leading dimension
//! `g` (symmetric, so only the lower triangle matters); the scores, column-major `k x n` with
//! leading dimension `k`, are the row-major `n x k` result.

use super::{
    eig_on_root, finish_covariance, mean_times_v, n_comps, pca_dense, reduce_gram, shape_across,
    use_dual, PcaParams, PcaResult,
};
use crate::comm::{Communicator, SingleRank};
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::streamed::{dense_blocks, for_each_block};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{blocks_for_rows, grid_stride, DeviceDense, DeviceVec, GpuContext, BLOCK};
use crate::stats::add_into;
use faer::Mat;
use rmm_cuda::cudarc::cublas::sys as cublas;
use rmm_cuda::cudarc::cusolver::sys as cusolver;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "pca",
    source: include_str!("pca.cu"),
};

/// Rows per block of the Gram matrix: f32 sums over at most this many rows, then f64
/// (the CPU's `BLOCK_F32`).
const GRAM_ROWS: usize = super::BLOCK_F32;

/// PCA (covariance route) of a dense device matrix: the result of the CPU's [`pca_dense`] up to
/// f32 rounding of the Gram blocks and scores (and the signs/order of components with equal
/// eigenvalues). Values are not checked for being finite (the pipeline checks X earlier).
///
/// Small inputs with fewer cells than genes (where the CPU takes its dual route: at most 8192
/// cells and 2e7 values) are downloaded and handed to [`pca_dense`]; every other input,
/// e.g. 200,000 x 2,000, runs on the device apart from the `O(g^2)` covariance and `O(g k)`
/// host steps.
pub fn pca_dense_gpu(ctx: &GpuContext, x: &DeviceDense, params: &PcaParams) -> Result<PcaResult> {
    pca_dense_gpu_across(ctx, x, params, &SingleRank)
}

/// [`pca_dense_gpu`] of one rank's cells: the Gram matrix and column sums added over the ranks
/// of `comm`, the eigendecomposition on rank 0, every rank's scores for its own cells.
pub fn pca_dense_gpu_across(
    ctx: &GpuContext,
    x: &DeviceDense,
    params: &PcaParams,
    comm: &dyn Communicator,
) -> Result<PcaResult> {
    let (n, g) = (x.n_rows, x.n_cols);
    let (n_all, k, dual) = shape_across(params, n, g, comm)?;
    if dual {
        return pca_dense(&x.download(ctx)?, params);
    }
    check_sizes(n, g)?;
    ctx.bind_to_thread()?;
    if comm.size() == 1 {
        return pca_on_device(ctx, x, params.zero_center, k);
    }
    let mut sums = col_sums(ctx, x)?;
    let mut gm = gram(ctx, x)?;
    reduce_gram(comm, &mut gm, &mut sums)?;
    finish_covariance(
        n_all,
        g,
        k,
        params.zero_center,
        gm,
        sums,
        eig_on_root(comm, |c, k| top_eigen(ctx, c, k)),
        |v, mean| project(ctx, x, v, mean),
    )
}

/// One GPU's covariance route with the `g x g` matrices kept on the device: the Gram matrix,
/// the covariance formed from it in place (`covariance_lower`, the CPU's formula), and its top
/// eigenpairs; only vectors of `g` values and the `g x k` components come back.
fn pca_on_device(
    ctx: &GpuContext,
    x: &DeviceDense,
    zero_center: bool,
    k: usize,
) -> Result<PcaResult> {
    let (n, g) = (x.n_rows, x.n_cols);
    let mut trace = PhaseTrace::new(ctx, "pca");
    let sums = col_sums(ctx, x)?;
    trace.mark("column sums")?;
    let mut gram = GramAccumulator::new(ctx, g)?;
    gram.add(ctx, x)?;
    trace.mark("gram")?;
    let mean = super::column_means(n, zero_center, &sums);
    let (sq, diag) = (ctx.alloc::<f64>(g)?, ctx.alloc::<f64>(g)?);
    let f = ctx.function(SRC, "covariance_lower")?;
    let (g64, nf, center) = (g as u64, n as f64, zero_center as i32);
    let mean_d = ctx.upload(&mean)?;
    let mut l = ctx.launcher(&f);
    l.arg(&gram.acc)
        .arg(&g64)
        .arg(&nf)
        .arg(&mean_d)
        .arg(&center)
        .arg(&sq)
        .arg(&diag);
    ctx.launch(l, grid_stride(g * g), "covariance_lower")?;
    let sq = ctx.download(&sq)?;
    // The trace, summed in the CPU's order.
    let total: f64 = ctx.download(&diag)?.iter().sum();
    trace.mark("covariance")?;
    drop((gram.part, gram.split, gram.pointers));
    let eig = top_eigen_on_device(ctx, gram.acc, g, k)?;
    trace.mark("eigenvectors")?;
    let out = super::finish_eigen(n, k, zero_center, eig, total, mean, sums, &sq, |v, m| {
        project(ctx, x, v, m)
    });
    trace.mark("scores and host")?;
    out
}

/// A dense `n x g` device matrix of uniform values in [0, 1) made on the device (the warm-up's
/// rehearsal data: no host array is made or uploaded).
fn uniform_matrix(ctx: &GpuContext, n: usize, g: usize, seed: u64) -> Result<DeviceDense> {
    let data = ctx.alloc::<f32>(n * g)?;
    let f = ctx.function(SRC, "fill_uniform")?;
    let len = (n * g) as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&data).arg(&len).arg(&seed);
    ctx.launch(l, grid_stride(n * g), "fill_uniform")?;
    Ok(DeviceDense {
        n_rows: n,
        n_cols: g,
        data,
    })
}

/// Slices of rows whose column sums `dense_col_sums` keeps apart before adding them in order:
/// enough blocks to fill the GPU (with `g / 256` blocks a slice), `MAX_SLICES * g` doubles of
/// scratch (4 MB at 2,000 genes).
const MAX_SLICES: usize = 256;

/// Column sums of `X` in f64.
fn col_sums(ctx: &GpuContext, x: &DeviceDense) -> Result<Vec<f64>> {
    let (n, g) = (x.n_rows, x.n_cols);
    let slices = n.div_ceil(2048).clamp(1, MAX_SLICES);
    let rows_per_slice = n.div_ceil(slices) as u64;
    let partial = ctx.alloc::<f64>(slices * g)?;
    let f = ctx.function(SRC, "dense_col_sums")?;
    let (n64, g64, slices64) = (n as u64, g as u64, slices as u64);
    let mut l = ctx.launcher(&f);
    l.arg(&x.data)
        .arg(&n64)
        .arg(&g64)
        .arg(&rows_per_slice)
        .arg(&partial);
    let cfg = LaunchConfig {
        grid_dim: (g.div_ceil(BLOCK as usize) as u32, slices as u32, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    ctx.launch(l, cfg, "dense_col_sums")?;
    let sums = ctx.alloc::<f64>(g)?;
    let f = ctx.function(SRC, "sum_slices")?;
    let mut l = ctx.launcher(&f);
    l.arg(&partial).arg(&slices64).arg(&g64).arg(&sums);
    ctx.launch(l, grid_stride(g), "sum_slices")?;
    ctx.download(&sums)
}

/// The lower triangle of `X^T X` (f64, the upper triangle zero).
fn gram(ctx: &GpuContext, x: &DeviceDense) -> Result<Mat<f64>> {
    let mut acc = GramAccumulator::new(ctx, x.n_cols)?;
    acc.add(ctx, x)?;
    acc.finish(ctx)
}

/// The tiles of the Gram matrix's lower triangle: `t` tile rows of `size` genes each (a
/// multiple of 64 near 1,024), the genes padded with zeros to `t * size`, so that every tile is
/// the same product and one batched call makes all `t (t + 1) / 2` of them (at 5,000 genes: 15
/// tiles of 1,024, 63% of the square; one product a strip of the triangle left most of the
/// GPU idle, and the whole square is 3 x 5,000^2 products a row).
#[derive(Debug, Clone, Copy, PartialEq)]
struct GramTiles {
    t: usize,
    size: usize,
}

impl GramTiles {
    fn of(g: usize) -> Self {
        let t = g.div_ceil(1024).max(1);
        GramTiles {
            t,
            size: g.div_ceil(t).next_multiple_of(64),
        }
    }

    /// The padded number of genes (the leading dimension of the split block and the product).
    fn padded(&self) -> usize {
        self.t * self.size
    }

    /// The tiles (first row, first column) with row >= column, in tile-row order.
    fn lower(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.t).flat_map(move |i| (0..=i).map(move |j| (i * self.size, j * self.size)))
    }
}

/// Device bytes of [`GramAccumulator`] for `g` genes: the f64 total, the f32 block product
/// (padded) and the split block (four chunks of [`GRAM_ROWS`] x padded genes).
pub fn gram_bytes(g: usize) -> u64 {
    let p = GramTiles::of(g).padded() as u64;
    8 * (g as u64).pow(2) + 4 * p * p + 16 * GRAM_ROWS as u64 * p
}

/// The f64 Gram total on the device, the f32 product of one block of [`GRAM_ROWS`] rows and
/// that block split for TF32 tensor cores (`split_tf32` in `pca.cu`), the genes padded to
/// whole [`GramTiles`].
struct GramAccumulator {
    g: usize,
    tiles: GramTiles,
    acc: DeviceVec<f64>,
    part: DeviceVec<f32>,
    split: Option<DeviceVec<f32>>,
    /// The batched call's pointers (A, then B, then C, a tile each) for blocks of `.0` rows.
    pointers: Option<(usize, DeviceVec<u64>)>,
}

impl GramAccumulator {
    fn new(ctx: &GpuContext, g: usize) -> Result<Self> {
        let tiles = GramTiles::of(g);
        Ok(GramAccumulator {
            g,
            tiles,
            acc: ctx.zeros::<f64>(g * g)?,
            part: ctx.alloc::<f32>(tiles.padded().pow(2))?,
            split: None,
            pointers: None,
        })
    }

    /// Adds `x^T x` of the rows of `x`, [`GRAM_ROWS`] at a time (rows streamed in blocks that
    /// are multiples of it give the in-memory sums exactly). Each block's product is three
    /// TF32 products on tensor cores summed in f32 (`split_tf32`: f32's accuracy), the lower
    /// triangle's tiles in one batched call, then added to the f64 total.
    fn add(&mut self, ctx: &GpuContext, x: &DeviceDense) -> Result<()> {
        let (n, g, p) = (x.n_rows, self.g, self.tiles.padded());
        if n == 0 {
            return Ok(());
        }
        let rows = n.min(GRAM_ROWS);
        if self.split.as_ref().is_none_or(|s| s.len() < 4 * rows * p) {
            // The pointers address the split block: made again with it.
            (self.split, self.pointers) = (None, None);
            self.split = Some(ctx.alloc::<f32>(4 * rows * p)?);
        }
        let handle = *ctx.blas()?.handle();
        let (split_f, add) = (
            ctx.function(SRC, "split_tf32")?,
            ctx.function(SRC, "add_lower")?,
        );
        let (g64, p64) = (g as u64, p as u64);
        let (one, zero) = (1.0f32, 0.0f32);
        let size = self.tiles.size as i32;
        let count = self.tiles.lower().count();
        for s in (0..n).step_by(GRAM_ROWS) {
            let b = (n - s).min(GRAM_ROWS);
            let split = self.split.as_ref().expect("allocated above");
            let (offset, b64) = ((s * g) as u64, b as u64);
            let mut l = ctx.launcher(&split_f);
            l.arg(&x.data)
                .arg(&offset)
                .arg(&b64)
                .arg(&g64)
                .arg(&p64)
                .arg(split);
            ctx.launch(l, blocks_for_rows(b, BLOCK), "split_tf32")?;
            if self.pointers.as_ref().is_none_or(|(rows, _)| *rows != b) {
                let ptrs = tile_pointers(&self.tiles, b, split.ptr(), self.part.ptr());
                self.pointers = Some((b, ctx.upload(&ptrs)?));
            }
            let ptrs = self.pointers.as_ref().expect("uploaded above").1.ptr();
            let at = |i: usize| (ptrs + (i * count * 8) as u64) as *const *const std::ffi::c_void;
            // SAFETY: every tile's A reads `size` rows (genes) of the p x 3b view of the split
            // block (lda p), its B `size` rows of the chunks after it (ldb p), its C writes a
            // size x size block of the p x p `part` (ldc p): all inside their buffers
            // (`tile_pointers`). alpha and beta are host values (the default pointer mode).
            unsafe {
                cublas::cublasGemmBatchedEx(
                    handle,
                    cublas::cublasOperation_t::CUBLAS_OP_N,
                    cublas::cublasOperation_t::CUBLAS_OP_T,
                    size,
                    size,
                    (3 * b) as i32,
                    (&one as *const f32).cast(),
                    at(0),
                    cublas::cudaDataType::CUDA_R_32F,
                    p as i32,
                    at(1),
                    cublas::cudaDataType::CUDA_R_32F,
                    p as i32,
                    (&zero as *const f32).cast(),
                    at(2) as *const *mut std::ffi::c_void,
                    cublas::cudaDataType::CUDA_R_32F,
                    p as i32,
                    count as i32,
                    cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                    cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .result()
            .map_err(|e| KernelError::Gpu(format!("cublasGemmBatchedEx (Gram matrix): {e:?}")))?;
            let mut l = ctx.launcher(&add);
            l.arg(&self.part).arg(&p64).arg(&g64).arg(&self.acc);
            ctx.launch(l, blocks_for_rows(g, BLOCK), "add_lower")?;
        }
        Ok(())
    }

    fn finish(self, ctx: &GpuContext) -> Result<Mat<f64>> {
        Ok(lower_from_col_major(&ctx.download(&self.acc)?, self.g))
    }
}

/// The batched call's device pointers for a block of `b` rows, as `u64`s: every lower tile's
/// A (rows `i0..` of chunks 0-2 of the split block, `[l h h]`), then every B (rows `j0..` of
/// chunks 1-3, `[h h l]`), then every C (the tile at (i0, j0) of the padded product).
fn tile_pointers(tiles: &GramTiles, b: usize, split: u64, part: u64) -> Vec<u64> {
    let p = tiles.padded() as u64;
    let chunk = b as u64 * p * 4;
    let a = tiles.lower().map(|(i0, _)| split + i0 as u64 * 4);
    let bt = tiles.lower().map(|(_, j0)| split + chunk + j0 as u64 * 4);
    let c = tiles
        .lower()
        .map(|(i0, j0)| part + (j0 as u64 * p + i0 as u64) * 4);
    a.chain(bt).chain(c).collect()
}

/// [`pca_dense_gpu`] of a host matrix streamed through the device in row blocks of at most
/// `block_bytes` (multiples of the Gram block, so the Gram matrix is the in-memory one): one
/// pass for the column sums and the Gram matrix, one for the scores.
pub fn pca_dense_streamed(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    params: &PcaParams,
    block_bytes: usize,
) -> Result<PcaResult> {
    let (n, g) = (x.n_rows, x.n_cols);
    n_comps(params, n, g)?;
    if use_dual(n, g) {
        return pca_dense(x, params);
    }
    let blocks = dense_blocks(n, g, block_bytes, GRAM_ROWS);
    let upload = |lane: &GpuContext, k: usize| DeviceDense::upload_rows(lane, x, blocks[k].clone());
    pca_dense_blocks(ctx, n, g, blocks.len(), upload, params)
}

/// [`pca_dense_gpu`] of an `n x g` dense matrix made on the device block by block:
/// `make(lane, k)` gives block `k` (rows in order; any number of rows each) on the copy lane,
/// twice: one pass for the column sums and the Gram matrix, one for the scores. For matrices
/// that never exist whole (rows generated and scaled on the fly).
pub fn pca_dense_blocks<M>(
    ctx: &GpuContext,
    n: usize,
    g: usize,
    n_blocks: usize,
    make: M,
    params: &PcaParams,
) -> Result<PcaResult>
where
    M: Fn(&GpuContext, usize) -> Result<DeviceDense> + Sync,
{
    let k = n_comps(params, n, g)?;
    check_sizes(n, g)?;
    ctx.bind_to_thread()?;
    let mut trace = PhaseTrace::new(ctx, "pca");
    let mut sums = vec![0.0; g];
    let mut rows = 0;
    let mut gm = GramAccumulator::new(ctx, g)?;
    for_each_block(ctx, n_blocks, &make, |block, _| {
        check_block(&block, g)?;
        rows += block.n_rows;
        add_into(&mut sums, &col_sums(ctx, &block)?);
        gm.add(ctx, &block)
    })?;
    if rows != n {
        return Err(KernelError::Shape(format!(
            "pca: the blocks hold {rows} rows of {n}"
        )));
    }
    let gm = gm.finish(ctx)?;
    trace.mark("first pass: blocks, column sums and Gram matrix")?;
    let result = finish_covariance(
        n,
        g,
        k,
        params.zero_center,
        gm,
        sums,
        |c, k| {
            let eig = top_eigen(ctx, c, k);
            trace.mark("covariance and eigenvectors")?;
            eig
        },
        |v, mean| {
            let mut scores = Vec::with_capacity(n * v.ncols());
            for_each_block(ctx, n_blocks, &make, |block, _| {
                check_block(&block, g)?;
                scores.extend(project(ctx, &block, v, mean)?);
                Ok(())
            })?;
            if scores.len() != n * v.ncols() {
                return Err(KernelError::Shape(format!(
                    "pca: the second pass made {} rows of {n}",
                    scores.len() / v.ncols().max(1)
                )));
            }
            Ok(scores)
        },
    )?;
    trace.mark("second pass: blocks and scores")?;
    Ok(result)
}

fn check_block(block: &DeviceDense, g: usize) -> Result<()> {
    if block.n_cols != g {
        return Err(KernelError::Shape(format!(
            "pca: a block of {} columns in a matrix of {g}",
            block.n_cols
        )));
    }
    Ok(())
}

/// cuBLAS and cuSOLVER take 32-bit sizes (the solver's workspace, about 2 g^2, is an i32).
fn check_sizes(n: usize, g: usize) -> Result<()> {
    if n > i32::MAX as usize || g > 32_000 {
        return Err(KernelError::Unsupported(format!(
            "pca on the GPU: {n} x {g} exceeds the 32-bit sizes of cuBLAS / cuSOLVER"
        )));
    }
    Ok(())
}

/// A column-major `g x g` buffer's lower triangle as a matrix (upper triangle zero).
fn lower_from_col_major(h: &[f64], g: usize) -> Mat<f64> {
    Mat::from_fn(g, g, |i, j| if i >= j { h[j * g + i] } else { 0.0 })
}

/// The `k` largest eigenvalues (descending) and their eigenvectors of the symmetric `c` by
/// `cusolverDnDsyevdx` asked for the index range `g-k+1 ..= g` (1-based, ascending): only the
/// top `k` eigenvectors are formed (lower triangle, column-major, lda = g). It returns those
/// eigenvalues ascending in `W[..k]` and their eigenvectors as the first `k` columns of `A`.
fn top_eigen(ctx: &GpuContext, c: Mat<f64>, k: usize) -> Result<(Vec<f64>, Mat<f64>)> {
    let g = c.nrows();
    let a = ctx.upload(&to_col_major(&c))?;
    drop(c);
    top_eigen_on_device(ctx, a, g, k)
}

/// [`top_eigen`] of the symmetric `g x g` matrix `a` already on the device (column-major, its
/// lower triangle read; overwritten).
fn top_eigen_on_device(
    ctx: &GpuContext,
    a: DeviceVec<f64>,
    g: usize,
    k: usize,
) -> Result<(Vec<f64>, Mat<f64>)> {
    let w = ctx.alloc::<f64>(g)?;
    let info = ctx.zeros::<i32>(1)?;
    let handle = ctx.solver()?.cu();
    let jobz = cusolver::cusolverEigMode_t::CUSOLVER_EIG_MODE_VECTOR;
    let range = cusolver::cusolverEigRange_t::CUSOLVER_EIG_RANGE_I;
    let uplo = cusolver::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER;
    let (gi, a_ptr, w_ptr) = (g as i32, a.ptr() as *mut f64, w.ptr() as *mut f64);
    let (il, iu) = ((g - k + 1) as i32, g as i32);
    let (mut lwork, mut meig) = (0i32, 0i32);
    // SAFETY: `a` holds g*g values (lda g) and `w` g values.
    unsafe {
        cusolver::cusolverDnDsyevdx_bufferSize(
            handle, jobz, range, uplo, gi, a_ptr, gi, 0.0, 0.0, il, iu, &mut meig, w_ptr,
            &mut lwork,
        )
    }
    .result()
    .map_err(|e| KernelError::Gpu(format!("cusolverDnDsyevdx_bufferSize: {e:?}")))?;
    let work = ctx.alloc::<f64>((lwork as usize).max(1))?;
    // SAFETY: as above; `work` holds lwork values and `info` one int.
    unsafe {
        cusolver::cusolverDnDsyevdx(
            handle,
            jobz,
            range,
            uplo,
            gi,
            a_ptr,
            gi,
            0.0,
            0.0,
            il,
            iu,
            &mut meig,
            w_ptr,
            work.ptr() as *mut f64,
            lwork,
            info.ptr() as *mut i32,
        )
    }
    .result()
    .map_err(|e| KernelError::Gpu(format!("cusolverDnDsyevdx: {e:?}")))?;
    let status = ctx.download(&info)?[0];
    if status != 0 {
        return Err(KernelError::Gpu(format!(
            "cusolverDnDsyevdx: devInfo = {status} ({})",
            if status > 0 {
                "the eigensolver did not converge"
            } else {
                "an invalid argument"
            }
        )));
    }
    if meig as usize != k {
        return Err(KernelError::Gpu(format!(
            "cusolverDnDsyevdx returned {meig} eigenpairs, {k} were asked"
        )));
    }
    // The top k as the last k of g ascending values, the layout `top_k_descending` reads.
    let mut w_all = vec![0.0; g];
    w_all[g - k..].copy_from_slice(&ctx.download(&w)?[..k]);
    let mut a = a;
    a.resize(g * k)?;
    Ok(top_k_descending(&w_all, &ctx.download(&a)?, g, k))
}

/// Column-major copy of a matrix.
fn to_col_major(m: &Mat<f64>) -> Vec<f64> {
    (0..m.ncols())
        .flat_map(|j| (0..m.nrows()).map(move |i| (i, j)))
        .map(|(i, j)| m[(i, j)])
        .collect()
}

/// From all eigenvalues ascending (`w`) and the eigenvectors of the top `k` as column-major
/// `g x k` (ascending too): the top `k`, largest first.
fn top_k_descending(w: &[f64], top: &[f64], g: usize, k: usize) -> (Vec<f64>, Mat<f64>) {
    let vals = (0..k).map(|c| w[g - 1 - c]).collect();
    let vecs = Mat::from_fn(g, k, |i, c| top[(k - 1 - c) * g + i]);
    (vals, vecs)
}

/// Scores `X V - 1 (mu^T V)` as f32 (`project_rows` in `pca.cu`: the products summed in f32,
/// `mu^T V` subtracted in f64), row-major `n x k`.
fn project(ctx: &GpuContext, x: &DeviceDense, v: &Mat<f64>, mean: &[f64]) -> Result<Vec<f32>> {
    let (n, g, k) = (x.n_rows, x.n_cols, v.ncols());
    let vf: Vec<f32> = (0..g)
        .flat_map(|j| (0..k).map(move |c| v[(j, c)] as f32))
        .collect();
    let v_d = ctx.upload(&vf)?;
    let mv_d = ctx.upload(&mean_times_v(mean, v))?;
    let scores = ctx.alloc::<f32>(n * k)?;
    let f = ctx.function(SRC, "project_rows")?;
    let (n64, g64, k64) = (n as u64, g as u64, k as u64);
    let mut l = ctx.launcher(&f);
    l.arg(&x.data)
        .arg(&n64)
        .arg(&g64)
        .arg(&v_d)
        .arg(&k64)
        .arg(&mv_d)
        .arg(&scores);
    let cfg = LaunchConfig {
        grid_dim: (
            n.div_ceil(PROJECT_ROWS) as u32,
            k.div_ceil(PROJECT_COLS) as u32,
            1,
        ),
        block_dim: (PROJECT_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    if n > 0 && k > 0 {
        ctx.launch(l, cfg, "project_rows")?;
    }
    ctx.download(&scores)
}

/// `project_rows`' block: threads, and rows x columns of the scores it makes (`PR_*` in
/// `pca.cu`).
const PROJECT_THREADS: u32 = 256;
const PROJECT_ROWS: usize = 128;
const PROJECT_COLS: usize = 64;

/// The warm-up's rehearsal of the library calls of [`pca_dense_gpu`] for `g` genes (see
/// `warm_up::rehearse_libraries`): cuBLAS's Gram matrix of `2 g` uniform rows, so CUDA loads
/// the Gram matrix's GEMM kernels before the pipeline's PCA needs them.
pub fn rehearse_gram(ctx: &GpuContext, g: usize) -> Result<()> {
    let x = uniform_matrix(ctx, (2 * g).max(1024), g, 0x9e37)?;
    let mut gram = GramAccumulator::new(ctx, g)?;
    gram.add(ctx, &x)?;
    ctx.synchronize()
}

/// The same for cuSOLVER: the top `k` eigenpairs of a uniform symmetric `g x g` matrix (its
/// lower triangle), which loads the eigensolver's kernels for that size.
pub fn rehearse_eigen(ctx: &GpuContext, g: usize, k: usize) -> Result<()> {
    let a = ctx.alloc::<f64>(g * g)?;
    let f = ctx.function(SRC, "fill_uniform_f64")?;
    let (len, seed) = ((g * g) as u64, 0x9e37u64);
    let mut l = ctx.launcher(&f);
    l.arg(&a).arg(&len).arg(&seed);
    ctx.launch(l, grid_stride(g * g), "fill_uniform_f64")?;
    top_eigen_on_device(ctx, a, g, k.clamp(1, g)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive column-major BLAS semantics, to check the argument conventions used above.
    fn gemm_cm(
        ta: bool,
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        ldc: usize,
    ) -> Vec<f32> {
        let at = |i: usize, l: usize| if ta { a[i * lda + l] } else { a[l * lda + i] };
        let bt = |l: usize, j: usize| if tb { b[l * ldb + j] } else { b[j * ldb + l] };
        let mut c = vec![0.0f32; ldc * n];
        for j in 0..n {
            for i in 0..m {
                c[j * ldc + i] = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
            }
        }
        c
    }

    /// `cvt.rna.tf32.f32` on a finite value: to nearest (ties away from zero), 10 fraction bits.
    fn round_tf32(x: f32) -> f32 {
        f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
    }

    #[test]
    fn tf32_rounding_to_nearest() {
        assert_eq!(round_tf32(1.0), 1.0);
        let ulp = 2f32.powi(-10);
        assert_eq!(round_tf32(1.0 + ulp * 0.49), 1.0);
        assert_eq!(round_tf32(1.0 + ulp * 0.5), 1.0 + ulp);
        assert_eq!(round_tf32(-(1.0 + ulp * 0.51)), -(1.0 + ulp));
        assert_eq!(round_tf32(3.0e-3).to_bits() & 0x1fff, 0);
    }

    #[test]
    fn gram_tiles_cover_the_genes_in_equal_tiles() {
        for (g, t, size) in [
            (1, 1, 64),
            (96, 1, 128),
            (300, 1, 320),
            (1024, 1, 1024),
            (1025, 2, 576),
            (2000, 2, 1024),
            (5000, 5, 1024),
            (32_000, 32, 1024),
        ] {
            let tiles = GramTiles::of(g);
            assert_eq!(tiles, GramTiles { t, size }, "{g} genes");
            assert!(tiles.padded() >= g && tiles.padded() - g < tiles.size);
            assert_eq!(tiles.lower().count(), t * (t + 1) / 2);
        }
    }

    /// `add`'s calls on the host: the split of `split_tf32` (genes padded with zeros), then
    /// each tile's gemm(N, T) of the chunks [l h h] with [h h l] at the pointers
    /// `tile_pointers` gives the batched call. Every entry of the lower triangle is written,
    /// and it is `x^T x` to f32's accuracy where one TF32 product is about 2^-11 off.
    #[test]
    fn tiles_of_split_blocks_give_the_gram_matrix_of_row_major_x() {
        let (b, g) = (7, 11);
        let tiles = GramTiles { t: 3, size: 4 };
        let p = tiles.padded();
        let x: Vec<f32> = (0..b * g)
            .map(|t| ((t * 37 % 101) as f32 - 50.0) * 0.012_345_7)
            .collect();
        let len = b * p;
        let mut chunks = vec![0.0f32; 4 * len];
        for r in 0..b {
            for j in 0..g {
                let (v, i) = (x[r * g + j], r * p + j);
                let h = round_tf32(v);
                let l = round_tf32(v - h);
                (chunks[i], chunks[len + i]) = (l, h);
                (chunks[2 * len + i], chunks[3 * len + i]) = (h, l);
            }
        }
        let ptrs = tile_pointers(&tiles, b, 0, 0);
        let count = tiles.lower().count();
        assert_eq!(ptrs.len(), 3 * count);
        let mut part = vec![f32::NAN; p * p];
        for k in 0..count {
            let [a, bt, c] = [0, 1, 2].map(|w| ptrs[w * count + k] as usize / 4);
            let s = tiles.size;
            let tile = gemm_cm(
                false,
                true,
                s,
                s,
                3 * b,
                &chunks[a..],
                p,
                &chunks[bt..],
                p,
                p,
            );
            for j in 0..s {
                part[c + j * p..c + j * p + s].copy_from_slice(&tile[j * p..j * p + s]);
            }
        }
        let (mut worst, mut worst_tf32) = (0.0f64, 0.0f64);
        for i in 0..g {
            for j in 0..=i {
                let got = part[j * p + i] as f64;
                assert!(got.is_finite(), "({i}, {j}) not written");
                let (mut want, mut scale, mut one) = (0.0, 0.0, 0.0);
                for r in 0..b {
                    let (u, v) = (x[r * g + i] as f64, x[r * g + j] as f64);
                    want += u * v;
                    scale += (u * v).abs();
                    one += round_tf32(u as f32) as f64 * round_tf32(v as f32) as f64;
                }
                worst = worst.max((got - want).abs() / scale);
                worst_tf32 = worst_tf32.max((one - want).abs() / scale);
            }
        }
        assert!(worst < 1e-6, "split products off by {worst:e} of the sums");
        assert!(
            worst_tf32 > 1e-5,
            "one TF32 product off by only {worst_tf32:e}"
        );
    }

    #[test]
    fn top_k_of_an_ascending_eigendecomposition() {
        let g = 5;
        let c = Mat::from_fn(g, g, |i, j| {
            1.0 / (1.0 + i as f64 + j as f64) + (i == j) as u8 as f64
        });
        // What dsyevd returns: ascending eigenvalues, eigenvectors as columns (column-major).
        let evd = c.self_adjoint_eigen(faer::Side::Lower).unwrap();
        let w: Vec<f64> = (0..g).map(|i| evd.S().column_vector()[i]).collect();
        let all = to_col_major(&evd.U().to_owned());
        let k = 3;
        let (vals, vecs) = top_k_descending(&w, &all[(g - k) * g..], g, k);
        let (want_vals, want_vecs) = super::super::faer_top_eigen(c, k).unwrap();
        assert_eq!(vals, want_vals);
        for c_ in 0..k {
            for i in 0..g {
                assert_eq!(vecs[(i, c_)], want_vecs[(i, c_)]);
            }
        }
    }
}
