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
use std::ffi::c_void;

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
    let mut gram = GramAccumulator::new(ctx, g, None)?;
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
    let mut acc = GramAccumulator::new(ctx, x.n_cols, None)?;
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

/// How a block of rows is split for the tensor cores (`pca.cu`): three TF32 products
/// (`split_tf32`), or, where a bound on the values' magnitude is known, three FP16 products of
/// the values times `scale` (`split_f16`: the same 22 bits of each value, at twice TF32's rate).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Split {
    Tf32,
    F16 { scale: f32 },
}

/// Where `split_f16` takes the bound: below 2^14, half of FP16's range (its largest finite
/// value is 65,504).
const F16_TOP: f32 = 16384.0;

impl Split {
    /// FP16 for values known to be at most `max_abs` in magnitude (finite, positive), scaled by
    /// the power of two that takes it to just below [`F16_TOP`] (at most 2^40, so the product's
    /// factor scale^-2 stays a normal f32); TF32 without a bound.
    fn for_bound(max_abs: Option<f32>) -> Split {
        match max_abs {
            Some(m) if m.is_finite() && m > 0.0 => {
                let mut e = (F16_TOP / m).log2().floor().min(40.0);
                if m * 2f32.powf(e) >= F16_TOP {
                    e -= 1.0;
                }
                Split::F16 {
                    scale: 2f32.powf(e),
                }
            }
            _ => Split::Tf32,
        }
    }

    /// Bytes of an element of the split block.
    fn elem(self) -> usize {
        match self {
            Split::Tf32 => 4,
            Split::F16 { .. } => 2,
        }
    }

    /// Bytes a value takes in the split block: TF32's chunks `[l h h l]`, FP16's `[l h l]`.
    fn chunk_bytes(self) -> usize {
        let chunks = match self {
            Split::Tf32 => 4,
            Split::F16 { .. } => 3,
        };
        chunks * self.elem()
    }

    /// The batched calls' pointers for a block of `b` rows split at `at` (chunks of `p x b`
    /// elements, `p` the padded genes) into the product at `part` ([`tile_pointers`]: TF32's
    /// one set, FP16's two).
    fn pointers(self, tiles: &GramTiles, b: usize, at: u64, part: u64) -> Vec<u64> {
        let elem = self.elem() as u64;
        let chunk = (b * tiles.padded()) as u64 * elem;
        match self {
            Split::Tf32 => tile_pointers(tiles, elem, (at, at + chunk), part),
            Split::F16 { .. } => {
                let mut v = tile_pointers(tiles, elem, (at + chunk, at + chunk), part);
                v.extend(tile_pointers(tiles, elem, (at, at + chunk), part));
                v
            }
        }
    }

    /// The calls that make a block's product of `b` rows from [`Split::pointers`].
    fn calls(self, b: usize) -> Vec<BlockCall> {
        match self {
            // [l h h] x [h h l]': l h' + h h' + h l'.
            Split::Tf32 => vec![BlockCall {
                first: 0,
                k: 3 * b,
                alpha: 1.0,
                beta: 0.0,
            }],
            // h h', then ([l h] x [h l]') 2^-11 (the low parts carry a factor 2^11), both of
            // the values times `scale`.
            Split::F16 { scale } => {
                let unscale = (scale * scale).recip();
                vec![
                    BlockCall {
                        first: 0,
                        k: b,
                        alpha: unscale,
                        beta: 0.0,
                    },
                    BlockCall {
                        first: 3,
                        k: 2 * b,
                        alpha: unscale / F16_LOW_SCALE,
                        beta: 1.0,
                    },
                ]
            }
        }
    }
}

/// One batched call of a block's product: its pointers (the set of A's among
/// [`Split::pointers`]' sets; B's and C's follow), the columns `k` it sums over, and
/// C = alpha A B' + beta C.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BlockCall {
    first: usize,
    k: usize,
    alpha: f32,
    beta: f32,
}

/// The f64 Gram total on the device, the f32 product of one block of [`GRAM_ROWS`] rows and
/// that block split for the tensor cores ([`Split`]), the genes padded to whole [`GramTiles`].
struct GramAccumulator {
    g: usize,
    tiles: GramTiles,
    split_as: Split,
    acc: DeviceVec<f64>,
    part: DeviceVec<f32>,
    /// The split block, in f32 words (FP16 chunks use its bytes as halves).
    split: Option<DeviceVec<f32>>,
    /// The batched calls' pointers (A, then B, then C, a tile each; FP16: those of h h', then
    /// those of the cross terms) for blocks of `.0` rows.
    pointers: Option<(usize, DeviceVec<u64>)>,
}

