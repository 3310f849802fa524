//! The exact kNN through an inverted file whose lists are pruned by proof, not by recall.
//!
//! The all-pairs tensor scan ([`super::tensor`]) forms every product twice: pass 1 for each
//! query's bound `U` on its `k`-th score, pass 2 to collect the references under it. Here the
//! cells are first put in `sqrt(n)` k-means lists ([`ivf`](super::ivf)'s training and
//! layout), laid out back to back in the order of a greedy chain through the centroids (no
//! list padded to the tensor passes' chunks of 128; a chunk shared by two near lists keeps
//! much what either keeps); each chunk of 128 cells is a block of queries that streams the
//! merged chunk ranges of the lists its cells need (`lists::packed::Streams`). Then:
//!
//! 1. pass 1 runs over the [`PrunedParams::first_probes`] lists nearest to each list only. The
//!    `k`-th smallest upper bound over some references is at least the one over all of them,
//!    so `U` is still an upper bound of the `k`-th exact score, only less tight;
//! 2. `prune.cu` turns each query's `U` into `D_q`, an upper bound of the distance to its
//!    `k`-th neighbour, and keeps for each list `A` the lists `L` where some query `q` of `A`
//!    may have a reference within `D_q`: two lower bounds on `|q - r|` for every `r` of `L`
//!    (the ball around `L`'s centroid, and the bisector between `A`'s and `L`'s centroids with
//!    the least margin of `L`'s cells beyond it) decide, in f64 with slack for the rounding;
//! 3. pass 2 collects within the kept lists, and the f32 scan of the queries the bound could
//!    not certify (`lists::packed`) also scans only them, then the same f64
//!    refinement. Where the bounds keep more than [`ALL_PAIRS_ABOVE`] of the pairs (data
//!    without clusters well apart at the scale of the `k`-th neighbour), the all-pairs pass 2
//!    (cheaper per pair) runs instead, with pass 1's bounds: still one pass, not two.
//!
//! Every reference within `D_q` of `q` lies in a kept list, so the candidates hold every
//! reference whose lower bound is at most `U`: the result is the all-pairs scan's, ties and
//! all. How much is pruned depends on the data (clusters prune well, uniform noise not at all);
//! the step reports the share of pairs scanned.

use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::knn::EXTRA;
use crate::neighbors::lists;
use crate::neighbors::lists::packed::{DeviceProbes, F32Layout, Packed, Slots, Streams, CHUNK};
use crate::neighbors::lists::ListLayout;
pub use crate::neighbors::result::PrunedStats;
use crate::neighbors::scan::host::products;
use crate::neighbors::scan::tensor::Plan;
use faer::MatRef;
use rayon::prelude::*;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "neighbors_prune",
    source: include_str!("prune.cu"),
};

// Must match the defines of prune.cu.
const THREADS: u32 = 256;
const TILE_CELLS: usize = 64;
const TILE_CENTROIDS: usize = 32;

/// Cells from which the exact kNN prunes (below, the all-pairs scan is as fast: the lists'
/// training and layout cost about what they save).
pub const PRUNED_FROM_CELLS: usize = 100_000;

/// Lists pass 1 probes per list by default. On the H200 (`benches/RESULTS.md` (b2)), 1 M
/// cells: 32 against 16 took workload C from 0.78 to 0.51 s (the looser bound of 16 left
/// 144,253 cells to the f32 scan, 32 left 6,517) and the demo's PCs from 1.36 to 1.39 s; at
/// 200k the demo's from 0.111 to 0.081 s.
pub const FIRST_PROBES: usize = 32;

/// Share of the pairs the bounds keep above which pass 2 scans all pairs instead (cheaper per
/// pair: no list changes, no chunk shared by two lists). On the H200, the demo's PCs: at 77%
/// kept the lists' pass took 1.29-1.31 s against 1.41-1.46 s over all pairs (1 M cells), at
/// 87% 0.125 against 0.115 s (200k).
pub const ALL_PAIRS_ABOVE: f64 = 0.85;

/// The pruned search's shape.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PrunedParams {
    /// Lists (default `sqrt(n)`).
    pub n_lists: Option<usize>,
    /// Lists pass 1 probes per list (default [`FIRST_PROBES`]).
    pub first_probes: Option<usize>,
    /// Share of the pairs kept above which pass 2 scans all pairs (default
    /// [`ALL_PAIRS_ABOVE`]).
    pub all_pairs_above: Option<f64>,
}

