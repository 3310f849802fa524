//! The GPU Leiden: [`super::parallel`]'s rounds as kernels (`leiden.cu`), the same labels bit
//! for bit as [`super::leiden_parallel`] (not as the sequential [`super::leiden`]).
//!
//! Everything from the first level down is on the device: the graph in fixed point (converted
//! on the host, uploaded once), local moving (per round one launch choosing the moves, a warp a
//! node with a hash table per node in device memory, and one applying them with integer atomics),
//! refinement (per round the refined totals, the movers, their choices), renumbering (the shared
//! exclusive scan) and aggregation (coarse rows' tables filled with integer atomics, counted,
//! scanned and compacted). Each round reads back one counter (moves or movers) to decide whether
//! to go on. Once an aggregate level has at most [`HOST_BELOW`] stored edges (a first level, a
//! sixteenth of that), the level is downloaded and the iteration finishes on the host, as the
//! twin does, with the sequential algorithm (better partitions of small graphs; see
//! [`super::frame::hands_over`]).

use super::frame::{
    self, quiet_moves, stream, Consts, Level, HOST_BELOW, MAX_MOVE_ROUNDS, MAX_REFINE_ROUNDS,
    MOVE_STREAM,
};
use super::parallel;
use super::{LeidenParams, Partition};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::warps_for_rows;
use crate::gpu::scan::exclusive_scan;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_for, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "leiden",
    source: include_str!("leiden.cu"),
};

/// [`super::leiden`]'s interface, the parallel algorithm on the GPU of `ctx`.
pub fn leiden_gpu(
    ctx: &GpuContext,
    graph: &CsrMatrix<f32>,
    params: &LeidenParams,
) -> Result<Partition> {
    leiden_gpu_with(ctx, graph, params, HOST_BELOW)
}

/// [`leiden_gpu`] finishing each iteration on the host from the first aggregate level of at most
/// `host_below` edges (0: every level on the device; the tests use it).
pub fn leiden_gpu_with(
    ctx: &GpuContext,
    graph: &CsrMatrix<f32>,
    params: &LeidenParams,
    host_below: usize,
) -> Result<Partition> {
    let mut trace = PhaseTrace::new(ctx, "leiden");
    // The first level goes to the device once, on the first iteration.
    let mut d0: Option<DeviceLevel> = None;
    let p = frame::run_iterations(graph, params, host_below, |g0, c, membership, iteration| {
        if d0.is_none() {
            trace.mark("checks and the fixed-point graph (host)")?;
            d0 = Some(DeviceLevel::upload(ctx, g0)?);
            trace.mark("upload")?;
        }
        let d0 = d0.as_ref().expect("uploaded above");
        let it = Iteration {
            c,
            params,
            iteration,
            host_below,
        };
        iterate(ctx, d0, &membership, &it, &mut trace)
    })?;
    trace.mark("labels by size and modularity (host)")?;
    Ok(p)
}

/// What every level of an iteration is run with.
struct Iteration<'a> {
    c: &'a Consts,
    params: &'a LeidenParams,
    iteration: u32,
    host_below: usize,
}

/// A level's graph on the device.
struct DeviceLevel {
    n: usize,
    nnz: usize,
    indptr: DeviceVec<u64>,
    indices: DeviceVec<u32>,
    weights: DeviceVec<u64>,
    strength: DeviceVec<u64>,
}

/// Never an empty device vector: kernels take pointers to at least one element.
fn upload<T: bytemuck::Pod + Send + Sync + Default>(
    ctx: &GpuContext,
    v: &[T],
) -> Result<DeviceVec<T>> {
    if v.is_empty() {
        ctx.upload(&[T::default()])
    } else {
        ctx.upload(v)
    }
}

impl DeviceLevel {
    fn upload(ctx: &GpuContext, g: &Level) -> Result<DeviceLevel> {
        Ok(DeviceLevel {
            n: g.n(),
            nnz: g.nnz(),
            indptr: upload(ctx, &g.indptr)?,
            indices: upload(ctx, &g.indices)?,
            weights: upload(ctx, &g.weights)?,
            strength: upload(ctx, &g.strength)?,
        })
    }

    fn download(&self, ctx: &GpuContext) -> Result<Level> {
        let mut indices = ctx.download(&self.indices)?;
        let mut weights = ctx.download(&self.weights)?;
        let mut strength = ctx.download(&self.strength)?;
        indices.truncate(self.nnz);
        weights.truncate(self.nnz);
        strength.truncate(self.n);
        Ok(Level {
            indptr: ctx.download(&self.indptr)?,
            indices,
            weights,
            strength,
        })
    }
}

