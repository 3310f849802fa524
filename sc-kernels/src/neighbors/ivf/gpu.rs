//! The inverted file's search on one GPU or several (a share of the index's blocks each), and
//! the parts joined with their recall.

use super::tensor_search;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use crate::neighbors::descent::{descend_gpu, Trial};
use crate::neighbors::exact::Products;
use crate::neighbors::ivf::gpu_index::{gpu_shape, GpuIndex};
use crate::neighbors::ivf::recall::{
    exact_sample_unlisted, join_samples, recall, recall_cells, Gate, SampleKnn,
};
use crate::neighbors::ivf::{IvfParams, IvfStats};
use crate::neighbors::knn::{Knn, EXTRA};
use crate::neighbors::lists::gpu::centroids_gpu;
use crate::neighbors::lists::{self, packed};
use crate::neighbors::scan::device::{refine, DK, RT, SRC, THREADS};
use rayon::prelude::*;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

/// A part of the GPU's approximate kNN: `indices` and `distances` hold `n x k` values in cell
/// order, of which the rows of `cells` are this part's (the others are undefined).
#[derive(Debug, Clone)]
pub struct IvfRows {
    pub cells: Vec<u32>,
    pub indices: Vec<u32>,
    pub distances: Vec<f32>,
    pub stats: IvfStats,
    /// The sample's exact kNN (measured by the first part), for [`recall`].
    pub sample: Option<SampleKnn>,
}

/// The approximate kNN on the GPU of the cells of share `part` = (rank, ranks) of the index's
/// blocks (`(0, 1)`: every cell), with `x` (`n x d`; a non-finite value is refused) on the host
/// and `xd` its copy on the device. The first share also measures the sample's exact kNN. The
/// probed lists are scanned on tensor cores where the GPU and the shape allow
/// ([`tensor_search`](super::tensor_search)).
pub fn knn_ivf_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    k: usize,
    params: &IvfParams,
    part: (usize, usize),
) -> Result<IvfRows> {
    knn_ivf_gpu_with(ctx, x, xd, k, params, part, Products::Auto)
}

/// [`knn_ivf_gpu`] with the products chosen (`F32`: the CUDA cores' scan on any GPU).
pub fn knn_ivf_gpu_with(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    k: usize,
    params: &IvfParams,
    part: (usize, usize),
    products: Products,
) -> Result<IvfRows> {
    let mut trace = PhaseTrace::new(ctx, "ivf");
    let index = GpuIndex::build(ctx, x, xd, k, params, &mut trace)?;
    search_index(ctx, xd, k, index, part, products, trace)
}