/// What [`knn_pruned`] leaves.
pub(super) enum Pruned {
    /// The kNN: `(indices, distances)`, `n x k` in cell order.
    Done(DeviceVec<u32>, DeviceVec<f32>, PrunedStats),
    /// The bounds kept more than [`PrunedParams::all_pairs_above`] of the pairs: pass 1's
    /// bound `tau` per cell (the all-pairs pass 2 takes it, in the same frame).
    AllPairs(DeviceVec<f32>, PrunedStats),
}

/// The exact kNN of all `n` rows of `xd` (`n x d`, finite values) on tensor cores as `plan`
/// says, through pruned lists.
pub(super) fn knn_pruned(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    (n, d, k): (usize, usize, usize),
    plan: Plan,
    params: PrunedParams,
) -> Result<Pruned> {
    let n_lists = params
        .n_lists
        .unwrap_or_else(|| (n as f64).sqrt().round() as usize)
        .clamp(1, n.max(1));
    let first_probes = params
        .first_probes
        .unwrap_or(FIRST_PROBES)
        .clamp(1, n_lists);
    let mut trace = PhaseTrace::new(ctx, "pruned");
    let centroids = chained(&lists::centroids_gpu(ctx, xd, n, d, n_lists)?, d);
    let (_, layout) = ListLayout::new(ctx, xd, d, &centroids, n_lists)?;
    let lists = &layout.lists;
    // The cells in the f32 layout's order, lists one after another: a tile is a chunk of 128
    // of them (of one list or of the end and start of two) and streams ranges of chunks.
    let slots = Slots::contiguous(&lists.perm, &lists.starts, &lists.sizes);
    let packed = Packed::new(ctx, xd, (n, d), &slots, plan.ks)?;
    let held = chunk_lists(&lists.starts, &lists.sizes, slots.chunk_list.len());
    let (starts, sizes) = (ctx.upload(&lists.starts)?, ctx.upload(&lists.sizes)?);
    trace.mark("lists")?;

    let tiles = 0..slots.chunk_list.len();
    let kc = (k + EXTRA).min(n);
    let (ptr1, probes1) = lists::probe_table(&centroids, d, &lists.sizes, first_probes, kc);
    let first = DeviceStreams::new(
        ctx,
        &ranges_of(rows_of_chunks(&held, &ptr1, &probes1), lists),
    )?;
    let tau = packed.bound_pass(ctx, tiles.clone(), &first.streams(), plan, k)?;
    trace.mark("bound")?;

    let keep = keep_lists_gpu(ctx, xd, d, &centroids, (&starts, &sizes), &packed, &tau)?;
    let (ptr2, probes2) = probes_kept(&keep, n_lists);
    let mut stats = PrunedStats {
        n_lists,
        first_probes,
        refs_per_cell: lists::refs_per_cell(&lists.sizes, &ptr2, &probes2, n),
        all_pairs: false,
        f32_queries: 0,
    };
    trace.mark("prune")?;
    if stats.refs_per_cell > params.all_pairs_above.unwrap_or(ALL_PAIRS_ABOVE) * n as f64 {
        stats.all_pairs = true;
        let by_slot = ctx.download(&tau)?;
        let mut by_cell = vec![f32::INFINITY; n];
        for (&cell, &t) in slots.cells.iter().zip(&by_slot) {
            if cell != u32::MAX {
                by_cell[cell as usize] = t;
            }
        }
        return Ok(Pruned::AllPairs(ctx.upload(&by_cell)?, stats));
    }

    let kept = DeviceStreams::new(
        ctx,
        &ranges_of(rows_of_chunks(&held, &ptr2, &probes2), lists),
    )?;
    // The f32 scan of the cells the bound could not certify: by list, within its kept lists.
    let (ptr2_d, probes2_d) = (ctx.upload(&ptr2)?, ctx.upload(&probes2)?);
    let fallback = DeviceProbes {
        ptr: &ptr2_d,
        probes: &probes2_d,
        host_ptr: &ptr2,
        host_probes: &probes2,
    };
    let f32_layout = F32Layout {
        xp: &layout.xp,
        table: &layout.table,
        perm: &layout.perm,
        starts: &starts,
        sizes: &sizes,
    };
    trace.mark("ranges")?;
    let out = (ctx.alloc::<u32>(n * k)?, ctx.alloc::<f32>(n * k)?);
    stats.f32_queries = packed.collect_pass(
        ctx,
        xd,
        (d, k),
        &slots,
        &f32_layout,
        tiles,
        &kept.streams(),
        &fallback,
        plan,
        &tau,
        (&out.0, &out.1),
    )?;
    trace.mark("collect, refine")?;
    Ok(Pruned::Done(out.0, out.1, stats))
}