/// `len` values (at least one allocated).
fn alloc<T: bytemuck::Pod>(ctx: &GpuContext, len: usize) -> Result<DeviceVec<T>> {
    ctx.alloc(len.max(1))
}

fn zeros<T: bytemuck::Pod>(ctx: &GpuContext, len: usize) -> Result<DeviceVec<T>> {
    ctx.zeros(len.max(1))
}

/// Downloads `len` values.
fn download<T: bytemuck::Pod + Send + Sync>(
    ctx: &GpuContext,
    v: &DeviceVec<T>,
    len: usize,
) -> Result<Vec<T>> {
    let mut h = ctx.download(v)?;
    h.truncate(len);
    Ok(h)
}

/// Launches kernel `$name` of `leiden.cu` on `$cfg` with the arguments in order (each a
/// reference to a named value: the launch keeps pointers to them).
macro_rules! launch {
    ($ctx:expr, $name:expr, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let f = $ctx.function(SRC, $name)?;
        let mut l = $ctx.launcher(&f);
        $( l.arg($arg); )*
        $ctx.launch(l, $cfg, $name)
    }};
}

/// A warp per row.
fn warps(rows: usize) -> LaunchConfig {
    let mut cfg = warps_for_rows(rows);
    if rows == 0 {
        cfg.grid_dim.0 = 0;
    }
    cfg
}

/// One iteration from `membership` (the partition of the first level); returns the new one and
/// whether a node moved.
fn iterate(
    ctx: &GpuContext,
    d0: &DeviceLevel,
    membership: &[u32],
    it: &Iteration<'_>,
    trace: &mut PhaseTrace<'_>,
) -> Result<(Vec<u32>, bool)> {
    let Iteration {
        c,
        params,
        iteration,
        host_below,
    } = *it;
    let n0 = d0.n;
    let n0_64 = n0 as u64;
    let mut part = upload(ctx, membership)?;
    let node_of = alloc::<u32>(ctx, n0)?;
    launch!(ctx, "iota_u32", grid_for(n0); &node_of, &n0_64)?;
    let mut owned: Option<DeviceLevel> = None;
    let mut changed = false;
    let mut level = 0u32;
    loop {
        let g = owned.as_ref().unwrap_or(d0);
        let at = format!(
            "iteration {iteration}, level {level} ({} nodes, {} edges)",
            g.n, g.nnz
        );
        if frame::hands_over(level, g.nnz, host_below) {
            let host = g.download(ctx)?;
            let part_h = download(ctx, &part, g.n)?;
            let node_of_h = download(ctx, &node_of, n0)?;
            trace.mark(&format!("{at}: download"))?;
            let (m, moved) = parallel::finish_iteration(
                host, part_h, &node_of_h, c, params, iteration, level, host_below,
            );
            trace.mark(&format!(
                "{at}: finished by the sequential algorithm (host)"
            ))?;
            return Ok((m, changed | moved));
        }
        let (moved, rounds) = local_move(ctx, g, &part, c, iteration, level)?;
        changed |= moved;
        let n_comm = renumber(ctx, &part, g.n)?;
        trace.mark(&format!("{at}: local moving ({rounds} rounds)"))?;
        if n_comm == g.n {
            break;
        }
        let (into, mut k) = if c.refine {
            let into = refine(ctx, g, &part, c, iteration, level)?;
            let k = renumber(ctx, &into, g.n)?;
            trace.mark(&format!("{at}: refinement"))?;
            (into, k)
        } else {
            (alloc::<u32>(ctx, g.n)?, g.n)
        };
        let n = g.n as u64;
        if k == g.n {
            // Nothing merged (or Louvain): aggregate the communities themselves.
            launch!(ctx, "copy_u32", grid_for(g.n); &part, &into, &n)?;
            k = n_comm;
        }
        let next_part = alloc::<u32>(ctx, k)?;
        launch!(ctx, "next_partition", grid_for(g.n); &into, &part, &n, &next_part)?;
        launch!(ctx, "compose", grid_for(n0); &node_of, &into, &n0_64)?;
        let next = aggregate(ctx, g, &into, k)?;
        trace.mark(&format!("{at}: aggregation"))?;
        owned = Some(next);
        part = next_part;
        level += 1;
    }
    let g_n = owned.as_ref().unwrap_or(d0).n;
    let part_h = download(ctx, &part, g_n)?;
    let node_of_h = download(ctx, &node_of, n0)?;
    trace.mark(&format!("iteration {iteration}: download"))?;
    Ok((
        node_of_h.iter().map(|&a| part_h[a as usize]).collect(),
        changed,
    ))
}