impl GramAccumulator {
    /// For `g` genes whose values are at most `max_abs` in magnitude, where that is known
    /// (it picks the [`Split`]).
    fn new(ctx: &GpuContext, g: usize, max_abs: Option<f32>) -> Result<Self> {
        let tiles = GramTiles::of(g);
        Ok(GramAccumulator {
            g,
            tiles,
            split_as: Split::for_bound(max_abs),
            acc: ctx.zeros::<f64>(g * g)?,
            part: ctx.alloc::<f32>(tiles.padded().pow(2))?,
            split: None,
            pointers: None,
        })
    }

    /// Adds `x^T x` of the rows of `x`, [`GRAM_ROWS`] at a time (rows streamed in blocks that
    /// are multiples of it give the in-memory sums exactly). Each block's product is three
    /// products on tensor cores summed in f32 ([`Split`]: f32's accuracy), the lower
    /// triangle's tiles in batched calls, then added to the f64 total.
    fn add(&mut self, ctx: &GpuContext, x: &DeviceDense) -> Result<()> {
        let (n, g, p) = (x.n_rows, self.g, self.tiles.padded());
        if n == 0 {
            return Ok(());
        }
        let rows = n.min(GRAM_ROWS);
        let words = (self.split_as.chunk_bytes() * rows * p).div_ceil(4);
        if self.split.as_ref().is_none_or(|s| s.len() < words) {
            // The pointers address the split block: made again with it.
            (self.split, self.pointers) = (None, None);
            self.split = Some(ctx.alloc::<f32>(words)?);
        }
        let kernel = match self.split_as {
            Split::Tf32 => "split_tf32",
            Split::F16 { .. } => "split_f16",
        };
        let (split_f, add) = (ctx.function(SRC, kernel)?, ctx.function(SRC, "add_lower")?);
        let (g64, p64) = (g as u64, p as u64);
        let count = self.tiles.lower().count();
        for s in (0..n).step_by(GRAM_ROWS) {
            let b = (n - s).min(GRAM_ROWS);
            let split = self.split.as_ref().expect("allocated above");
            let (offset, b64) = ((s * g) as u64, b as u64);
            let mut l = ctx.launcher(&split_f);
            l.arg(&x.data).arg(&offset).arg(&b64).arg(&g64).arg(&p64);
            if let Split::F16 { scale } = &self.split_as {
                l.arg(scale);
            }
            l.arg(split);
            ctx.launch(l, blocks_for_rows(b, BLOCK), kernel)?;
            if self.pointers.as_ref().is_none_or(|(rows, _)| *rows != b) {
                let ptrs = self
                    .split_as
                    .pointers(&self.tiles, b, split.ptr(), self.part.ptr());
                self.pointers = Some((b, ctx.upload(&ptrs)?));
            }
            let ptrs = self.pointers.as_ref().expect("uploaded above").1.ptr();
            use cublas::cublasComputeType_t::{CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
            use cublas::cudaDataType::{CUDA_R_16F, CUDA_R_32F};
            let (input, compute) = match self.split_as {
                Split::Tf32 => (CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32),
                Split::F16 { .. } => (CUDA_R_16F, CUBLAS_COMPUTE_32F),
            };
            for call in self.split_as.calls(b) {
                let at = |i: usize| (ptrs + ((call.first + i) * count * 8) as u64) as *const _;
                let tiles = TileProduct {
                    size: self.tiles.size as i32,
                    k: call.k as i32,
                    ld: p as i32,
                    count: count as i32,
                };
                let factors = (call.alpha, call.beta);
                // SAFETY: `tile_pointers` keeps every tile's reads inside the split block and
                // its writes inside `part` (see there); alpha and beta are host values.
                unsafe { tiles.gemm(ctx, (at(0), at(1), at(2)), factors, input, compute)? };
            }
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

/// The factor `split_f16` gives the low parts (2^11: their 11 bits stay clear of FP16's
/// subnormals).
const F16_LOW_SCALE: f32 = 2048.0;

/// One batched call of the lower triangle's tiles: each `size x size` tile of C (ldc `ld`) is
/// A B' over `k` columns, A and B `size` rows of the split block's `ld x k` views.
struct TileProduct {
    size: i32,
    k: i32,
    ld: i32,
    count: i32,
}

impl TileProduct {
    /// # Safety
    /// The device arrays of pointers `a`, `b`, `c` (`count` each) must address `size x k`
    /// views of A and B (lda = ldb = `ld`) and `size x size` blocks of C (ldc = `ld`) inside
    /// their buffers, with elements of `input` (A, B) and f32 (C).
    unsafe fn gemm(
        &self,
        ctx: &GpuContext,
        (a, b, c): (
            *const *const c_void,
            *const *const c_void,
            *const *const c_void,
        ),
        (alpha, beta): (f32, f32),
        input: cublas::cudaDataType,
        compute: cublas::cublasComputeType_t,
    ) -> Result<()> {
        let handle = *ctx.blas()?.handle();
        cublas::cublasGemmBatchedEx(
            handle,
            cublas::cublasOperation_t::CUBLAS_OP_N,
            cublas::cublasOperation_t::CUBLAS_OP_T,
            self.size,
            self.size,
            self.k,
            (&alpha as *const f32).cast(),
            a,
            input,
            self.ld,
            b,
            input,
            self.ld,
            (&beta as *const f32).cast(),
            c as *const *mut c_void,
            cublas::cudaDataType::CUDA_R_32F,
            self.ld,
            self.count,
            compute,
            cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .result()
        .map_err(|e| KernelError::Gpu(format!("cublasGemmBatchedEx (Gram matrix): {e:?}")))
    }
}

/// A batched call's device pointers, as `u64`s: every lower tile's A (rows `i0..` of the
/// `p x k` view of the split block that starts at `a`), then every B (rows `j0..` of the view at
/// `b`), then every C (the tile at (i0, j0) of the padded f32 product at `part`), for elements
/// of `elem` bytes. The chunks of a block are `p x rows` matrices one after the other: TF32's A
/// is chunks 0-2 `[l h h]` and its B chunks 1-3 `[h h l]`; FP16's A and B are chunk 1 (h h'),
/// then A chunks 0-1 `[l h]` and B chunks 1-2 `[h l]`.
fn tile_pointers(tiles: &GramTiles, elem: u64, (a, b): (u64, u64), part: u64) -> Vec<u64> {
    let p = tiles.padded() as u64;
    let at = tiles.lower().map(|(i0, _)| a + i0 as u64 * elem);
    let bt = tiles.lower().map(|(_, j0)| b + j0 as u64 * elem);
    let c = tiles
        .lower()
        .map(|(i0, j0)| part + (j0 as u64 * p + i0 as u64) * 4);
    at.chain(bt).chain(c).collect()
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
    pca_dense_blocks(ctx, n, g, blocks.len(), upload, None, params)
}

/// [`pca_dense_gpu`] of an `n x g` dense matrix made on the device block by block:
/// `make(lane, k)` gives block `k` (rows in order; any number of rows each) on the copy lane,
/// twice: one pass for the column sums and the Gram matrix, one for the scores. For matrices
/// that never exist whole (rows generated and scaled on the fly). `max_abs`: a bound on the
/// values' magnitude known ahead (scale's `max_value`), which lets the Gram matrix run on FP16
/// tensor cores ([`Split`]); a value beyond it gives a wrong Gram matrix, so `None` where
/// there is no such bound.
pub fn pca_dense_blocks<M>(
    ctx: &GpuContext,
    n: usize,
    g: usize,
    n_blocks: usize,
    make: M,
    max_abs: Option<f32>,
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
    let mut gm = GramAccumulator::new(ctx, g, max_abs)?;
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
    // Both splits: the pipeline's scaled blocks take FP16's.
    for bound in [None, Some(1.0)] {
        let mut gram = GramAccumulator::new(ctx, g, bound)?;
        gram.add(ctx, &x)?;
    }
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

    /// `add`'s calls on the host for a split ([`Split`]): the chunks as `split_tf32` or
    /// `split_f16` write them (genes padded with zeros; FP16 values held as f32), then each of
    /// [`Split::calls`]' gemm(N, T) of every tile at [`Split::pointers`]. Returns the largest
    /// error of the lower triangle's entries against `x^T x` in f64, relative to the sum of
    /// the products' magnitudes.
    fn host_gram(split: Split, x: &[f32], b: usize, g: usize, tiles: GramTiles) -> f64 {
        let p = tiles.padded();
        let len = b * p;
        let mut chunks = vec![0.0f32; 4 * len];
        for r in 0..b {
            for j in 0..g {
                let (v, i) = (x[r * g + j], r * p + j);
                match split {
                    Split::Tf32 => {
                        let h = round_tf32(v);
                        let l = round_tf32(v - h);
                        (chunks[i], chunks[len + i]) = (l, h);
                        (chunks[2 * len + i], chunks[3 * len + i]) = (h, l);
                    }
                    Split::F16 { scale } => {
                        let h = half::f16::from_f32(v * scale).to_f32();
                        let l = half::f16::from_f32((v * scale - h) * F16_LOW_SCALE).to_f32();
                        (chunks[i], chunks[len + i], chunks[2 * len + i]) = (l, h, l);
                    }
                }
            }
        }
        let elem = split.elem() as u64;
        let (ptrs, calls) = (split.pointers(&tiles, b, 0, 0), split.calls(b));
        let count = tiles.lower().count();
        assert_eq!(ptrs.len(), 3 * count * calls.len());
        let mut part = vec![f32::NAN; p * p];
        for BlockCall {
            first,
            k,
            alpha,
            beta,
        } in calls
        {
            for t in 0..count {
                let [a, bt] = [0, 1].map(|w| (ptrs[(first + w) * count + t] / elem) as usize);
                let c = ptrs[(first + 2) * count + t] as usize / 4;
                let s = tiles.size;
                let tile = gemm_cm(false, true, s, s, k, &chunks[a..], p, &chunks[bt..], p, p);
                for j in 0..s {
                    for i in 0..s {
                        let old = if beta == 0.0 {
                            0.0
                        } else {
                            beta * part[c + j * p + i]
                        };
                        part[c + j * p + i] = alpha * tile[j * p + i] + old;
                    }
                }
            }
        }
        let mut worst = 0.0f64;
        for i in 0..g {
            for j in 0..=i {
                let got = part[j * p + i] as f64;
                assert!(got.is_finite(), "({i}, {j}) not written");
                let (mut want, mut scale) = (0.0, 0.0);
                for r in 0..b {
                    let (u, v) = (x[r * g + i] as f64, x[r * g + j] as f64);
                    want += u * v;
                    scale += (u * v).abs();
                }
                worst = worst.max((got - want).abs() / scale);
            }
        }
        worst
    }

    /// Every entry of the lower triangle is written, and it is `x^T x` to f32's accuracy with
    /// either split, where one TF32 product is about 2^-11 off; FP16's split keeps that
    /// accuracy for values down in its subnormals.
    #[test]
    fn tiles_of_split_blocks_give_the_gram_matrix_of_row_major_x() {
        let (b, g) = (7, 11);
        let tiles = GramTiles { t: 3, size: 4 };
        let x: Vec<f32> = (0..b * g)
            .map(|t| ((t * 37 % 101) as f32 - 50.0) * 0.012_345_7)
            .collect();
        let bound = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for split in [Split::Tf32, Split::for_bound(Some(bound))] {
            let worst = host_gram(split, &x, b, g, tiles);
            assert!(worst < 1e-6, "{split:?}: off by {worst:e} of the sums");
        }
        // Values far below the bound (FP16's subnormals, were they not scaled), and at it.
        let small: Vec<f32> = x.iter().map(|v| v * 1e-5).collect();
        let worst = host_gram(Split::for_bound(Some(10.0)), &small, b, g, tiles);
        assert!(worst < 1e-6, "FP16 split of small values: off by {worst:e}");
        let at_bound: Vec<f32> = x.iter().map(|v| v / bound * 30_000.0).collect();
        let worst = host_gram(Split::for_bound(Some(30_000.0)), &at_bound, b, g, tiles);
        assert!(worst < 1e-6, "FP16 split at the bound: off by {worst:e}");
        let mut worst_tf32 = 0.0f64;
        for i in 0..g {
            for j in 0..=i {
                let (mut want, mut scale, mut one) = (0.0, 0.0, 0.0);
                for r in 0..b {
                    let (u, v) = (x[r * g + i] as f64, x[r * g + j] as f64);
                    want += u * v;
                    scale += (u * v).abs();
                    one += round_tf32(u as f32) as f64 * round_tf32(v as f32) as f64;
                }
                worst_tf32 = worst_tf32.max((one - want).abs() / scale);
            }
        }
        assert!(
            worst_tf32 > 1e-5,
            "one TF32 product off by only {worst_tf32:e}"
        );
    }

    #[test]
    fn fp16_for_a_known_bound_scaled_below_its_top() {
        assert_eq!(Split::for_bound(None), Split::Tf32);
        // scale's max_value 10: 1,024 takes it to 10,240.
        assert_eq!(Split::for_bound(Some(10.0)), Split::F16 { scale: 1024.0 });
        assert_eq!(Split::for_bound(Some(16384.0)), Split::F16 { scale: 0.5 });
        assert_eq!(
            Split::for_bound(Some(1e9)),
            Split::F16 {
                scale: 2f32.powi(-16)
            }
        );
        assert_eq!(
            Split::for_bound(Some(1e-30)),
            Split::F16 {
                scale: 2f32.powi(40)
            }
        );
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert_eq!(Split::for_bound(Some(bad)), Split::Tf32, "{bad}");
        }
        for m in [0.1f32, 3.0, 10.0, 1000.0, 3e4, 1e7] {
            let Split::F16 { scale } = Split::for_bound(Some(m)) else {
                panic!("{m}")
            };
            assert!(m * scale < F16_TOP && m * scale >= F16_TOP / 2.0, "{m}");
        }
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
