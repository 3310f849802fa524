//! The parallel Leiden algorithm, written on the CPU as the synchronous rounds the GPU runs
//! (the GPU): the exact twin of the kernels in `leiden.cu`, and the CI guard of
//! their logic. The same graph, parameters and seed give the same labels bit for bit here and on
//! the GPU, on every run; not the labels of the sequential [`super::leiden`] (another algorithm
//! of the same quality).
//!
//! - **Exact sums.** Weights become 64-bit fixed-point integers once (`w * 2^e` rounded, `e` at
//!   most 32 and small enough that the total stays below 2^62); every strength, community total
//!   and aggregated weight is a sum of those integers, exact and independent of the order of
//!   summation (the GPU sums them with integer atomics). Gains are computed in `f64` from those
//!   integers with one fixed operation order (the CUDA uses the `_rn` intrinsics: no fused
//!   multiply-add).
//! - **Order-free decisions.** Every choice is an arg-max under a total order (gain, then the
//!   smallest community id), and the random choice of the refinement is the Gumbel-max trick
//!   (`gain / beta` plus Gumbel noise hashed from the seed, the round, the node and the
//!   candidate), so neither the order of a row's entries nor the order threads run in matters.
//! - **Local moving** in rounds: every node computes, from the previous round's state, the
//!   neighbouring community of the largest gain (staying wins ties; a node whose community is
//!   worth less than being alone may move to the empty community of its own id); the moves are
//!   then applied together. Two rules keep synchronous moves from undoing each other: only a
//!   random quarter of the nodes (hashed from the seed, round and node: [`may_move`]) may move
//!   in a round, so that a community is not joined by all its suitors at once on its stale
//!   strength (with every node, a planted graph with half its edges between groups lost 0.05 of
//!   modularity to over-merged groups; with half of them, the 200k-cell demo's first level
//!   0.002); and rounds alternate up and down (cuGraph's Louvain): in even rounds a node may
//!   only move to a community of a larger id, in odd rounds of a smaller one, so no two nodes
//!   swap communities within a round. It stops after a pair of rounds (one up, one down) that moves at
//!   most [`quiet_moves`] nodes, or after [`MAX_MOVE_ROUNDS`] rounds.
//! - **Refinement** inside each community: nodes start alone; each round, a random half of the
//!   nodes not yet visited and still alone (hashed colour) are visited: a well-connected one
//!   joins a well-connected refined community of its own community with a gain of at least 0, or
//!   stays alone, by the Gumbel-max of `gain / beta` (the sequential code's `exp(gain / beta)`
//!   choice). A visited node is never visited again (the sequential code visits each node once).
//!   A node may not join a singleton whose node is visited in the same round, so no target
//!   loses its node while being joined: a refined community only grows, and the community of id
//!   `r`, when not empty, holds node `r`. The refined totals (size, strength, weight to the rest
//!   of the community) are recomputed exactly after each round.
//! - **Aggregation**: refined communities (numbered by id) become nodes, the weights between
//!   them summed, a node's strength the sum of its members' (the inner weight is only ever used
//!   through the strength); the aggregate starts from the unrefined communities. When the
//!   refinement leaves every node alone, the aggregation uses the unrefined communities instead
//!   (as leidenalg does), so every level is smaller than the last.
//! - `n_iterations` iterations as [`super::leiden`], labels renumbered by size, `quality` the
//!   modularity of the original graph.

use super::frame::{
    finish_sequential, hands_over, quiet_moves, run_iterations, stream, Consts, Level, HOST_BELOW,
    MAX_MOVE_ROUNDS, MAX_REFINE_ROUNDS, MOVE_STREAM,
};
use super::{LeidenParams, Partition};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::fastmath::ln_pos;
use crate::random::hash3;
use rayon::prelude::*;

/// Whether node `v` is coloured for a visit in refinement round `stream` (half of them).
#[inline]
pub fn coloured(seed: u64, stream: u64, v: u32) -> bool {
    hash3(seed, stream, v as u64) & 1 == 0
}