/// The offsets (`n + 1`) of tables of `sizes` (the first `n` values), and their total.
fn table_offsets(
    ctx: &GpuContext,
    sizes: &DeviceVec<u64>,
    n: usize,
) -> Result<(DeviceVec<u64>, usize)> {
    let (offsets, total) = scan(ctx, sizes, n)?;
    Ok((offsets, total as usize))
}

/// The per-node hash tables of a level: offsets (`n + 1`), keys and values (cleared by the
/// kernels before each use).
struct Tables {
    offsets: DeviceVec<u64>,
    keys: DeviceVec<u32>,
    vals: DeviceVec<u64>,
}

fn node_tables(ctx: &GpuContext, g: &DeviceLevel) -> Result<Tables> {
    let sizes = alloc::<u64>(ctx, g.n)?;
    let n = g.n as u64;
    launch!(ctx, "table_sizes", grid_for(g.n); &g.indptr, &n, &sizes)?;
    let (offsets, total) = table_offsets(ctx, &sizes, g.n)?;
    Ok(Tables {
        offsets,
        keys: alloc(ctx, total)?,
        vals: alloc(ctx, total)?,
    })
}

/// The exclusive scan of the first `n` values (`n + 1` offsets) and the total.
fn scan(ctx: &GpuContext, values: &DeviceVec<u64>, n: usize) -> Result<(DeviceVec<u64>, u64)> {
    if n > 0 {
        debug_assert_eq!(values.len(), n);
        exclusive_scan(ctx, values)
    } else {
        Ok((zeros(ctx, 1)?, 0))
    }
}

/// Strength and size of each community of `part` (ids below `g.n`).
fn community_totals(
    ctx: &GpuContext,
    g: &DeviceLevel,
    part: &DeviceVec<u32>,
) -> Result<(DeviceVec<u64>, DeviceVec<u32>)> {
    let n = g.n as u64;
    let strength = zeros::<u64>(ctx, g.n)?;
    let size = zeros::<u32>(ctx, g.n)?;
    launch!(ctx, "comm_totals", grid_for(g.n); part, &g.strength, &n, &strength, &size)?;
    Ok((strength, size))
}

/// [`parallel::local_move`] on the device; whether a node moved, and the rounds it took.
fn local_move(
    ctx: &GpuContext,
    g: &DeviceLevel,
    part: &DeviceVec<u32>,
    c: &Consts,
    iteration: u32,
    level: u32,
) -> Result<(bool, u32)> {
    let n = g.n as u64;
    let t = node_tables(ctx, g)?;
    let (comm_strength, comm_size) = community_totals(ctx, g, part)?;
    let target = alloc::<u32>(ctx, g.n)?;
    let moved = zeros::<u64>(ctx, MAX_MOVE_ROUNDS as usize)?;
    let (mut changed, mut last, mut rounds) = (false, u64::MAX, 0);
    for round in 0..MAX_MOVE_ROUNDS {
        rounds += 1;
        let up: i32 = if round % 2 == 0 { 1 } else { 0 };
        let st = stream(iteration, level, round) | MOVE_STREAM;
        launch!(ctx, "lm_best", warps(g.n);
            &g.indptr, &g.indices, &g.weights, &g.strength, part, &comm_strength, &comm_size,
            &t.offsets, &t.keys, &t.vals, &n, &c.scale, &up, &c.seed, &st, &target)?;
        launch!(ctx, "lm_apply", grid_for(g.n);
            part, &target, &g.strength, &comm_strength, &comm_size, &n, &moved, &round)?;
        let m = ctx.download(&moved)?[round as usize];
        changed |= m > 0;
        if round % 2 == 1 && last + m <= quiet_moves(g.n) {
            break;
        }
        last = m;
    }
    Ok((changed, rounds))
}

