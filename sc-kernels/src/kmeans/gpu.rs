//! The GPU twin of [`super::kmeans`]: the same checks, draws, centroid moves, stopping tests
//! and inertia (on the host), and the passes over the rows on the device (`kmeans.cu`):
//! k-means++'s distances and potentials, and Lloyd's assignment with the host's dot products
//! and the clusters' sums chunk by chunk in the host's order. The same labels, centres and
//! inertia, bit for bit.

use super::{
    best_of_runs, centroid_norms, check, move_centroids, seed_with, Distances, KMeansParams,
    KMeansResult, ROWS,
};
use crate::error::{KernelError, Result};
use crate::gpu::dense_reduce::{chunked_sums_into, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_for, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "kmeans",
    source: include_str!("kmeans.cu"),
};

/// The module [`kmeans_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// Threads of a chunk's sums (its columns).
const SUM_THREADS: u32 = 128;

/// Bytes of shared memory a chunk's sums may take (above: kept in the partial sums' buffer).
const SHARED_SUMS_BYTES: usize = 48 << 10;

/// [`super::kmeans`] with Lloyd's passes on `ctx`'s GPU: the same result, bit for bit.
pub fn kmeans_gpu(
    ctx: &GpuContext,
    x: &[f32],
    n: usize,
    d: usize,
    p: &KMeansParams,
) -> Result<KMeansResult> {
    let mut trace = PhaseTrace::on_host("kmeans");
    check(x, n, d, p)?;
    if u32::try_from(d).is_err() {
        return super::kmeans(x, n, d, p);
    }
    trace.mark("checks (host)")?;
    ctx.bind_to_thread()?;
    let mut trace = PhaseTrace::new(ctx, "kmeans");
    let rows = DeviceRows::new(ctx, x, n, d, p.n_clusters)?;
    trace.mark("upload")?;
    let k = p.n_clusters;
    let seed = |s| seed_with(&rows, x, n, d, k, s);
    let result = best_of_runs(x, n, d, p, seed, |centers, tol| {
        let n_iter = rows.lloyd(centers, p.max_iter, tol)?;
        let labels = rows.assign(centers)?;
        Ok((n_iter, ctx.download(&labels)?))
    })?;
    trace.mark("runs (seeds, Lloyd, inertia)")?;
    Ok(result)
}

/// The rows on the device, with what each pass launches.
struct DeviceRows<'a> {
    ctx: &'a GpuContext,
    x: DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    assign: CudaFunction,
    sums: CudaFunction,
    distances: CudaFunction,
    totals: CudaFunction,
}

impl<'a> DeviceRows<'a> {
    fn new(ctx: &'a GpuContext, x: &[f32], n: usize, d: usize, k: usize) -> Result<Self> {
        Ok(DeviceRows {
            ctx,
            x: ctx.upload(x)?,
            n,
            d,
            k,
            assign: ctx.function(SRC, "kmeans_assign")?,
            sums: ctx.function(SRC, "kmeans_chunk_sums")?,
            distances: ctx.function(SRC, "kmeans_distances")?,
            totals: ctx.function(SRC, "kmeans_chunk_totals")?,
        })
    }

    /// [`super::assign`] of every row into `labels`; whether a label changed.
    fn assign_into(&self, centers: &[f32], labels: &DeviceVec<u32>) -> Result<bool> {
        let ctx = self.ctx;
        let (centroids, norms) = (
            ctx.upload(centers)?,
            ctx.upload(&centroid_norms(centers, self.d))?,
        );
        let changed = ctx.zeros::<u32>(1)?;
        let (n64, d32, k32) = (self.n as u64, self.d as u32, self.k as u32);
        let mut l = ctx.launcher(&self.assign);
        l.arg(&self.x)
            .arg(&n64)
            .arg(&d32)
            .arg(&k32)
            .arg(&centroids)
            .arg(&norms);
        l.arg(labels).arg(&changed);
        ctx.launch(l, grid_for(self.n), "kmeans_assign")?;
        Ok(ctx.download(&changed)?[0] != 0)
    }