/// The part `part` of the search of `index` (built over `xd`'s cells) for `k` neighbours; the
/// first part keeps the recall sample.
fn search_index(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    k: usize,
    index: GpuIndex,
    part: (usize, usize),
    products: Products,
    mut trace: PhaseTrace<'_>,
) -> Result<IvfRows> {
    let d = index.table.d;
    let n = xd.len() / d;
    // The rows land in cell order on the device: the whole kNN is then one download.
    let out = || -> Result<(DeviceVec<u32>, DeviceVec<f32>)> {
        Ok((ctx.alloc::<u32>(n * k)?, ctx.alloc::<f32>(n * k)?))
    };
    let plan = match products {
        Products::F32 => None,
        _ => tensor_search::plan(ctx, n, d, k),
    };
    let mut stats = index.stats;
    let (cells, (out_idx, out_dist)) = match plan {
        Some(plan) => {
            let (out_idx, out_dist) = out()?;
            let slots =
                packed::Slots::new(&index.lists.perm, &index.lists.starts, &index.lists.sizes);
            let starts = ctx.upload(&index.lists.starts)?;
            let sizes = ctx.upload(&index.lists.sizes)?;
            let ptr = ctx.upload(&index.probe_ptr)?;
            let probes_d = ctx.upload(&index.probes)?;
            let layout = packed::F32Layout {
                xp: &index.xp,
                table: &index.table,
                perm: &index.perm,
                starts: &starts,
                sizes: &sizes,
            };
            let probes = packed::DeviceProbes {
                ptr: &ptr,
                probes: &probes_d,
                host_ptr: &index.probe_ptr,
                host_probes: &index.probes,
            };
            // Pass 1 bounds from each list's nearest probes only (a valid bound from any
            // subset: see `IvfParams::bound_probes`). Rows of the prefix are prefixes of the
            // table's: where every row is whole (few probes), the table itself serves.
            let (bptr, bprobes) = lists::probe_prefix(
                (&index.probe_ptr, &index.probes),
                &index.lists.sizes,
                index.bound_probes,
                index.kc,
            );
            let prefix;
            let bound = if bptr == index.probe_ptr {
                (&ptr, &probes_d)
            } else {
                prefix = (ctx.upload(&bptr)?, ctx.upload(&bprobes)?);
                (&prefix.0, &prefix.1)
            };
            let (cells, f32_queries) = tensor_search::search(
                ctx,
                xd,
                (n, d, k),
                &slots,
                &layout,
                (&probes, bound),
                part,
                plan,
                (&out_idx, &out_dist),
                &mut trace,
            )?;
            trace.mark("tensor pass 2, refine")?;
            stats.f32_queries = Some(f32_queries);
            stats.bound_probes = Some(index.bound_probes);
            (cells, (out_idx, out_dist))
        }
        None => f32_search(ctx, xd, &index, (d, k), part, out, &mut trace)?,
    };
    let rows = IvfRows {
        cells,
        indices: ctx.download(&out_idx)?,
        distances: ctx.download(&out_dist)?,
        stats,
        sample: (part.0 == 0).then_some(index.sample),
    };
    trace.mark("rows")?;
    Ok(rows)
}