/// [`parallel::renumber_by_id`] on the device (ids below `n`); returns the count.
fn renumber(ctx: &GpuContext, part: &DeviceVec<u32>, n: usize) -> Result<usize> {
    let used = zeros::<u64>(ctx, n)?;
    let n64 = n as u64;
    launch!(ctx, "mark_used", grid_for(n); part, &n64, &used)?;
    let (map, k) = scan(ctx, &used, n)?;
    launch!(ctx, "apply_map", grid_for(n); part, &n64, &map)?;
    Ok(k as usize)
}

/// [`parallel::refine`] on the device: the refined communities of `part` (not renumbered).
fn refine(
    ctx: &GpuContext,
    g: &DeviceLevel,
    part: &DeviceVec<u32>,
    c: &Consts,
    iteration: u32,
    level: u32,
) -> Result<DeviceVec<u32>> {
    let n = g.n as u64;
    let t = node_tables(ctx, g)?;
    let (comm_strength, _) = community_totals(ctx, g, part)?;
    let mut refined = alloc::<u32>(ctx, g.n)?;
    launch!(ctx, "iota_u32", grid_for(g.n); &refined, &n)?;
    let mut target = alloc::<u32>(ctx, g.n)?;
    let visited = zeros::<u8>(ctx, g.n)?;
    let mover = alloc::<u8>(ctx, g.n)?;
    let count = zeros::<u64>(ctx, MAX_REFINE_ROUNDS as usize)?;
    for round in 0..MAX_REFINE_ROUNDS {
        let rsize = zeros::<u32>(ctx, g.n)?;
        let rstrength = zeros::<u64>(ctx, g.n)?;
        let rext = zeros::<u64>(ctx, g.n)?;
        launch!(ctx, "ref_totals", warps(g.n);
            &g.indptr, &g.indices, &g.weights, &g.strength, part, &refined, &n, &rsize,
            &rstrength, &rext)?;
        let st = stream(iteration, level, round);
        launch!(ctx, "ref_movers", grid_for(g.n);
            &refined, &rsize, &n, &c.seed, &st, &visited, &mover, &count, &round)?;
        if ctx.download(&count)?[round as usize] == 0 {
            break;
        }
        launch!(ctx, "ref_best", warps(g.n);
            &g.indptr, &g.indices, &g.weights, &g.strength, part, &comm_strength, &refined,
            &mover, &rsize, &rstrength, &rext, &t.offsets, &t.keys, &t.vals, &n, &c.scale,
            &c.unit, &c.beta, &c.seed, &st, &target)?;
        std::mem::swap(&mut refined, &mut target);
    }
    Ok(refined)
}

/// [`parallel::aggregate`] on the device (each row's entries in table order, not sorted: every
/// use of a row is independent of its order).
fn aggregate(
    ctx: &GpuContext,
    g: &DeviceLevel,
    into: &DeviceVec<u32>,
    k: usize,
) -> Result<DeviceLevel> {
    let n = g.n as u64;
    let k64 = k as u64;
    let lens = zeros::<u64>(ctx, k)?;
    let strength = zeros::<u64>(ctx, k)?;
    launch!(ctx, "agg_sizes", grid_for(g.n);
        &g.indptr, into, &g.strength, &n, &lens, &strength)?;
    let sizes = alloc::<u64>(ctx, k)?;
    launch!(ctx, "table_sizes_of_lens", grid_for(k); &lens, &k64, &sizes)?;
    drop(lens);
    let (offsets, slots) = table_offsets(ctx, &sizes, k)?;
    drop(sizes);
    let slots64 = slots as u64;
    let keys = alloc::<u32>(ctx, slots)?;
    launch!(ctx, "fill_empty", grid_for(slots); &keys, &slots64)?;
    let vals = zeros::<u64>(ctx, slots)?;
    launch!(ctx, "agg_insert", warps(g.n);
        &g.indptr, &g.indices, &g.weights, into, &n, &offsets, &keys, &vals)?;
    let counts = alloc::<u64>(ctx, k)?;
    launch!(ctx, "agg_count", warps(k); &offsets, &keys, &k64, &counts)?;
    let (indptr, nnz) = scan(ctx, &counts, k)?;
    let indices = alloc::<u32>(ctx, nnz as usize)?;
    let weights = alloc::<u64>(ctx, nnz as usize)?;
    launch!(ctx, "agg_compact", warps(k);
        &offsets, &keys, &vals, &k64, &indptr, &indices, &weights)?;
    Ok(DeviceLevel {
        n: k,
        nnz: nnz as usize,
        indptr,
        indices,
        weights,
        strength,
    })
}