    /// [`super::assign`] on the device.
    fn assign(&self, centers: &[f32]) -> Result<DeviceVec<u32>> {
        let labels = self.ctx.zeros::<u32>(self.n)?;
        self.assign_into(centers, &labels)?;
        Ok(labels)
    }

    /// [`super::lloyd`]: the same iterations and stopping tests, the passes over the rows here.
    fn lloyd(&self, centers: &mut [f32], max_iter: usize, tol: f64) -> Result<usize> {
        let ctx = self.ctx;
        let (n, d, k) = (self.n, self.d, self.k);
        let len = k * d + k;
        // No label is u32::MAX, so the first pass always counts as a change (the host's first
        // iteration has no previous labels).
        let labels = ctx.upload(&vec![u32::MAX; n])?;
        let use_shared = len * 8 <= SHARED_SUMS_BYTES;
        let (n64, d32, k32, shared) = (n as u64, d as u32, k as u32, u32::from(use_shared));
        for it in 0..max_iter {
            if !self.assign_into(centers, &labels)? {
                return Ok(it);
            }
            let totals = ctx.zeros::<f64>(len)?;
            chunked_sums_into(
                ctx,
                (n, ROWS, len),
                PARTIAL_BYTES,
                totals.ptr(),
                |first, count, part| {
                    let blocks = u32::try_from(count).map_err(|_| {
                        KernelError::Unsupported(format!("{count} chunks in one wave"))
                    })?;
                    let cfg = LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (SUM_THREADS, 1, 1),
                        shared_mem_bytes: if use_shared { (len * 8) as u32 } else { 0 },
                    };
                    let mut l = ctx.launcher(&self.sums);
                    l.arg(&self.x).arg(&n64).arg(&d32).arg(&k32).arg(&labels);
                    l.arg(&first).arg(&shared).arg(part);
                    ctx.launch(l, cfg, "kmeans_chunk_sums")
                },
            )?;
            let shift = move_centroids(&ctx.download(&totals)?, k, d, centers);
            if tol > 0.0 && shift <= tol {
                return Ok(it + 1);
            }
        }
        Ok(max_iter)
    }
}

impl Distances for DeviceRows<'_> {
    type Closest = DeviceVec<f64>;

    fn distances(
        &self,
        centre: &[f32],
        closest: Option<&DeviceVec<f64>>,
    ) -> Result<DeviceVec<f64>> {
        let ctx = self.ctx;
        let centre = ctx.upload(centre)?;
        let out = ctx.alloc::<f64>(self.n)?;
        let (n64, d32) = (self.n as u64, self.d as u32);
        let none = 0u64;
        let mut l = ctx.launcher(&self.distances);
        l.arg(&self.x).arg(&n64).arg(&d32).arg(&centre);
        match closest {
            Some(c) => l.arg(c),
            None => l.arg(&none),
        };
        l.arg(&out);
        ctx.launch(l, grid_for(self.n), "kmeans_distances")?;
        Ok(out)
    }

    fn potential(&self, c: &DeviceVec<f64>) -> Result<f64> {
        let ctx = self.ctx;
        let chunks = self.n.div_ceil(ROWS);
        let part = ctx.alloc::<f64>(chunks)?;
        let n64 = self.n as u64;
        let mut l = ctx.launcher(&self.totals);
        l.arg(c).arg(&n64).arg(&part);
        ctx.launch(l, grid_for(chunks), "kmeans_chunk_totals")?;
        // The host's chunked sum: each chunk's total added to 0, then the chunks in order.
        Ok(ctx.download(&part)?.iter().fold(0.0, |t, &s| t + (0.0 + s)))
    }

    fn on_host(&self, c: &DeviceVec<f64>) -> Result<Vec<f64>> {
        self.ctx.download(c)
    }
}
