//! The lists on the device: k-means centroids trained with the device's assignments, and the
//! cells gathered in list order with the f32 scan's table of them.

use crate::error::Result;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use crate::neighbors::lists::{sample_rows, train, Lists, SEED, TRAIN_PER_LIST};
use crate::neighbors::scan::device::{scan_table, RefTable, RT, SRC};
use rmm_cuda::cudarc::driver::PushKernelArg;

/// k-means centroids (`n_lists x d`) of the `n` rows of `xd` (on the device): the training
/// sample ([`TRAIN_PER_LIST`] seeded cells a list) gathered there, trained with the device's
/// assignments.
pub(crate) fn centroids_gpu(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    n: usize,
    d: usize,
    n_lists: usize,
) -> Result<Vec<f32>> {
    let rows = sample_rows(n, TRAIN_PER_LIST * n_lists, SEED);
    let pd = gather_gpu(ctx, xd, &ctx.upload(&rows)?, rows.len(), d)?;
    let pts = ctx.download(&pd)?;
    let mut assigning = 0.0;
    let centroids = train(&pts, d, n_lists, |c| {
        let t = std::time::Instant::now();
        let a = nearest_gpu(ctx, &pd, rows.len(), c, d);
        assigning += t.elapsed().as_secs_f64();
        a
    })?;
    PhaseTrace::on_host("ivf").part("train: the assignments on the GPU", assigning);
    Ok(centroids)
}

/// `ivf_gather`: rows `perm[p]` of `xd` (`d` values each; ~0 a row of zeros) for the
/// `positions` positions `p`, one after another.
pub(crate) fn gather_gpu(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    perm: &DeviceVec<u32>,
    positions: usize,
    d: usize,
) -> Result<DeviceVec<f32>> {
    let out = ctx.alloc::<f32>(positions.max(1) * d)?;
    let (pos64, d32) = (positions as u64, d as u32);
    let f = ctx.function(SRC, "ivf_gather")?;
    let mut l = ctx.launcher(&f);
    l.arg(xd).arg(perm).arg(&pos64).arg(&d32).arg(&out);
    ctx.launch(l, grid_stride(positions * d), "ivf_gather")?;
    Ok(out)
}

/// The cells in lists on the device: every cell in the list of its nearest centroid, the
/// cells in list order (`xp`) and the f32 scan's table of them.
pub(crate) struct ListLayout {
    pub lists: Lists,
    pub perm: DeviceVec<u32>,
    pub xp: DeviceVec<f32>,
    pub table: RefTable,
}

impl ListLayout {
    /// The layout of the `n x d` rows of `xd` for `centroids`, with every cell's list.
    pub(crate) fn new(
        ctx: &GpuContext,
        xd: &DeviceVec<f32>,
        d: usize,
        centroids: &[f32],
        n_lists: usize,
    ) -> Result<(Vec<u32>, ListLayout)> {
        let n = xd.len() / d.max(1);
        let assign = nearest_gpu(ctx, xd, n, centroids, d)?;
        let lists = Lists::new(&assign, n_lists);
        let positions = lists.perm.len();
        let perm = ctx.upload(&lists.perm)?;
        let xp = gather_gpu(ctx, xd, &perm, positions, d)?;
        // Chunks start at any list's start: the table is readable one chunk past the end.
        let table = RefTable::new(ctx, &xp, positions, d, positions + RT)?;
        Ok((
            assign,
            ListLayout {
                lists,
                perm,
                xp,
                table,
            },
        ))
    }
}

/// The nearest of the `centroids` (`d` values each) to each of the `m` rows of `points` on
/// the device (the exact scan with one candidate).
pub(crate) fn nearest_gpu(
    ctx: &GpuContext,
    points: &DeviceVec<f32>,
    m: usize,
    centroids: &[f32],
    d: usize,
) -> Result<Vec<u32>> {
    let c = ctx.upload(centroids)?;
    let table = RefTable::new(ctx, &c, centroids.len() / d, d, 0)?;
    let out = ctx.alloc::<u32>(m.max(1))?;
    scan_table(ctx, &table, None, points, 1, 0..m, None, 1, &out)?;
    let mut v = ctx.download(&out)?;
    v.truncate(m);
    Ok(v)
}