/// Whether node `v` may move in local-moving round `stream`: a quarter of the nodes. A round's
/// moves are judged on its stale community totals, so the more nodes move at once, the more a
/// community is over-joined. On the 200k-cell demo's exact graph (its first level parallel, the
/// CPU twin), half ended 0.0022 of modularity below the sequential algorithm (seven seeds'
/// mean: 0.8882 against 0.8904), a quarter 0.0005 below (0.8899), an eighth no better (0.8898);
/// with [`MAX_MOVE_ROUNDS`] rounds, half 0.8881-0.8893 and a quarter 0.8911-0.8927 (four seeds).
#[inline]
pub fn may_move(seed: u64, stream: u64, v: u32) -> bool {
    hash3(seed, stream, v as u64) & 3 == 0
}

/// Standard Gumbel noise for the candidate `r` of node `v` in round `stream`.
#[inline]
pub fn gumbel(seed: u64, stream: u64, v: u32, r: u32) -> f64 {
    let h = hash3(seed, stream | 1, ((v as u64) << 32) | r as u64);
    let u = ((h >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64);
    -ln_pos(-ln_pos(u))
}

/// Better under the total order of the decisions: a larger value, then a smaller id.
#[inline]
fn better(value: f64, id: u32, best: (f64, u32)) -> bool {
    value > best.0 || (value == best.0 && id < best.1)
}

/// Per-thread sums of fixed weights per community, with the list of those touched.
struct Acc {
    sums: Vec<u64>,
    seen: Vec<bool>,
    touched: Vec<u32>,
}

impl Acc {
    fn new(n: usize) -> Acc {
        Acc {
            sums: vec![0; n],
            seen: vec![false; n],
            touched: Vec::new(),
        }
    }

    fn add(&mut self, c: u32, w: u64) {
        if !self.seen[c as usize] {
            self.seen[c as usize] = true;
            self.touched.push(c);
        }
        self.sums[c as usize] += w;
    }

    fn clear(&mut self) {
        for &c in &self.touched {
            self.sums[c as usize] = 0;
            self.seen[c as usize] = false;
        }
        self.touched.clear();
    }
}

/// Nodes per rayon task (each task keeps one accumulator of `n` entries).
const MIN_LEN: usize = 2048;

/// Per node, a value computed with an accumulator, in parallel.
fn per_node<F>(n: usize, f: F) -> Vec<u32>
where
    F: Fn(&mut Acc, usize) -> u32 + Sync,
{
    (0..n)
        .into_par_iter()
        .with_min_len(MIN_LEN)
        .map_init(|| Acc::new(n), |acc, v| f(acc, v))
        .collect()
}

/// Strength and size of each community of `part` (ids below `n`).
fn community_totals(g: &Level, part: &[u32]) -> (Vec<u64>, Vec<u32>) {
    let n = g.n();
    let (mut strength, mut size) = (vec![0u64; n], vec![0u32; n]);
    for v in 0..n {
        strength[part[v] as usize] += g.strength[v];
        size[part[v] as usize] += 1;
    }
    (strength, size)
}

/// The move of node `v` in a round of local moving (`up`: only to larger ids): its new
/// community (its current one when it stays).
#[allow(clippy::too_many_arguments)]
fn best_move(
    g: &Level,
    part: &[u32],
    comm_strength: &[u64],
    comm_size: &[u32],
    c: &Consts,
    up: bool,
    v: usize,
    acc: &mut Acc,
) -> u32 {
    let (idx, w) = g.row(v);
    for (&u, &w) in idx.iter().zip(w) {
        if u as usize != v {
            acc.add(part[u as usize], w);
        }
    }
    let cur = part[v];
    let k = g.strength[v];
    let w_cur = if acc.seen[cur as usize] {
        acc.sums[cur as usize]
    } else {
        0
    };
    let stay = c.gain(w_cur, k, comm_strength[cur as usize] - k);
    let mut best = (f64::NEG_INFINITY, u32::MAX);
    for &t in &acc.touched {
        if (up && t > cur) || (!up && t < cur) {
            let gain = c.gain(acc.sums[t as usize], k, comm_strength[t as usize]);
            if better(gain, t, best) {
                best = (gain, t);
            }
        }
    }
    // Alone, in the empty community of the node's own id.
    if comm_size[v] == 0 && comm_size[cur as usize] > 1 && better(0.0, v as u32, best) {
        best = (0.0, v as u32);
    }
    acc.clear();
    if best.0 > stay {
        best.1
    } else {
        cur
    }
}

/// The local moving phase on `part` (community ids below `g.n()`); whether any node moved.
pub fn local_move(g: &Level, part: &mut [u32], c: &Consts, iteration: u32, level: u32) -> bool {
    let n = g.n();
    let (mut comm_strength, mut comm_size) = community_totals(g, part);
    let (mut changed, mut last) = (false, u64::MAX);
    for round in 0..MAX_MOVE_ROUNDS {
        let up = round % 2 == 0;
        let st = stream(iteration, level, round) | MOVE_STREAM;
        let target = per_node(n, |acc, v| {
            if !may_move(c.seed, st, v as u32) {
                return part[v];
            }
            best_move(g, part, &comm_strength, &comm_size, c, up, v, acc)
        });
        let mut moved = 0u64;
        for v in 0..n {
            let (from, to) = (part[v] as usize, target[v] as usize);
            if from != to {
                comm_strength[from] -= g.strength[v];
                comm_size[from] -= 1;
                comm_strength[to] += g.strength[v];
                comm_size[to] += 1;
                part[v] = to as u32;
                moved += 1;
            }
        }
        changed |= moved > 0;
        if round % 2 == 1 && last + moved <= quiet_moves(n) {
            break;
        }
        last = moved;
    }
    changed
}

/// Size, strength and weight to the rest of their community of the refined communities.
fn refined_totals(g: &Level, part: &[u32], refined: &[u32]) -> (Vec<u32>, Vec<u64>, Vec<u64>) {
    let n = g.n();
    let external: Vec<u64> = (0..n)
        .into_par_iter()
        .map(|v| {
            let (idx, w) = g.row(v);
            idx.iter()
                .zip(w)
                .filter(|&(&u, _)| {
                    let u = u as usize;
                    u != v && part[u] == part[v] && refined[u] != refined[v]
                })
                .map(|(_, &w)| w)
                .sum()
        })
        .collect();
    let (mut size, mut strength, mut ext) = (vec![0u32; n], vec![0u64; n], vec![0u64; n]);
    for v in 0..n {
        let r = refined[v] as usize;
        size[r] += 1;
        strength[r] += g.strength[v];
        ext[r] += external[v];
    }
    (size, strength, ext)
}

/// The refined communities of `part` (ids below `g.n()`, `comm_strength` their strengths);
/// `iteration` and `level` pick the random streams.
pub fn refine(
    g: &Level,
    part: &[u32],
    comm_strength: &[u64],
    c: &Consts,
    iteration: u32,
    level: u32,
) -> Vec<u32> {
    let n = g.n();
    let mut refined: Vec<u32> = (0..n as u32).collect();
    let mut visited = vec![false; n];
    for round in 0..MAX_REFINE_ROUNDS {
        let (size, strength, ext) = refined_totals(g, part, &refined);
        let st = stream(iteration, level, round);
        let movers: Vec<bool> = (0..n)
            .into_par_iter()
            .map(|v| {
                !visited[v] && size[refined[v] as usize] == 1 && coloured(c.seed, st, v as u32)
            })
            .collect();
        if !movers.iter().any(|&m| m) {
            break;
        }
        for (seen, &m) in visited.iter_mut().zip(&movers) {
            *seen |= m;
        }
        let next = per_node(n, |acc, v| {
            if !movers[v] {
                return refined[v];
            }
            refine_one(
                g,
                part,
                comm_strength,
                &refined,
                &movers,
                (&size, &strength, &ext),
                c,
                st,
                v,
                acc,
            )
        });
        refined = next;
    }
    refined
}

/// Where mover `v` goes in a round of refinement (its own refined community when it stays).
#[allow(clippy::too_many_arguments)]
fn refine_one(
    g: &Level,
    part: &[u32],
    comm_strength: &[u64],
    refined: &[u32],
    movers: &[bool],
    (size, strength, ext): (&[u32], &[u64], &[u64]),
    c: &Consts,
    st: u64,
    v: usize,
    acc: &mut Acc,
) -> u32 {
    let own = refined[v];
    let p = part[v];
    let total = comm_strength[p as usize];
    let k = g.strength[v];
    if !c.well_connected(ext[own as usize], k, total) {
        return own;
    }
    let (idx, w) = g.row(v);
    for (&u, &w) in idx.iter().zip(w) {
        if u as usize != v && part[u as usize] == p {
            acc.add(refined[u as usize], w);
        }
    }
    let vv = v as u32;
    let mut best = (c.key(0.0, gumbel(c.seed, st, vv, own)), own);
    for &r in &acc.touched {
        let ru = r as usize;
        if r == own || (size[ru] < 2 && movers[ru]) {
            continue;
        }
        if !c.well_connected(ext[ru], strength[ru], total) {
            continue;
        }
        let gain = c.gain(acc.sums[ru], k, strength[ru]);
        if gain >= 0.0 {
            let key = c.key(gain, gumbel(c.seed, st, vv, r));
            if better(key, r, best) {
                best = (key, r);
            }
        }
    }
    acc.clear();
    best.1
}

/// Renumbers the ids of `part` (below `n_ids`) `0..k` in order of id; returns `k`.
pub fn renumber_by_id(part: &mut [u32], n_ids: usize) -> usize {
    let mut map = vec![u32::MAX; n_ids];
    for &c in part.iter() {
        map[c as usize] = 0;
    }
    let mut k = 0u32;
    for m in map.iter_mut() {
        if *m == 0 {
            *m = k;
            k += 1;
        }
    }
    for c in part.iter_mut() {
        *c = map[*c as usize];
    }
    k as usize
}

/// The graph of the communities `into` (numbered `0..k`): weights between them summed (the
/// weight inside dropped), strengths summed. Each row's entries in order of target.
pub fn aggregate(g: &Level, into: &[u32], k: usize) -> Level {
    let n = g.n();
    let mut start = vec![0usize; k + 1];
    for &r in into {
        start[r as usize + 1] += 1;
    }
    for r in 0..k {
        start[r + 1] += start[r];
    }
    let mut members = vec![0u32; n];
    let mut fill = start.clone();
    let mut strength = vec![0u64; k];
    for (v, &r) in into.iter().enumerate() {
        let r = r as usize;
        members[fill[r]] = v as u32;
        fill[r] += 1;
        strength[r] += g.strength[v];
    }
    let rows: Vec<Vec<(u32, u64)>> = (0..k)
        .into_par_iter()
        .with_min_len(MIN_LEN / 8)
        .map_init(
            || Acc::new(k),
            |acc, r| {
                for &v in &members[start[r]..start[r + 1]] {
                    let (idx, w) = g.row(v as usize);
                    for (&u, &w) in idx.iter().zip(w) {
                        let t = into[u as usize];
                        if t as usize != r {
                            acc.add(t, w);
                        }
                    }
                }
                let mut row: Vec<(u32, u64)> = acc
                    .touched
                    .iter()
                    .map(|&t| (t, acc.sums[t as usize]))
                    .collect();
                row.sort_unstable();
                acc.clear();
                row
            },
        )
        .collect();
    let mut indptr = Vec::with_capacity(k + 1);
    indptr.push(0u64);
    let nnz: usize = rows.iter().map(Vec::len).sum();
    let (mut indices, mut weights) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
    for row in rows {
        for (t, w) in row {
            indices.push(t);
            weights.push(w);
        }
        indptr.push(indices.len() as u64);
    }
    Level {
        indptr,
        indices,
        weights,
        strength,
    }
}

/// What one level hands the next: the refined communities (renumbered) to aggregate by, their
/// count, and the partition the aggregate starts from. `None` when every community is one node
/// (the iteration ends).
pub struct NextLevel {
    pub into: Vec<u32>,
    pub k: usize,
    pub next_part: Vec<u32>,
}

/// Local moving and refinement of one level; `part` (renumbered by id on return) is the level's
/// partition. Returns whether a node moved, and the next level's plan unless the iteration ends.
pub fn one_level(
    g: &Level,
    part: &mut [u32],
    c: &Consts,
    iteration: u32,
    level: u32,
) -> (bool, Option<NextLevel>) {
    let n = g.n();
    let changed = local_move(g, part, c, iteration, level);
    let n_comm = renumber_by_id(part, n);
    if n_comm == n {
        return (changed, None);
    }
    let (mut refined, mut k) = if c.refine {
        let (comm_strength, _) = community_totals(g, part);
        let mut refined = refine(g, part, &comm_strength, c, iteration, level);
        let k = renumber_by_id(&mut refined, n);
        (refined, k)
    } else {
        (Vec::new(), n)
    };
    if k == n {
        // Nothing merged (or Louvain): aggregate the communities themselves.
        refined = part.to_vec();
        k = n_comm;
    }
    let mut next_part = vec![0u32; k];
    for v in 0..n {
        next_part[refined[v] as usize] = part[v];
    }
    (
        changed,
        Some(NextLevel {
            into: refined,
            k,
            next_part,
        }),
    )
}

/// Continues iteration `iteration` from `level` (graph `g`, partition `part`), `node_of` the
/// level's node of each original node; returns each original node's community and whether a
/// node moved. From the level where [`hands_over`] says so on, the iteration finishes with the
/// sequential algorithm ([`finish_sequential`]).
#[allow(clippy::too_many_arguments)]
pub fn finish_iteration(
    g: Level,
    mut part: Vec<u32>,
    node_of: &[u32],
    c: &Consts,
    params: &LeidenParams,
    iteration: u32,
    mut level: u32,
    host_below: usize,
) -> (Vec<u32>, bool) {
    let mut g = g;
    let mut node_of = node_of.to_vec();
    let mut changed = false;
    loop {
        if hands_over(level, g.nnz(), host_below) {
            let (m, moved) = finish_sequential(&g, part, &node_of, c, params, iteration);
            return (m, changed | moved);
        }
        let (moved, next) = one_level(&g, &mut part, c, iteration, level);
        changed |= moved;
        let Some(next) = next else { break };
        node_of
            .par_iter_mut()
            .for_each(|a| *a = next.into[*a as usize]);
        g = aggregate(&g, &next.into, next.k);
        part = next.next_part;
        level += 1;
    }
    (node_of.iter().map(|&a| part[a as usize]).collect(), changed)
}

/// The parallel algorithm on the CPU: the same partition, bit for bit, as
/// the GPU.
pub fn leiden_parallel(graph: &CsrMatrix<f32>, params: &LeidenParams) -> Result<Partition> {
    leiden_parallel_with(graph, params, HOST_BELOW)
}

/// [`leiden_parallel`] finishing each iteration sequentially from the first level of at most
/// `host_below` stored edges (0: parallel on every level), as [`super::leiden_gpu_with`].
pub fn leiden_parallel_with(
    graph: &CsrMatrix<f32>,
    params: &LeidenParams,
    host_below: usize,
) -> Result<Partition> {
    let identity: Vec<u32> = (0..graph.n_rows as u32).collect();
    run_iterations(graph, params, host_below, |g0, c, membership, iteration| {
        Ok(finish_iteration(
            g0.clone(),
            membership,
            &identity,
            c,
            params,
            iteration,
            0,
            host_below,
        ))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::graph::tests::{graph, planted};
    use crate::leiden::frame::{fixed_exponent, level0, to_fixed};
    use crate::leiden::modularity;
    use crate::random::SplitMix64;

    /// The parallel algorithm on every level: the default ([`super::leiden_parallel`]) gives
    /// graphs as small as these tests' to the sequential algorithm.
    fn leiden_parallel(g: &CsrMatrix<f32>, p: &LeidenParams) -> Result<Partition> {
        leiden_parallel_with(g, p, 0)
    }

    #[test]
    fn small_graphs_get_the_sequential_algorithm() {
        // A graph without groups: there the two algorithms end in different partitions (on
        // planted groups both find the groups).
        let g = knn_graph(2000, 1, 3);
        let p = LeidenParams::default();
        assert_eq!(
            super::leiden_parallel(&g, &p).unwrap(),
            super::super::leiden(&g, &p).unwrap()
        );
        assert_ne!(
            leiden_parallel(&g, &p).unwrap(),
            super::super::leiden(&g, &p).unwrap()
        );
    }

    /// The adjusted Rand index of two labelings.
    pub(crate) fn ari(a: &[u32], b: &[u32]) -> f64 {
        let ka = *a.iter().max().unwrap() as usize + 1;
        let kb = *b.iter().max().unwrap() as usize + 1;
        let mut table = std::collections::HashMap::new();
        let (mut ra, mut rb) = (vec![0f64; ka], vec![0f64; kb]);
        for (&x, &y) in a.iter().zip(b) {
            *table.entry((x, y)).or_insert(0f64) += 1.0;
            ra[x as usize] += 1.0;
            rb[y as usize] += 1.0;
        }
        let c2 = |x: f64| x * (x - 1.0) / 2.0;
        let index: f64 = table.values().map(|&x| c2(x)).sum();
        let (sa, sb): (f64, f64) = (
            ra.iter().map(|&x| c2(x)).sum(),
            rb.iter().map(|&x| c2(x)).sum(),
        );
        let expected = sa * sb / c2(a.len() as f64);
        (index - expected) / ((sa + sb) / 2.0 - expected)
    }

    /// A kNN graph (scanpy's connectivities, 15 neighbours) of `n` points around `k` centres
    /// of different spreads in 20 dimensions.
    pub(crate) fn knn_graph(n: usize, k: usize, seed: u64) -> CsrMatrix<f32> {
        let mut rng = SplitMix64::new(seed);
        let d = 20;
        let centres: Vec<Vec<f64>> = (0..k)
            .map(|_| (0..d).map(|_| 4.0 * rng.normal()).collect())
            .collect();
        let mut data = Vec::with_capacity(n * d);
        for i in 0..n {
            let c = i % k;
            let spread = 1.0 + (c % 3) as f64;
            for x in &centres[c] {
                data.push((x + spread * rng.normal()) as f32);
            }
        }
        let x = crate::DenseMatrix::new(n, d, data).unwrap();
        crate::neighbors::neighbors(&x, &Default::default())
            .unwrap()
            .connectivities
    }

    fn compare(name: &str, g: &CsrMatrix<f32>, params: &LeidenParams) -> (Partition, Partition) {
        let t = std::time::Instant::now();
        let seq = super::super::leiden(g, params).unwrap();
        let ts = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let par = leiden_parallel(g, params).unwrap();
        let tp = t.elapsed().as_secs_f64();
        eprintln!(
            "{name}: sequential {:.5} ({} clusters, {ts:.2} s), parallel {:.5} ({} clusters, {tp:.2} s), ARI {:.3}",
            seq.quality,
            seq.n_communities,
            par.quality,
            par.n_communities,
            ari(&seq.membership, &par.membership)
        );
        (seq, par)
    }

    #[test]
    fn reaches_the_sequential_modularity() {
        let p = LeidenParams::default();
        for (name, g) in [
            ("planted 20k", planted(20_000, 1000, 0.8, 1)),
            ("planted 20k noisy", planted(20_000, 2000, 0.5, 2)),
            ("knn 4000", knn_graph(4000, 12, 3)),
            ("knn continuum 4000", knn_graph(4000, 1, 4)),
        ] {
            let (seq, par) = compare(name, &g, &p);
            // A continuum has no groups to find, only a flat landscape of small gains that
            // local moving climbs slowly: with a quarter of the nodes a round the parallel
            // algorithm ends 0.007 below the sequential one there (0.4112 against 0.4184; half
            // of them: within 0.005), the price of the 0.003 a quarter gains on the 200k-cell
            // demo's graph (see `may_move`).
            let tolerance = if name.contains("continuum") {
                0.01
            } else {
                0.005
            };
            assert!(par.quality >= seq.quality - tolerance, "{name}");
        }
    }

    #[test]
    fn louvain_twin_reaches_the_sequential_quality() {
        let g = planted(8_000, 400, 0.7, 9);
        let p = LeidenParams::louvain(1.0, 2);
        let seq = super::super::leiden(&g, &p).unwrap();
        let par = leiden_parallel(&g, &p).unwrap();
        assert!(
            par.quality >= seq.quality - 0.005,
            "{} vs {}",
            par.quality,
            seq.quality
        );
        assert_eq!(par, leiden_parallel(&g, &p).unwrap());
    }

    #[test]
    fn finds_planted_groups_and_repeats_itself() {
        let g = planted(10_000, 500, 0.7, 7);
        let p = LeidenParams {
            random_state: 5,
            ..Default::default()
        };
        let a = leiden_parallel(&g, &p).unwrap();
        let truth: Vec<u32> = (0..10_000u32).map(|v| v / 500).collect();
        assert!(
            ari(&a.membership, &truth) > 0.99,
            "{}",
            ari(&a.membership, &truth)
        );
        assert_eq!(a, leiden_parallel(&g, &p).unwrap());
        let other = leiden_parallel(&g, &LeidenParams::default()).unwrap();
        assert!(ari(&a.membership, &other.membership) > 0.99);
        let until_stable = leiden_parallel(
            &g,
            &LeidenParams {
                n_iterations: -1,
                ..p
            },
        )
        .unwrap();
        assert!(until_stable.quality >= a.quality - 1e-3);
    }

    #[test]
    fn isolated_nodes_components_and_bad_input() {
        // Two cliques, a pair, and two isolated nodes (one with a self-loop).
        let mut edges = Vec::new();
        for base in [0, 6] {
            for a in 0..6 {
                for b in a + 1..6 {
                    edges.push((base + a, base + b, 1.0));
                }
            }
        }
        edges.push((12, 13, 0.5));
        edges.push((15, 15, 2.0));
        let g = graph(16, &edges);
        let p = leiden_parallel(&g, &LeidenParams::default()).unwrap();
        assert_eq!(p.n_communities, 5);
        assert_eq!(&p.membership[..6], &[p.membership[0]; 6]);
        assert_eq!(&p.membership[6..12], &[p.membership[6]; 6]);
        assert_eq!(p.membership[12], p.membership[13]);
        assert_ne!(p.membership[14], p.membership[15]);
        assert!((p.quality - modularity(&g, &p.membership, 1.0)).abs() < 1e-12);
        let empty = leiden_parallel(&CsrMatrix::<f32>::zeros(4, 4), &LeidenParams::default());
        assert_eq!(empty.unwrap().n_communities, 4);
        let bad = LeidenParams {
            resolution: -1.0,
            ..Default::default()
        };
        assert!(leiden_parallel(&g, &bad)
            .unwrap_err()
            .to_string()
            .contains("resolution"));
        let bad = LeidenParams {
            beta: 0.0,
            ..Default::default()
        };
        assert!(leiden_parallel(&g, &bad)
            .unwrap_err()
            .to_string()
            .contains("beta"));
        assert!(leiden_parallel(&CsrMatrix::<f32>::zeros(3, 4), &LeidenParams::default()).is_err());
        let mut asym = g.clone();
        asym.data[0] = 0.3;
        assert!(leiden_parallel(&asym, &LeidenParams::default()).is_err());
    }

    #[test]
    fn fixed_point_keeps_large_weights_exact() {
        let g = graph(3, &[(0, 1, 3.0e9), (1, 2, 1.0)]);
        let e = fixed_exponent(&g);
        assert!(e < 32);
        let l = level0(&g, e);
        let total: u64 = l.strength.iter().sum();
        assert!(total < 1 << 62);
        assert_eq!(l.strength[2], to_fixed(1.0, 2f64.powi(e)));
        assert_eq!(renumber_by_id(&mut [7, 3, 7, 9], 10), 3);
    }
}