/// The centroids (`d` values each) in the order of a greedy chain (from the first, each next
/// the nearest not yet taken), so that lists laid out one after another are near: a chunk
/// that holds the end of one list and the start of the next keeps much the same lists as
/// either, and lists kept together form runs of chunks.
fn chained(centroids: &[f32], d: usize) -> Vec<f32> {
    let nl = centroids.len() / d.max(1);
    if nl < 3 {
        return centroids.to_vec();
    }
    // `|a|^2 + |b|^2 - 2 a.b` for every pair by one matrix product (f32: an order, not a bound).
    let c = MatRef::from_row_major_slice(centroids, nl, d);
    let dots = products(c, c);
    let norms: Vec<f32> = (0..nl).map(|l| dots[(l, l)]).collect();
    let mut taken = vec![false; nl];
    let mut out = Vec::with_capacity(centroids.len());
    let mut at = 0usize;
    loop {
        taken[at] = true;
        out.extend_from_slice(&centroids[at * d..(at + 1) * d]);
        let col = dots.col(at);
        let next = (0..nl)
            .filter(|&m| !taken[m])
            .map(|m| (norms[m] - 2.0 * col[m], m))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        match next {
            Some((_, m)) => at = m,
            None => break out,
        }
    }
}

/// The lists whose cells lie in each of the `chunks` chunks of 128 positions (list `l` at
/// positions `starts[l] .. starts[l] + sizes[l]`, in list order).
fn chunk_lists(starts: &[u64], sizes: &[u32], chunks: usize) -> Vec<Vec<u32>> {
    let mut held = vec![Vec::new(); chunks];
    for (l, (&s, &z)) in starts.iter().zip(sizes).enumerate() {
        if z > 0 {
            let (c0, c1) = (s as usize / CHUNK, (s as usize + z as usize - 1) / CHUNK);
            for h in &mut held[c0..=c1] {
                h.push(l as u32);
            }
        }
    }
    held
}

/// Per chunk, the lists the rows of its lists in `(ptr, table)` (CSR, by list) name, merged in
/// list order: a CSR by chunk.
fn rows_of_chunks(held: &[Vec<u32>], ptr: &[u32], table: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let rows: Vec<Vec<u32>> = held
        .par_iter()
        .map(|ls| {
            let mut row: Vec<u32> = ls
                .iter()
                .flat_map(|&l| &table[ptr[l as usize] as usize..ptr[l as usize + 1] as usize])
                .copied()
                .collect();
            row.sort_unstable();
            row.dedup();
            row
        })
        .collect();
    let mut out_ptr = Vec::with_capacity(rows.len() + 1);
    out_ptr.push(0u32);
    let mut out = Vec::new();
    for r in rows {
        out.extend(r);
        out_ptr.push(out.len() as u32);
    }
    (out_ptr, out)
}

/// The chunk ranges a tile row streams for its lists (`rows`: CSR by chunk, lists in order):
/// each list's chunks, runs that touch or overlap merged so that no chunk comes twice.
/// `(ptr, ranges, cstart, ccount)` as [`Streams`] reads them (a row's ranges are its own).
fn ranges_of(rows: (Vec<u32>, Vec<u32>), lists: &lists::Lists) -> [Vec<u32>; 4] {
    let (ptr, table) = rows;
    let mut out_ptr = Vec::with_capacity(ptr.len());
    out_ptr.push(0u32);
    let (mut cstart, mut ccount) = (Vec::new(), Vec::new());
    for r in ptr.windows(2) {
        let mut open: Option<(u32, u32)> = None;
        for &l in &table[r[0] as usize..r[1] as usize] {
            let (s, z) = (
                lists.starts[l as usize] as usize,
                lists.sizes[l as usize] as usize,
            );
            if z == 0 {
                continue;
            }
            let (c0, c1) = ((s / CHUNK) as u32, (s + z).div_ceil(CHUNK) as u32);
            open = match open {
                Some((a, b)) if c0 <= b => Some((a, b.max(c1))),
                Some((a, b)) => {
                    cstart.push(a);
                    ccount.push(b - a);
                    Some((c0, c1))
                }
                None => Some((c0, c1)),
            };
        }
        if let Some((a, b)) = open {
            cstart.push(a);
            ccount.push(b - a);
        }
        out_ptr.push(cstart.len() as u32);
    }
    let ranges = (0..cstart.len() as u32).collect();
    [out_ptr, ranges, cstart, ccount]
}

