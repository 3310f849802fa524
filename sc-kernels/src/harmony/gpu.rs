//! The GPU twin of [`super::harmony_integrate`]: the same algorithm from the same random
//! numbers, on the device.
//!
//! - Host: the checks and the batch order ([`Setup`]), the k-means++ seeds (the CPU's own code
//!   on the sampled rows, normalized on the host exactly as the CPU normalizes them), the ridge
//!   coefficients ([`super::correct`], from `O` and the `B x K x d` moments: a few hundred
//!   kilobytes each round) and the convergence tests (one `f64` downloaded per clustering
//!   iteration).
//! - Device (`harmony.cu`, cuBLAS): the gather of the rows into batch order and their unit
//!   length; Lloyd's iterations (distances by `sgemm`, a fused argmin that writes a one-hot
//!   matrix, centroid sums by `sgemm`); per clustering iteration the centroids `R^T Zn`
//!   (`sgemm`) and similarities `Zn Yn^T` (`sgemm`), then per block of cells two launches:
//!   `block_remove` (the keyed order evaluated in-thread, the block's old rows out of `O`) and
//!   `block_update` (every thread block builds the penalty table from `O` in shared memory;
//!   one warp per cell computes exp, penalty and normalization in registers, writes the row,
//!   and adds it to per-batch sums in shared memory and to the objective), and `finish_iteration`
//!   (the diversity term, the iteration's objective); the correction's moments `R_b^T Z_b` and
//!   `Z - R_b W_b` by one `sgemm` per batch (the rows are contiguous per batch).
//!
//! Split across GPUs ([`harmony_integrate_gpu_rows`]): each rank holds its block of the cells,
//! kept in batch order ([`LocalRows`]); the sums over cells are summed over the ranks too (the
//! k-means counts and centroid sums, `R^T Zn`, the objective's terms, the correction's moments,
//! and `O`: a block's old rows leave it through `delta`, which is summed over the ranks, on the
//! devices where NCCL runs the group, before `block_update` reads `O`). Every rank walks the same
//! keyed block order over all cells and updates the cells of each block it holds, so the result
//! is the one-GPU result up to the order of the sums; rank 0's objective decides convergence.
//!
//! Conventions: row-major `n x c` matrices are the column-major `c x n` matrices cuBLAS sees
//! (leading dimension `c`). `O` and the objective are `f64` (atomics); the new rows of a block
//! are added to a separate `delta` that the next block's first launch folds into `O`, because
//! every thread block of `block_update` reads `O`. Sums by atomics make the last bits of `O`
//! depend on the order the GPU runs them in, so GPU and CPU results agree to within a
//! tolerance, not bit for bit (`tests/tests/gpu_kernels.rs`: per-PC correlation >= 0.999).

use super::cluster::block_order;
use super::correct::{ridge_coefficients, ridge_lambdas};
use super::kmeans::{sample_indices, seed_from_sample, LLOYD_MAX_ITER};
use super::{
    clustering_converged, harmony_converged, normalize_row, HarmonyFlavor, HarmonyParams,
    HarmonyResult, LocalRows, Setup,
};
use crate::comm::{Communicator, SingleRank};
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use bytemuck::Pod;
use rmm_cuda::cudarc::cublas::sys as cublas;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use std::ops::Range;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "harmony",
    source: include_str!("harmony.cu"),
};

// Must match harmony.cu.
const MAXJ: usize = 16;
const SMALL_BK: usize = 5120;
const THREADS: u32 = 256;

/// The most clusters the GPU version takes (32 per warp lane times `MAXJ`).
pub const GPU_MAX_CLUSTERS: usize = 32 * MAXJ;

/// One warp per row, at most 8 blocks per multiprocessor (the kernels loop over the rest).
fn warp_rows(ctx: &GpuContext, rows: usize, shared: usize) -> LaunchConfig {
    warp_rows_per_sm(ctx, rows, shared, 8)
}