/// The CUDA cores' scan of the part's blocks of 64 cells (`ivf_scan`), the refinement and the
/// rows into cell order in the arrays `out` makes (once the candidates are freed); returns the
/// part's cells and those arrays.
#[allow(clippy::type_complexity)]
fn f32_search(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    index: &GpuIndex,
    (d, k): (usize, usize),
    part: (usize, usize),
    out: impl Fn() -> Result<(DeviceVec<u32>, DeviceVec<f32>)>,
    trace: &mut PhaseTrace<'_>,
) -> Result<(Vec<u32>, (DeviceVec<u32>, DeviceVec<f32>))> {
    let GpuIndex {
        lists,
        perm,
        xp,
        table,
        probe_ptr,
        probes,
        kc,
        ..
    } = index;
    let kc = *kc;
    let positions = lists.perm.len();
    let d32 = d as u32;

    // This part's blocks and the positions they cover.
    let tiles = lists.tiles();
    let n_tiles = tiles.len() / 2;
    let share = crate::comm::rank_rows(n_tiles, part.1, part.0);
    let p0 = tiles
        .get(2 * share.start + 1)
        .map_or(positions, |&p| p as usize);
    let p1 = match share.end < n_tiles {
        true => tiles[2 * share.end + 1] as usize,
        false => positions,
    };
    let p1 = p1.max(p0);
    let mut cand = ctx.alloc::<u32>((p1 - p0).max(1) * kc)?;
    cand.fill_bytes(0xff)?;
    if !share.is_empty() {
        let part_tiles = ctx.upload(&tiles[2 * share.start..2 * share.end])?;
        let starts = ctx.upload(&lists.starts)?;
        let sizes = ctx.upload(&lists.sizes)?;
        let ptr = ctx.upload(probe_ptr)?;
        let probes_d = ctx.upload(probes)?;
        let smem = table.shared_bytes(kc);
        let f = ctx.function_with_shared(SRC, "ivf_scan", smem)?;
        let (dpad32, ld64, kc32, p064) = (table.dpad as u32, table.ld as u64, kc as u32, p0 as u64);
        let mut l = ctx.launcher(&f);
        l.arg(xp)
            .arg(&table.xt)
            .arg(&table.norms)
            .arg(perm)
            .arg(&starts)
            .arg(&sizes)
            .arg(&ptr)
            .arg(&probes_d)
            .arg(&part_tiles)
            .arg(&p064)
            .arg(&d32)
            .arg(&dpad32)
            .arg(&ld64)
            .arg(&kc32)
            .arg(&cand);
        let cfg = LaunchConfig {
            grid_dim: (share.len() as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        ctx.launch(l, cfg, "ivf_scan")?;
    }
    trace.mark("scan")?;
    let (idx, dist) = refine(ctx, xd, &cand, None, Some(perm), p0..p1, d, kc, k)?;
    drop(cand);
    trace.mark("refine")?;
    let (out_idx, out_dist) = out()?;
    let (p064, count, k32) = (p0 as u64, (p1 - p0) as u64, k as u32);
    let f = ctx.function(SRC, "ivf_scatter")?;
    let mut l = ctx.launcher(&f);
    l.arg(&idx)
        .arg(&dist)
        .arg(perm)
        .arg(&p064)
        .arg(&count)
        .arg(&k32)
        .arg(&out_idx)
        .arg(&out_dist);
    ctx.launch(l, grid_stride((p1 - p0) * k), "ivf_scatter")?;
    let cells = lists.perm[p0..p1]
        .iter()
        .copied()
        .filter(|&c| c != u32::MAX)
        .collect();
    Ok((cells, (out_idx, out_dist)))
}

/// The inverted file [`knn_ivf_gpu`] would search, built without the search: its lists, the
/// probes chosen and the references a cell's search would scan (what the scan's time follows).
/// For sizing lists and probes on large data (`bench-knn --plan`).
pub fn plan_ivf_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    k: usize,
    params: &IvfParams,
) -> Result<IvfStats> {
    GpuIndex::build(ctx, x, xd, k, params, &mut PhaseTrace::new(ctx, "ivf")).map(|i| i.stats)
}

/// The approximate kNN of the rows of `x` with the index's blocks split across `gpus`: each
/// holds the whole of `x` and the same index, and searches its share (see [`knn_ivf_gpu`]);
/// the parts joined, the local join run on the first GPU ([`finish_gpu`]).
///
/// On several GPUs the index's two phases that every part needs are done once, at the same
/// time: the first GPU trains the centroids while the others measure the recall sample's
/// exact kNN (a share each, on the cells in their own order); each GPU then lays out the
/// lists from those centroids. At the atlas (11.35 M x 100 PCs, 2 H200s) every GPU spent 1.9 s
/// in the `train` phase (the finite check of the PCs, since made faster, included) and 0.5 s on
/// the sample before.
pub fn knn_ivf_across(
    gpus: &[std::sync::Arc<GpuContext>],
    x: &DenseMatrix<f32>,
    k: usize,
    params: &IvfParams,
) -> Result<(Knn, IvfStats)> {
    if gpus.len() < 2 {
        let ctx = gpus
            .first()
            .ok_or_else(|| KernelError::Shape("no GPU for the kNN".into()))?;
        ctx.bind_to_thread()?;
        let xd = ctx.upload(&x.data)?;
        let rows = knn_ivf_gpu(ctx, x, &xd, k, params, (0, 1))?;
        return finish_gpu(ctx, &xd, x.n_cols, k, params, vec![rows]);
    }
    let (n, d) = (x.n_rows, x.n_cols);
    let shape = gpu_shape(x, k, params)?;
    let cells = recall_cells(n);
    let helpers = gpus.len() - 1;
    let early = crate::gpu::on_each_gpu(gpus, |r, ctx| {
        ctx.bind_to_thread()?;
        let xd = ctx.upload(&x.data)?;
        let mut trace = PhaseTrace::new(ctx, "ivf");
        let found = if r == 0 {
            let centroids = centroids_gpu(ctx, &xd, n, d, shape.n_lists)?;
            trace.mark("train")?;
            Early::Centroids(centroids)
        } else {
            let share = crate::comm::rank_rows(cells.len(), helpers, r - 1);
            let sample = exact_sample_unlisted(ctx, x, &xd, cells[share].to_vec(), k)?;
            trace.mark("recall sample (a share)")?;
            Early::Sample(sample)
        };
        Ok((std::sync::Mutex::new(Some(xd)), found))
    })?;
    let (held, found): (Vec<_>, Vec<_>) = early.into_iter().unzip();
    let mut centroids = Vec::new();
    let mut samples = Vec::new();
    for f in found {
        match f {
            Early::Centroids(c) => centroids = c,
            Early::Sample(s) => samples.push(s),
        }
    }
    let sample = join_samples(k, samples);
    let rows = crate::gpu::on_each_gpu(gpus, |r, ctx| {
        ctx.bind_to_thread()?;
        let xd = held[r]
            .lock()
            .map_err(|_| KernelError::Shape("a GPU's cells were lost".into()))?
            .take()
            .ok_or_else(|| KernelError::Shape("a GPU's cells were taken twice".into()))?;
        let mut trace = PhaseTrace::new(ctx, "ivf");
        let index = GpuIndex::with_centroids(
            ctx,
            x,
            &xd,
            k,
            &shape,
            centroids.clone(),
            Some(sample.clone()),
            &mut trace,
        )?;
        let rows = search_index(ctx, &xd, k, index, (r, gpus.len()), Products::Auto, trace)?;
        Ok((rows, (r == 0).then_some(xd)))
    })?;
    let mut rows = rows;
    let xd = rows[0]
        .1
        .take()
        .ok_or_else(|| KernelError::Shape("no GPU for the kNN".into()))?;
    let rows = rows.into_iter().map(|p| p.0).collect();
    gpus[0].bind_to_thread()?;
    finish_gpu(&gpus[0], &xd, d, k, params, rows)
}

/// What a GPU of [`knn_ivf_across`] finds before the lists: the first the centroids, the
/// others shares of the recall sample.
enum Early {
    Centroids(Vec<f32>),
    Sample(SampleKnn),
}

/// The kNN of every cell from the parts of [`knn_ivf_gpu`] ([`join_parts`]: the scan's
/// result), then `params`'s rounds of the local join on `ctx` (which holds the cells' rows
/// `xd`, `d` values each), with the scan's recall and the result's.
pub fn finish_gpu(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    d: usize,
    k: usize,
    params: &IvfParams,
    parts: Vec<IvfRows>,
) -> Result<(Knn, IvfStats)> {
    let n = xd.len() / d.max(1);
    let rounds = params.settle(n)?.descent_rounds;
    let sample = parts.iter().find_map(|p| p.sample.clone());
    let (knn, mut stats) = join_parts(n, k, parts)?;
    let mut trace = PhaseTrace::new(ctx, "ivf");
    let (knn, done, declined) = match (&sample, stats.recall) {
        (Some(s), Some(r)) => {
            let mut gate = Gate::new(s, r.value);
            let mut worth = |_: &[u32], dist: &[f32]| gate.worth(dist);
            let trial = Trial {
                cells: &s.cells,
                worth: &mut worth,
            };
            let (knn, done) = descend_gpu(ctx, xd, d, knn, rounds, Some(trial))?;
            (knn, done, gate.declined)
        }
        _ => {
            let (knn, done) = descend_gpu(ctx, xd, d, knn, rounds, None)?;
            (knn, done, None)
        }
    };
    trace.mark("local join")?;
    stats.descent_rounds = done.rounds;
    stats.descent_replaced = done.replaced;
    stats.descent_declined = declined;
    stats.scan_recall = stats.recall;
    stats.recall = sample.map(|s| recall(&s, &knn));
    Ok((knn, stats))
}

/// Device bytes [`knn_ivf_gpu`] holds at its peak for `n` cells of `d` dimensions, `k`
/// neighbours and `n_lists` lists: the embedding, its copy in list order and that copy's reference-major table,
/// then the candidates, the refinement's workspace and its rows. What a device budget must hold
/// at least (the atlas run, 11.35 M x 100: 20.7 GB estimated, 21.8 GB peak measured with the
/// pool's rounding and the graph's start).
/// On tensor cores the cells are packed again (FP16, in chunks of 128 per list) with their
/// bound terms, and the candidates and the refinement's workspace are held a batch at a time
/// ([`packed`](crate::neighbors::lists::packed)); the estimate is the larger of the two scans'.
pub fn device_bytes(n: usize, d: usize, k: usize, n_lists: usize) -> u64 {
    let (n, d, k) = (n as u64, d as u64, k as u64);
    let kc = (k + EXTRA as u64).min(n);
    let positions = n + 3 * n_lists as u64;
    let dpad = d.div_ceil(DK as u64) * DK as u64;
    let tables = (n + positions) * d * 4 + dpad * (positions + 2 * RT as u64) * 4 + positions * 8;
    let rows = n * k * 8;
    let f32_scan = positions * (kc * 4 + k * 8 + (kc + 1) * 12);
    let slots = n + 127 * n_lists as u64;
    let ks = d.div_ceil(16);
    let width = crate::neighbors::scan::tensor::width(k as usize, n as usize) as u64;
    let batch = (packed::BATCH_SLOTS as u64).min(slots);
    let tensor_scan =
        slots * (32 * ks + 24) + rows + batch * (width * 4 + 5 + (width + 1) * 12 + k * 8);
    let join = n * d * 4 + crate::neighbors::descent::device_bytes(n as usize, k as usize);
    (tables + f32_scan.max(tensor_scan)).max(join)
}

/// The kNN of every cell from the parts of [`knn_ivf_gpu`] (each cell in exactly one part),
/// and the stats with the recall.
pub fn join_parts(n: usize, k: usize, parts: Vec<IvfRows>) -> Result<(Knn, IvfStats)> {
    if parts
        .iter()
        .any(|p| p.indices.len() != n * k || p.distances.len() != n * k)
    {
        return Err(KernelError::Shape(format!(
            "a part of the kNN does not hold {n} x {k} values"
        )));
    }
    if parts.len() > u16::MAX as usize {
        return Err(KernelError::Shape(format!(
            "{} parts of the kNN (at most {})",
            parts.len(),
            u16::MAX
        )));
    }
    // Which part holds each cell (1-based; 0: none yet).
    let mut from = vec![0u16; n];
    for (i, p) in parts.iter().enumerate() {
        for &c in &p.cells {
            let slot = from.get_mut(c as usize).ok_or_else(|| {
                KernelError::Shape(format!("a part of the kNN holds cell {c} of {n}"))
            })?;
            if *slot != 0 {
                return Err(KernelError::Shape(format!(
                    "cell {c} is in two parts of the kNN"
                )));
            }
            *slot = i as u16 + 1;
        }
    }
    let missing = from.iter().filter(|&&f| f == 0).count();
    if missing > 0 {
        return Err(KernelError::Shape(format!(
            "the parts of the kNN hold {} cells, not {n}",
            n - missing
        )));
    }
    let mut parts = parts.into_iter();
    let first = parts
        .next()
        .ok_or_else(|| KernelError::Shape("no part of the kNN".into()))?;
    let others: Vec<IvfRows> = parts.collect();
    // The first part's arrays hold the whole; the others' rows are copied in, every row on
    // its own (all arrays are in cell order), on every core.
    let (mut indices, mut distances) = (first.indices, first.distances);
    indices
        .par_chunks_mut(k.max(1))
        .zip(distances.par_chunks_mut(k.max(1)))
        .zip(from.par_iter())
        .enumerate()
        .filter(|(_, (_, &f))| f > 1)
        .for_each(|(c, ((ri, rd), &f))| {
            let p = &others[f as usize - 2];
            ri.copy_from_slice(&p.indices[c * k..(c + 1) * k]);
            rd.copy_from_slice(&p.distances[c * k..(c + 1) * k]);
        });
    let mut stats = first.stats;
    let mut sample = first.sample;
    for p in others {
        stats.f32_queries = match (stats.f32_queries, p.stats.f32_queries) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        if p.sample.is_some() {
            sample = p.sample;
        }
    }
    let knn = Knn {
        n_obs: n,
        k,
        indices,
        distances,
    };
    stats.recall = sample.map(|s| recall(&s, &knn));
    Ok((knn, stats))
}