/// [`ranges_of`]'s tables on the device.
struct DeviceStreams {
    ptr: DeviceVec<u32>,
    ranges: DeviceVec<u32>,
    cstart: DeviceVec<u32>,
    ccount: DeviceVec<u32>,
}

impl DeviceStreams {
    fn new(ctx: &GpuContext, t: &[Vec<u32>; 4]) -> Result<Self> {
        Ok(DeviceStreams {
            ptr: ctx.upload(&t[0])?,
            ranges: ctx.upload(&t[1])?,
            cstart: ctx.upload(&t[2])?,
            ccount: ctx.upload(&t[3])?,
        })
    }

    fn streams(&self) -> Streams<'_> {
        Streams {
            ptr: &self.ptr,
            ranges: &self.ranges,
            cstart: &self.cstart,
            ccount: &self.ccount,
        }
    }
}

/// The kept lists (`keep[a * nl + l]`, 1: list `l` may hold a neighbour of a cell of `a`) by
/// `prune_gaps` and `prune_lists`.
fn keep_lists_gpu(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    d: usize,
    centroids: &[f32],
    (starts, sizes): (&DeviceVec<u64>, &DeviceVec<u32>),
    packed: &Packed,
    tau: &DeviceVec<f32>,
) -> Result<Vec<u8>> {
    let nl = centroids.len() / d;
    let c: Vec<f64> = centroids.iter().map(|&v| v as f64).collect();
    let c = ctx.upload(&c)?;
    let gap = ctx.alloc::<f64>(nl * nl)?;
    let radius = ctx.alloc::<f64>(nl)?;
    let norm2 = ctx.alloc::<f64>(nl)?;
    let (nl32, d32, dp32) = (nl as u32, d as u32, (d | 1) as u32);
    let tiles = 8 * ((TILE_CELLS + TILE_CENTROIDS) * (d | 1) + 3 * TILE_CELLS + 2 * TILE_CENTROIDS)
        + 4 * TILE_CELLS;
    let blocks = |smem: usize| LaunchConfig {
        grid_dim: (nl as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // Both kernels start with the cells, the lists and the lists' geometry.
    let lists_args = |f| {
        let mut l = ctx.launcher(f);
        l.arg(xd)
            .arg(&c)
            .arg(&packed.ids)
            .arg(starts)
            .arg(sizes)
            .arg(&nl32)
            .arg(&d32)
            .arg(&dp32)
            .arg(&gap)
            .arg(&radius)
            .arg(&norm2);
        l
    };
    let f = ctx.function_with_shared(SRC, "prune_gaps", tiles)?;
    ctx.launch(lists_args(&f), blocks(tiles), "prune_gaps")?;

    let keep = ctx.alloc::<u8>(nl * nl)?;
    let smem = tiles + nl;
    let f = ctx.function_with_shared(SRC, "prune_lists", smem)?;
    let mut l = lists_args(&f);
    l.arg(tau).arg(&packed.nrm).arg(&packed.scale).arg(&keep);
    ctx.launch(l, blocks(smem), "prune_lists")?;
    ctx.download(&keep)
}

/// The probe table (CSR, as [`lists::probe_table`]'s) of the kept lists: each list's own first,
/// then the others it keeps in index order.
fn probes_kept(keep: &[u8], nl: usize) -> (Vec<u32>, Vec<u32>) {
    let mut ptr = Vec::with_capacity(nl + 1);
    let mut probes = Vec::new();
    ptr.push(0u32);
    for a in 0..nl {
        probes.push(a as u32);
        let row = &keep[a * nl..(a + 1) * nl];
        probes.extend((0..nl as u32).filter(|&l| l as usize != a && row[l as usize] != 0));
        ptr.push(probes.len() as u32);
    }
    (ptr, probes)
}

/// The lists `prune.cu` keeps, on the CPU (the same bounds in the same f64 steps), for tests:
/// `keep[a * nl + l]` for the cells of `x` (`d` values each) in the lists `members` around
/// `centroids`, each cell `q` with `dq[q]`, an upper bound of the distance to its `k`-th
/// neighbour (NaN: none).
pub fn keep_lists_host(
    x: &[f32],
    d: usize,
    centroids: &[f32],
    members: &[Vec<u32>],
    dq: &[f64],
) -> Vec<u8> {
    const TOL: f64 = 1e-10;
    let nl = members.len();
    let row = |i: u32| &x[i as usize * d..(i as usize + 1) * d];
    let cen = |l: usize| &centroids[l * d..(l + 1) * d];
    let dist2 = |a: &[f32], b: &[f32]| -> f64 {
        a.iter()
            .zip(b)
            .map(|(&u, &v)| (u as f64 - v as f64).powi(2))
            .sum()
    };
    let norm2 = |a: &[f32]| -> f64 { a.iter().map(|&u| (u as f64).powi(2)).sum() };
    // gap[l][j], radius[l], largest |r|^2 of l.
    let mut gap = vec![f64::INFINITY; nl * nl];
    let mut radius = vec![0f64; nl];
    let mut big = vec![0f64; nl];
    for (l, cells) in members.iter().enumerate() {
        for &r in cells {
            let own = dist2(row(r), cen(l));
            radius[l] = radius[l].max(own);
            big[l] = big[l].max(norm2(row(r)));
            for j in 0..nl {
                let g = &mut gap[l * nl + j];
                *g = g.min(dist2(row(r), cen(j)) - own);
            }
        }
        radius[l] = radius[l].sqrt() * (1.0 + TOL);
    }
    let mut keep = vec![0u8; nl * nl];
    for (a, cells) in members.iter().enumerate() {
        keep[a * nl + a] = 1;
        for l in 0..nl {
            if members[l].is_empty() {
                continue;
            }
            let cc2 = dist2(cen(a), cen(l));
            let half = if cc2 > 0.0 { 0.5 / cc2.sqrt() } else { 0.0 };
            let cn = norm2(cen(l));
            let kept = cells.iter().any(|&q| {
                let (own, dl) = (dist2(row(q), cen(a)), dist2(row(q), cen(l)));
                let tol = TOL * (norm2(row(q)) + cn + big[l] + own);
                let (dq, reach) = (dq[q as usize], dq[q as usize] + radius[l]);
                let ball = !(dl - tol > reach * reach);
                let plane = !(half > 0.0 && (gap[l * nl + a] - (own - dl) - 2.0 * tol) * half > dq);
                ball && plane
            });
            if kept {
                keep[a * nl + l] = 1;
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neighbors::knn_exact;
    use crate::random::SplitMix64;
    use crate::DenseMatrix;

    /// `n` points in `d` dimensions around `centres` centres (noise 1, centres 12 apart per
    /// dimension at most), seeded.
    fn clusters(n: usize, d: usize, centres: usize, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        let mut u = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let c: Vec<f64> = (0..centres * d).map(|_| (u() - 0.5) * 12.0).collect();
        (0..n)
            .flat_map(|i| (0..d).map(move |t| (i, t)))
            .map(|(i, t)| (c[(i % centres) * d + t] + (u() + u() + u() - 1.5)) as f32)
            .collect()
    }

    /// Lists around the first `nl` cells (every cluster's, in turn; centroids need not be
    /// means: the bounds hold for any), each cell in its nearest's.
    fn lists(x: &[f32], n: usize, d: usize, nl: usize) -> (Vec<f32>, Vec<Vec<u32>>) {
        let centroids = x[..nl * d].to_vec();
        let mut members = vec![Vec::new(); nl];
        for i in 0..n {
            let best = (0..nl)
                .min_by(|&a, &b| {
                    let da: f32 = (0..d)
                        .map(|t| (x[i * d + t] - centroids[a * d + t]).powi(2))
                        .sum();
                    let db: f32 = (0..d)
                        .map(|t| (x[i * d + t] - centroids[b * d + t]).powi(2))
                        .sum();
                    da.total_cmp(&db)
                })
                .unwrap();
            members[best].push(i as u32);
        }
        (centroids, members)
    }

    #[test]
    fn kept_lists_hold_every_exact_neighbour_and_prune_the_rest() {
        let (n, d, k, nl) = (3000, 12, 15, 40);
        let x = clusters(n, d, 6, 7);
        let knn = knn_exact(&DenseMatrix::new(n, d, x.clone()).unwrap(), k).unwrap();
        let (centroids, members) = lists(&x, n, d, nl);
        let mut list_of = vec![0usize; n];
        for (l, m) in members.iter().enumerate() {
            for &i in m {
                list_of[i as usize] = l;
            }
        }
        // D_q: the exact k-th distance (the tightest bound the search could have).
        let dq: Vec<f64> = (0..n).map(|i| knn.row(i).1[k - 1] as f64).collect();
        let keep = keep_lists_host(&x, d, &centroids, &members, &dq);
        for q in 0..n {
            for &r in knn.row(q).0 {
                let (a, l) = (list_of[q], list_of[r as usize]);
                assert_eq!(keep[a * nl + l], 1, "cell {q} (list {a}) needs list {l}");
            }
        }
        let kept = keep.iter().filter(|&&v| v != 0).count();
        assert!(kept < nl * nl / 3, "{kept} of {} kept", nl * nl);
        // A query without a bound keeps every non-empty list.
        let mut none = dq.clone();
        none[members[0][0] as usize] = f64::NAN;
        let keep = keep_lists_host(&x, d, &centroids, &members, &none);
        for l in 0..nl {
            assert_eq!(keep[l], u8::from(!members[l].is_empty()), "list {l}");
        }
    }

    #[test]
    fn chunks_stream_their_lists_ranges_once_each() {
        // Lists of 130, 0, 5 and 200 cells at positions 0, 132, 132, 140 (aligned to 4).
        let lists = lists::Lists {
            perm: vec![0; 340],
            starts: vec![0, 132, 132, 140],
            sizes: vec![130, 0, 5, 200],
        };
        let held = chunk_lists(&lists.starts, &lists.sizes, 3);
        assert_eq!(held, vec![vec![0], vec![0, 2, 3], vec![3]]);
        // List 0 keeps itself and 2; 2 keeps 0, 1, 3; 3 keeps itself.
        let (ptr, table) = (vec![0u32, 2, 2, 5, 6], vec![0u32, 2, 0, 1, 3, 3]);
        let rows = rows_of_chunks(&held, &ptr, &table);
        assert_eq!(rows.0, vec![0, 2, 6, 7]);
        assert_eq!(rows.1, vec![0, 2, 0, 1, 2, 3, 3]);
        let [rptr, ranges, cstart, ccount] = ranges_of(rows, &lists);
        // Chunk 0: lists 0 (chunks 0-1) and 2 (chunk 1): one run 0..2. Chunk 1: 0, 1 (empty),
        // 2, 3 (chunks 1-2): one run 0..3. Chunk 2: list 3, chunks 1..3.
        assert_eq!(rptr, vec![0, 1, 2, 3]);
        assert_eq!(ranges, vec![0, 1, 2]);
        assert_eq!(cstart, vec![0, 0, 1]);
        assert_eq!(ccount, vec![2, 3, 2]);
        // Lists apart stay apart.
        let far = lists::Lists {
            perm: vec![0; 1024],
            starts: vec![0, 512],
            sizes: vec![10, 10],
        };
        let [_, _, cstart, ccount] = ranges_of((vec![0, 2], vec![0, 1]), &far);
        assert_eq!((cstart, ccount), (vec![0, 4], vec![1, 1]));
    }

    #[test]
    fn chained_centroids_are_each_once_neighbours_next() {
        // Points on a line, shuffled: the chain from the first walks to one end (6 before 4:
        // as near, and first in the input), then jumps.
        let xs = [5.0f32, 1.0, 9.0, 3.0, 7.0, 0.0, 8.0, 2.0, 6.0, 4.0];
        let c: Vec<f32> = xs.iter().flat_map(|&x| [x, 0.0]).collect();
        let chain: Vec<f32> = chained(&c, 2).chunks(2).map(|p| p[0]).collect();
        assert_eq!(
            chain,
            vec![5.0, 6.0, 7.0, 8.0, 9.0, 4.0, 3.0, 2.0, 1.0, 0.0]
        );
    }

    #[test]
    fn kept_lists_become_a_probe_table_own_list_first() {
        let keep = vec![1, 0, 1, 0, 1, 0, 1, 1, 1];
        let (ptr, probes) = probes_kept(&keep, 3);
        assert_eq!(ptr, vec![0, 2, 3, 6]);
        assert_eq!(probes, vec![0, 2, 1, 2, 0, 1]);
    }
}