/// As [`warp_rows`] with at most `per_sm` blocks per multiprocessor (`block_update` builds the
/// penalty table once per block: fewer, busier blocks).
fn warp_rows_per_sm(ctx: &GpuContext, rows: usize, shared: usize, per_sm: usize) -> LaunchConfig {
    let warps_per_block = (THREADS / 32) as usize;
    let blocks = rows
        .div_ceil(warps_per_block)
        .clamp(1, per_sm * ctx.multiprocessors().max(1) as usize);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: shared as u32,
    }
}

/// `C = alpha op(A) op(B) + beta C` (column-major, host scalars).
#[allow(clippy::too_many_arguments)]
fn sgemm(
    ctx: &GpuContext,
    (ta, tb): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    (a, lda): (u64, usize),
    (b, ldb): (u64, usize),
    beta: f32,
    (c, ldc): (u64, usize),
    what: &str,
) -> Result<()> {
    let op = |t: bool| {
        if t {
            cublas::cublasOperation_t::CUBLAS_OP_T
        } else {
            cublas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    if m == 0 || n == 0 {
        return Ok(());
    }
    let handle = *ctx.blas()?.handle();
    // SAFETY: the callers pass device pointers into live buffers holding the operands of these
    // shapes and leading dimensions; alpha and beta are host values (the default pointer mode).
    unsafe {
        cublas::cublasSgemm_v2(
            handle,
            op(ta),
            op(tb),
            m as i32,
            n as i32,
            k as i32,
            &alpha,
            a as *const f32,
            lda as i32,
            b as *const f32,
            ldb as i32,
            &beta,
            c as *mut f32,
            ldc as i32,
        )
    }
    .result()
    .map_err(|e| KernelError::Gpu(format!("cublasSgemm_v2 ({what}): {e:?}")))
}

/// Device buffers of one run.
struct Buffers {
    order: DeviceVec<u32>,
    batch_of: DeviceVec<u32>,
    local_of: DeviceVec<u32>,
    x: DeviceVec<f32>,
    zn: DeviceVec<f32>,
    zhat: DeviceVec<f32>,
    r: DeviceVec<f32>,
    sim: DeviceVec<f32>,
    y: DeviceVec<f32>,
    o: DeviceVec<f64>,
    delta: DeviceVec<f64>,
    obj: DeviceVec<f64>,
    obj_out: DeviceVec<f64>,
    pr_b: DeviceVec<f64>,
    theta: DeviceVec<f64>,
    cells: DeviceVec<u32>,
    m: DeviceVec<f32>,
    w: DeviceVec<f32>,
}

/// Parameters every launch of the run shares.
struct Run<'a> {
    ctx: &'a GpuContext,
    /// The group of ranks the cells are split across (one rank: [`SingleRank`]).
    comm: &'a dyn Communicator,
    setup: &'a Setup,
    /// This rank's cells.
    local: &'a LocalRows,
    params: &'a HarmonyParams,
    /// Per-batch sums in shared memory (`B K <= SMALL_BK`).
    small: bool,
    scale: f32,
    flavor2: u32,
}

impl Run<'_> {
    /// (this rank's cells, components, clusters, batches)
    fn dims(&self) -> (usize, usize, usize, usize) {
        (self.local.len(), self.setup.d, self.setup.k, self.setup.b)
    }

    fn split(&self) -> bool {
        self.comm.size() > 1
    }

    /// Sums `buf` over the ranks, in place (the values travel as `f64` through the host: the
    /// cluster statistics are at most `B x K x d` values).
    fn sum_across<T: Pod + Send + Sync>(
        &self,
        buf: &mut DeviceVec<T>,
        to: fn(T) -> f64,
        from: fn(f64) -> T,
    ) -> Result<()> {
        if !self.split() {
            return Ok(());
        }
        let mut v: Vec<f64> = self.ctx.download(buf)?.into_iter().map(to).collect();
        self.comm.all_reduce_sum(&mut v)?;
        let back: Vec<T> = v.into_iter().map(from).collect();
        buf.copy_from_host(&back)?;
        self.ctx.count_h2d(std::mem::size_of_val(back.as_slice()));
        Ok(())
    }

    /// As [`Run::sum_across`], on the device where the group can (NCCL: in the stream's
    /// order, so the per-block sums of `O` cost no host round trip).
    fn sum_f64(&self, buf: &mut DeviceVec<f64>) -> Result<()> {
        if !self.split() {
            return Ok(());
        }
        // SAFETY: `buf` holds its `len()` f64 on this rank's GPU and lives until the run's last
        // download, which waits for the stream.
        match unsafe {
            self.comm
                .all_reduce_sum_device_f64(buf.ptr(), buf.len(), self.ctx.stream())
        } {
            Some(done) => done,
            None => self.sum_across(buf, |v| v, |v| v),
        }
    }

    fn sum_f32(&self, buf: &mut DeviceVec<f32>) -> Result<()> {
        self.sum_across(buf, f64::from, |v| v as f32)
    }

    fn sum_u32(&self, buf: &mut DeviceVec<u32>) -> Result<()> {
        self.sum_across(buf, f64::from, |v| v as u32)
    }

    /// `dst` = rows of `src` at unit length.
    fn unit_rows(&self, src: &DeviceVec<f32>, rows: usize, dst: &DeviceVec<f32>) -> Result<()> {
        let (rows64, d32) = (rows as u64, self.setup.d as u32);
        let f = self.ctx.function(SRC, "unit_rows")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(src).arg(&rows64).arg(&d32).arg(dst);
        self.ctx
            .launch(l, warp_rows(self.ctx, rows, 0), "unit_rows")
    }

    /// `out` (row-major `n x K`) = `Zn C^T` for `c` (row-major `K x d`).
    fn dots(&self, zn: &DeviceVec<f32>, c: &DeviceVec<f32>, out: &DeviceVec<f32>) -> Result<()> {
        let (n, d, k, _) = self.dims();
        sgemm(
            self.ctx,
            (true, false),
            (k, n, d),
            1.0,
            (c.ptr(), d),
            (zn.ptr(), d),
            0.0,
            (out.ptr(), k),
            "Zn C^T",
        )
    }

    /// `out` (row-major `K x d`) = `A^T Zn` for `a` (row-major `n x K`).
    fn column_sums(
        &self,
        zn: &DeviceVec<f32>,
        a: &DeviceVec<f32>,
        out: &DeviceVec<f32>,
    ) -> Result<()> {
        let (n, d, k, _) = self.dims();
        sgemm(
            self.ctx,
            (false, true),
            (d, k, n),
            1.0,
            (zn.ptr(), d),
            (a.ptr(), k),
            0.0,
            (out.ptr(), d),
            "R^T Zn",
        )
    }

    /// Lloyd's iterations from `centroids` (the seeds): the CPU's [`crate::kmeans::lloyd`].
    fn lloyd(&self, buf: &mut Buffers, centroids: &DeviceVec<f32>) -> Result<()> {
        let ctx = self.ctx;
        let (n, d, k, _) = self.dims();
        let labels = ctx.upload(&vec![u32::MAX; n])?;
        let mut counts = ctx.zeros::<u32>(k)?;
        let mut changed = ctx.zeros::<u32>(1)?;
        let norms = ctx.alloc::<f32>(k)?;
        let (n64, k32, d32) = (n as u64, k as u32, d as u32);
        let f_norms = ctx.function(SRC, "centroid_norms")?;
        let f_assign = ctx.function(SRC, "kmeans_assign")?;
        let f_update = ctx.function(SRC, "kmeans_update")?;
        for it in 0..LLOYD_MAX_ITER {
            self.dots(&buf.zn, centroids, &buf.sim)?;
            let mut l = ctx.launcher(&f_norms);
            l.arg(centroids).arg(&k32).arg(&d32).arg(&norms);
            ctx.launch(l, grid_stride(k), "centroid_norms")?;
            counts.fill_zero()?;
            changed.fill_zero()?;
            let mut l = ctx.launcher(&f_assign);
            l.arg(&buf.sim)
                .arg(&norms)
                .arg(&n64)
                .arg(&k32)
                .arg(&labels)
                .arg(&buf.r)
                .arg(&counts)
                .arg(&changed);
            ctx.launch(l, warp_rows(ctx, n, 0), "kmeans_assign")?;
            self.sum_u32(&mut counts)?;
            self.sum_u32(&mut changed)?;
            if it > 0 && ctx.download(&changed)?[0] == 0 {
                break;
            }
            self.column_sums(&buf.zn, &buf.r, &buf.y)?;
            self.sum_f32(&mut buf.y)?;
            let mut l = ctx.launcher(&f_update);
            l.arg(&buf.y)
                .arg(&counts)
                .arg(&k32)
                .arg(&d32)
                .arg(centroids);
            ctx.launch(l, grid_stride(k * d), "kmeans_update")?;
        }
        Ok(())
    }

    /// The objective of the current `O` and the accumulated terms (resets them); split across
    /// ranks, the terms and the new rows in `delta` are summed first, and rank 0's objective is
    /// every rank's (the convergence tests decide alike on every rank).
    fn finish_iteration(&self, buf: &mut Buffers) -> Result<f64> {
        let (_, _, k, b) = self.dims();
        self.sum_f64(&mut buf.delta)?;
        self.sum_f64(&mut buf.obj)?;
        let (k32, b32) = (k as u32, b as u32);
        let sigma = self.params.sigma;
        let f = self.ctx.function(SRC, "finish_iteration")?;
        let mut l = self.ctx.launcher(&f);
        l.arg(&k32)
            .arg(&b32)
            .arg(&buf.o)
            .arg(&buf.delta)
            .arg(&buf.pr_b)
            .arg(&buf.theta)
            .arg(&sigma)
            .arg(&self.flavor2)
            .arg(&buf.obj)
            .arg(&buf.obj_out);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        self.ctx.launch(l, cfg, "finish_iteration")?;
        let mut objective = self.ctx.download(&buf.obj_out)?;
        if self.split() {
            self.comm.broadcast(&mut objective, 0)?;
        }
        Ok(objective[0])
    }

    /// Initial `R`, `O` from the k-means centroids; returns the objective.
    fn initial_state(&self, buf: &mut Buffers, centroids: &DeviceVec<f32>) -> Result<f64> {
        let ctx = self.ctx;
        let (n, _, k, b) = self.dims();
        self.unit_rows(centroids, k, &buf.y)?;
        self.dots(&buf.zn, &buf.y, &buf.sim)?;
        buf.o.fill_zero()?;
        buf.delta.fill_zero()?;
        buf.obj.fill_zero()?;
        let (n64, k32, b32, small) = (n as u64, k as u32, b as u32, self.small as u32);
        let f = ctx.function(SRC, "soft_init")?;
        let mut l = ctx.launcher(&f);
        l.arg(&buf.sim)
            .arg(&buf.batch_of)
            .arg(&n64)
            .arg(&k32)
            .arg(&b32)
            .arg(&self.scale)
            .arg(&small)
            .arg(&buf.r)
            .arg(&buf.o)
            .arg(&buf.obj);
        let shared = if self.small { b * k * 4 } else { 0 };
        ctx.launch(l, warp_rows(ctx, n, shared), "soft_init")?;
        self.sum_f64(&mut buf.o)?;
        self.finish_iteration(buf)
    }

    /// One clustering round (harmony round `h`): the CPU's [`super::cluster::round`]. Split
    /// across ranks, every rank walks the blocks of all cells and updates the ones it holds;
    /// the block's old rows leave `O` through `delta`, which is summed over the ranks before
    /// the block's new rows are computed from `O`.
    fn round(&self, buf: &mut Buffers, h: usize) -> Result<(f64, usize)> {
        let ctx = self.ctx;
        let (_, _, k, b) = self.dims();
        let n = self.setup.n;
        let (n32, k32, b32, small) = (n as u32, k as u32, b as u32, self.small as u32);
        let split = self.split();
        let fold = (!split) as u32;
        let f_remove = ctx.function(SRC, "block_remove")?;
        let f_update = ctx.function(SRC, "block_update")?;
        let f_fold = ctx.function(SRC, "fold_delta")?;
        let bk32 = (b * k) as u32;
        let remove_shared = if self.small { b * k * 4 } else { 0 };
        let update_shared = k * 8 + if self.small { 2 * b * k * 4 } else { 0 };
        let mut objectives = vec![];
        let mut trace = PhaseTrace::new(ctx, "harmony iteration");
        for t in 0..self.params.max_iter_clustering {
            self.column_sums(&buf.zn, &buf.r, &buf.y)?;
            self.sum_f32(&mut buf.y)?;
            self.unit_rows(&buf.y, k, &buf.y)?;
            self.dots(&buf.zn, &buf.y, &buf.sim)?;
            trace.mark("centroids and similarities")?;
            let perm = block_order(self.setup, self.params, h, t);
            let [k0, k1, k2, k3] = perm.keys;
            for p0 in (0..n).step_by(self.setup.block_size) {
                let bs = (n - p0).min(self.setup.block_size);
                let (p0_64, bs32) = (p0 as u64, bs as u32);
                let mut l = ctx.launcher(&f_remove);
                l.arg(&p0_64)
                    .arg(&bs32)
                    .arg(&n32)
                    .arg(&perm.half_bits)
                    .arg(&k0)
                    .arg(&k1)
                    .arg(&k2)
                    .arg(&k3)
                    .arg(&buf.r)
                    .arg(&buf.batch_of)
                    .arg(&k32)
                    .arg(&b32)
                    .arg(&small)
                    .arg(&buf.local_of)
                    .arg(&fold)
                    .arg(&buf.cells)
                    .arg(if split { &buf.delta } else { &buf.o })
                    .arg(&buf.delta);
                ctx.launch(l, warp_rows(ctx, bs, remove_shared), "block_remove")?;
                if split {
                    self.sum_f64(&mut buf.delta)?;
                    let mut l = ctx.launcher(&f_fold);
                    l.arg(&bk32).arg(&buf.o).arg(&buf.delta);
                    ctx.launch(l, grid_stride(b * k), "fold_delta")?;
                }
                let mut l = ctx.launcher(&f_update);
                l.arg(&buf.cells)
                    .arg(&bs32)
                    .arg(&buf.sim)
                    .arg(&buf.batch_of)
                    .arg(&k32)
                    .arg(&b32)
                    .arg(&small)
                    .arg(&buf.o)
                    .arg(&buf.pr_b)
                    .arg(&buf.theta)
                    .arg(&self.flavor2)
                    .arg(&self.scale)
                    .arg(&buf.r)
                    .arg(&buf.delta)
                    .arg(&buf.obj);
                let cfg = warp_rows_per_sm(ctx, bs, update_shared, 2);
                ctx.launch(l, cfg, "block_update")?;
            }
            objectives.push(self.finish_iteration(buf)?);
            trace.mark("blocks")?;
            if clustering_converged(&objectives, self.params.tol_clustering) {
                break;
            }
        }
        Ok((
            *objectives.last().expect("at least one iteration"),
            objectives.len(),
        ))
    }

    /// The correction: `Z_hat = Z - R_b W_b` per batch, then `Zn` = `Z_hat` at unit length.
    fn correct(&self, buf: &mut Buffers) -> Result<()> {
        let ctx = self.ctx;
        let (n, d, k, b) = self.dims();
        let s = self.setup;
        let offsets = &self.local.offsets;
        buf.m.fill_zero()?;
        for bb in 0..b {
            let (r0, r1) = (offsets[bb], offsets[bb + 1]);
            sgemm(
                ctx,
                (false, true),
                (d, k, r1 - r0),
                1.0,
                (buf.x.ptr() + (r0 * d * 4) as u64, d),
                (buf.r.ptr() + (r0 * k * 4) as u64, k),
                0.0,
                (buf.m.ptr() + (bb * k * d * 4) as u64, d),
                "R_b^T Z_b",
            )?;
        }
        let o: Vec<f64> = ctx.download(&buf.o)?;
        let mut m: Vec<f64> = ctx.download(&buf.m)?.into_iter().map(f64::from).collect();
        self.comm.all_reduce_sum(&mut m)?;
        let lambda = ridge_lambdas(&o, &s.pr_b, &s.n_b, k, self.params);
        let w: Vec<f32> = ridge_coefficients(&o, &lambda, &m, b, k, d)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        buf.w.copy_from_host(&w)?;
        ctx.count_h2d(w.len() * 4);
        let len = (n * d) as u64;
        let f = ctx.function(SRC, "copy_f32")?;
        let mut l = ctx.launcher(&f);
        l.arg(&buf.x).arg(&len).arg(&buf.zhat);
        ctx.launch(l, grid_stride(n * d), "copy_f32")?;
        for bb in 0..b {
            let (r0, r1) = (offsets[bb], offsets[bb + 1]);
            sgemm(
                ctx,
                (false, false),
                (d, r1 - r0, k),
                -1.0,
                (buf.w.ptr() + (bb * k * d * 4) as u64, d),
                (buf.r.ptr() + (r0 * k * 4) as u64, k),
                1.0,
                (buf.zhat.ptr() + (r0 * d * 4) as u64, d),
                "Z_b - R_b W_b",
            )?;
        }
        self.unit_rows(&buf.zhat, n, &buf.zn)
    }
}

