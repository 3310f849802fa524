//! The GPU twin of [`super::neighbors`]: the inverted file trained with the device's
//! assignments (the kNN's `lists`), and `scrublet_counts` (`neighbors.cu`), which counts each
//! point's doublet neighbours with the host's sums and order: the same counts as
//! [`count_host`](super::neighbors::count_host) for the same [`Search`]. Its blocks keep the
//! distances of 32 points to their candidates in slots of a scratch buffer (a quarter of the
//! free memory at most; about 3 GB at a million cells), so each distance is computed once.

use super::neighbors::{list_count, Counted, Search};
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::lists::centroids_gpu;
use crate::neighbors::lists::gpu::{gather_gpu, nearest_gpu};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "scrublet_counts",
    source: include_str!("neighbors.cu"),
};

// Must match the defines of neighbors.cu.
const QB: usize = 32;
const BINS: usize = 256;
/// Most manifold dimensions (`n_prin_comps`) the GPU's count takes.
pub const MAX_DIMS: usize = 64;
const THREADS: u32 = 256;
/// Blocks (each with its slot of keys) per multiprocessor: as many as its shared memory holds.
const SLOTS_PER_SM: usize = 3;

impl Search {
    /// [`Search::host`] of the points `xd` (on `ctx`'s GPU) with the k-means assignments on
    /// the GPU (the lists may differ from the host's where a point is as near two centroids).
    pub fn gpu(
        ctx: &GpuContext,
        xd: &DeviceVec<f32>,
        n: usize,
        d: usize,
        k_adj: usize,
    ) -> Result<Search> {
        let n_lists = list_count(n, k_adj);
        if n_lists == 1 {
            return Ok(Search::exact(n));
        }
        ctx.bind_to_thread()?;
        let centroids = centroids_gpu(ctx, xd, n, d, n_lists)?;
        let assign = nearest_gpu(ctx, xd, n, &centroids, d)?;
        Ok(Search::of(&assign, &centroids, d, k_adj))
    }
}

/// The most candidates any list's points have: the sizes of the lists it probes, added.
fn most_candidates(search: &Search) -> usize {
    let sizes = &search.lists.sizes;
    search
        .probe_ptr
        .windows(2)
        .map(|w| {
            search.probes[w[0] as usize..w[1] as usize]
                .iter()
                .map(|&m| sizes[m as usize] as usize)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

/// [`count_host`](super::neighbors::count_host) without the lists, of the points `xd` (`d`
/// values each) on `ctx`'s GPU.
pub fn count_gpu(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    d: usize,
    n_obs: usize,
    k_adj: usize,
    search: &Search,
) -> Result<Counted> {
    if d == 0 || d > MAX_DIMS {
        return Err(KernelError::param(
            "n_prin_comps",
            format!("the GPU's scrublet takes 1 to {MAX_DIMS} components, got {d}"),
        ));
    }
    ctx.bind_to_thread()?;
    let n = xd.len() / d;
    let lists = &search.lists;
    let tiles = lists.tiles_every(QB);
    let perm_d = ctx.upload(&lists.perm)?;
    // The points in list order (padding rows zero, never read as candidates).
    let xp_d = gather_gpu(ctx, xd, &perm_d, lists.perm.len(), d)?;
    let (starts_d, sizes_d) = (ctx.upload(&lists.starts)?, ctx.upload(&lists.sizes)?);
    let (ptr_d, probes_d) = (ctx.upload(&search.probe_ptr)?, ctx.upload(&search.probes)?);
    let tiles_d = ctx.upload(&tiles)?;
    let n_tiles = tiles.len() / 2;
    // Each block's slot holds the keys of its QB points against every candidate of their list.
    let stride = most_candidates(search).max(1);
    let slot_bytes = QB * stride * 8;
    let free = ctx
        .device()
        .memory_info()
        .map_err(|e| KernelError::Gpu(format!("cuMemGetInfo: {e}")))?
        .free;
    let slots = (ctx.multiprocessors() as usize * SLOTS_PER_SM)
        .min(free / 4 / slot_bytes)
        .min(n_tiles)
        .max(1);
    let mut scratch = ctx.alloc::<u64>(slots * QB * stride)?;
    let mut next_tile = ctx.zeros::<u32>(1)?;
    let mut counts = ctx.zeros::<u32>(n.max(1))?;
    let mut flag = ctx.zeros::<u32>(1)?;
    let shared = QB * d * 8 + 2 * QB * BINS * 4;
    let f = ctx.function_with_shared(SRC, "scrublet_counts", shared)?;
    let (n_obs32, keep32, d32) = (n_obs as u32, k_adj.saturating_sub(1) as u32, d as u32);
    let (n_tiles32, stride64) = (n_tiles as u32, stride as u64);
    let mut l = ctx.launcher(&f);
    l.arg(&xp_d)
        .arg(&perm_d)
        .arg(&starts_d)
        .arg(&sizes_d)
        .arg(&ptr_d)
        .arg(&probes_d)
        .arg(&tiles_d)
        .arg(&n_tiles32)
        .arg(&mut next_tile)
        .arg(&mut scratch)
        .arg(&stride64)
        .arg(&n_obs32)
        .arg(&keep32)
        .arg(&d32)
        .arg(&mut counts)
        .arg(&mut flag);
    let cfg = LaunchConfig {
        grid_dim: (slots as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    ctx.launch(l, cfg, "scrublet_counts")?;
    let mut counts = ctx.download(&counts)?;
    counts.truncate(n);
    Ok(Counted {
        counts,
        coincident: ctx.download(&flag)?[0] != 0,
        lists: None,
    })
}