/// [`super::harmony_integrate`] on the GPU: the same parameters, checks and result (within the
/// tolerance the module documentation states). `z` is on the host (the pipeline's `X_pca`);
/// it is uploaded once and the result downloaded once.
pub fn harmony_integrate_gpu(
    ctx: &GpuContext,
    z: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    params: &HarmonyParams,
) -> Result<HarmonyResult> {
    harmony_integrate_gpu_rows(ctx, &SingleRank, z, batches, n_batches, params, 0..z.n_rows)
}

/// One rank of harmony over cells split across GPUs: every rank of `comm` passes all of `z`
/// and `batches` (on the host: the checks, the batch order and the k-means seeds need every
/// cell) and its own `rows`, holds only those rows on its GPU, and the cluster statistics (the
/// k-means counts and centroid sums, `R^T Zn`, `O` after each block, the objective's terms,
/// the correction's moments) are summed across the ranks where one GPU sums them itself.
/// `corrected` holds this rank's `rows`. The ranks' rows must cover the cells once, in rank
/// order; the result equals [`harmony_integrate_gpu`]'s up to the order of the sums.
pub fn harmony_integrate_gpu_rows(
    ctx: &GpuContext,
    comm: &dyn Communicator,
    z: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    params: &HarmonyParams,
    rows: Range<usize>,
) -> Result<HarmonyResult> {
    let mut trace = PhaseTrace::new(ctx, "harmony");
    let setup = Setup::without_rows(z, batches, n_batches, params)?;
    let (n, d, k, b) = (setup.n, setup.d, setup.k, setup.b);
    if rows.start > rows.end || rows.end > n || (comm.size() == 1 && rows != (0..n)) {
        return Err(KernelError::param(
            "rows",
            format!(
                "rank {} of {} holds cells {rows:?} of {n}",
                comm.rank(),
                comm.size()
            ),
        ));
    }
    if k > GPU_MAX_CLUSTERS {
        return Err(KernelError::Unsupported(format!(
            "harmony on the GPU takes at most {GPU_MAX_CLUSTERS} clusters, {k} were asked"
        )));
    }
    let local = LocalRows::new(&setup, rows.clone());
    let nl = local.len();
    if nl > i32::MAX as usize / k.max(d) {
        return Err(KernelError::Unsupported(format!(
            "harmony on the GPU: {nl} cells x {} exceed the 32-bit sizes of cuBLAS",
            k.max(d)
        )));
    }
    ctx.bind_to_thread()?;
    let run = Run {
        ctx,
        comm,
        setup: &setup,
        local: &local,
        params,
        small: b * k <= SMALL_BK,
        scale: (2.0 / params.sigma) as f32,
        flavor2: (params.flavor == HarmonyFlavor::Harmony2) as u32,
    };
    let mut buf = Buffers {
        order: ctx.upload(&local.order)?,
        batch_of: ctx.upload(&local.batch_of)?,
        local_of: ctx.upload(&local.local_of)?,
        x: ctx.alloc::<f32>(nl * d)?,
        zn: ctx.alloc::<f32>(nl * d)?,
        zhat: ctx.alloc::<f32>(nl * d)?,
        r: ctx.alloc::<f32>(nl * k)?,
        sim: ctx.alloc::<f32>(nl * k)?,
        y: ctx.alloc::<f32>(k * d)?,
        o: ctx.zeros::<f64>(b * k)?,
        delta: ctx.zeros::<f64>(b * k)?,
        obj: ctx.zeros::<f64>(2)?,
        obj_out: ctx.zeros::<f64>(1)?,
        pr_b: ctx.upload(&setup.pr_b)?,
        theta: ctx.upload(&setup.theta)?,
        cells: ctx.alloc::<u32>(setup.block_size)?,
        m: ctx.zeros::<f32>(b * k * d)?,
        w: ctx.zeros::<f32>(b * k * d)?,
    };
    {
        // This rank's rows into batch order, and at unit length.
        let z_d = ctx.upload(&z.data[rows.start * d..rows.end * d])?;
        let (n64, d32) = (nl as u64, d as u32);
        let f = ctx.function(SRC, "gather_rows")?;
        let mut l = ctx.launcher(&f);
        l.arg(&z_d).arg(&buf.order).arg(&n64).arg(&d32).arg(&buf.x);
        ctx.launch(l, grid_stride(nl * d), "gather_rows")?;
        run.unit_rows(&buf.x, nl, &buf.zn)?;
    }
    trace.mark("set-up, upload and gather")?;
    // The CPU's seeds: the sampled rows normalized on the host as the CPU does.
    let sample: Vec<f32> = sample_indices(n, k, params.seed)
        .iter()
        .flat_map(|&i| {
            let mut row = z.row(setup.order[i] as usize).to_vec();
            normalize_row(&mut row);
            row
        })
        .collect();
    let centroids = ctx.upload(&seed_from_sample(&sample, d, k, params.seed))?;
    trace.mark("seeds")?;
    run.lloyd(&mut buf, &centroids)?;
    trace.mark("lloyd")?;
    let obj0 = run.initial_state(&mut buf, &centroids)?;
    trace.mark("initial state")?;
    drop(centroids);

    let mut objective = vec![obj0];
    let mut clustering_iterations = vec![];
    let mut converged = false;
    let mut iterations = 0;
    for h in 0..params.max_iter_harmony {
        let (obj, its) = run.round(&mut buf, h)?;
        objective.push(obj);
        clustering_iterations.push(its);
        trace.mark(&format!("round {h}: {its} clustering iterations"))?;
        run.correct(&mut buf)?;
        trace.mark(&format!("round {h}: correction"))?;
        iterations = h + 1;
        if harmony_converged(&objective, params.tol_harmony) {
            converged = true;
            break;
        }
    }
    // Back to the input's row order.
    let out = ctx.alloc::<f32>(nl * d)?;
    let (n64, d32) = (nl as u64, d as u32);
    let f = ctx.function(SRC, "scatter_rows")?;
    let mut l = ctx.launcher(&f);
    l.arg(&buf.zhat)
        .arg(&buf.order)
        .arg(&n64)
        .arg(&d32)
        .arg(&out);
    ctx.launch(l, grid_stride(nl * d), "scatter_rows")?;
    let corrected = DenseMatrix::new(nl, d, ctx.download(&out)?)?;
    trace.mark("scatter and download")?;
    Ok(HarmonyResult {
        corrected,
        iterations,
        converged,
        objective,
        clustering_iterations,
        n_clusters: k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive column-major BLAS, to check the argument conventions of the products above.
    #[allow(clippy::too_many_arguments)]
    fn gemm_cm(
        (ta, tb): (bool, bool),
        (m, n, k): (usize, usize, usize),
        alpha: f32,
        a: &[f32],
        lda: usize,
        b: &[f32],
        ldb: usize,
        beta: f32,
        c: &mut [f32],
        ldc: usize,
    ) {
        let at = |i: usize, l: usize| if ta { a[i * lda + l] } else { a[l * lda + i] };
        let bt = |l: usize, j: usize| if tb { b[l * ldb + j] } else { b[j * ldb + l] };
        for j in 0..n {
            for i in 0..m {
                let s: f32 = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
                c[j * ldc + i] = alpha * s + beta * c[j * ldc + i];
            }
        }
    }

    #[test]
    fn blas_conventions_give_the_row_major_products() {
        let (n, d, k) = (7, 3, 4);
        let zn: Vec<f32> = (0..n * d).map(|t| ((t * 37 % 11) as f32) - 5.0).collect();
        let r: Vec<f32> = (0..n * k).map(|t| ((t * 13 % 7) as f32) * 0.25).collect();
        let c: Vec<f32> = (0..k * d).map(|t| ((t * 5 % 9) as f32) - 4.0).collect();
        // dots: (T, N), (k, n, d), A = C (ld d), B = Zn (ld d), C ld k: row-major Zn C^T.
        let mut dots = vec![0f32; n * k];
        gemm_cm(
            (true, false),
            (k, n, d),
            1.0,
            &c,
            d,
            &zn,
            d,
            0.0,
            &mut dots,
            k,
        );
        for i in 0..n {
            for j in 0..k {
                let want: f32 = (0..d).map(|l| zn[i * d + l] * c[j * d + l]).sum();
                assert_eq!(dots[i * k + j], want);
            }
        }
        // column sums: (N, T), (d, k, n), A = Zn (ld d), B = R (ld k), C ld d: R^T Zn.
        let mut y = vec![0f32; k * d];
        gemm_cm((false, true), (d, k, n), 1.0, &zn, d, &r, k, 0.0, &mut y, d);
        for j in 0..k {
            for l in 0..d {
                let want: f32 = (0..n).map(|i| r[i * k + j] * zn[i * d + l]).sum();
                assert_eq!(y[j * d + l], want);
            }
        }
        // correction: (N, N), (d, n, k), alpha -1, A = W (ld d), B = R (ld k), beta 1: Z - R W.
        let w = c.clone();
        let mut z = zn.clone();
        gemm_cm(
            (false, false),
            (d, n, k),
            -1.0,
            &w,
            d,
            &r,
            k,
            1.0,
            &mut z,
            d,
        );
        for i in 0..n {
            for l in 0..d {
                let rw: f32 = (0..k).map(|j| r[i * k + j] * w[j * d + l]).sum();
                assert_eq!(z[i * d + l], zn[i * d + l] - rw);
            }
        }
    }

    #[test]
    fn shared_memory_fits_the_default_limit() {
        // block_update: K doubles, then penalty and partial sums (B K floats each), plus the
        // 32 doubles of the objective's reduction.
        let worst = GPU_MAX_CLUSTERS * 8 + 2 * SMALL_BK * 4 + 32 * 8;
        assert!(worst <= 48 * 1024, "{worst}");
    }
}
