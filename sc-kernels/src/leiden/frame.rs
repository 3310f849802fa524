//! The frame the parallel Leiden's CPU twin ([`super::parallel`]) and the GPU
//! ([`super::gpu`]) share: the graph's levels in fixed-point weights, the run's constants and
//! random streams, the iterations around the levels, and the hand-over of small levels to the
//! sequential algorithm.

use super::{check_params, modularity, renumber_by_size, LeidenParams, Partition};
use crate::csr::CsrMatrix;
use crate::error::Result;
use crate::random::hash3;
use rayon::prelude::*;

/// From the first aggregate level with at most this many stored edges on, an iteration is
/// finished on the host by the sequential algorithm (see [`finish_sequential`]):
/// on the 1M-cell demo 2 s of host time for 0.016 of modularity.
pub const HOST_BELOW: usize = 16_000_000;

/// The most rounds of local moving on one level. Late rounds are not harmless polish: each moves
/// nodes judged on the round's stale totals, and those moves merge groups that the sequential
/// algorithm keeps apart. On the 1 M-cell demo's exact graph (GPU, seeds 0-3) 200 rounds gave
/// modularity 0.897-0.904 (20-23 clusters), 100 rounds 0.905-0.912, 60 rounds 0.912-0.914
/// (29-32 clusters; the sequential algorithm 0.914, igraph's `community_leiden` 0.909), 40
/// rounds 0.911-0.914; the first level's late rounds did the harm. On a graph without groups (a
/// continuum, a unit test) a quarter of the nodes a round ([`may_move`]) ends 0.007 below the
/// sequential algorithm with 60 or 200 rounds (half: within 0.005).
pub const MAX_MOVE_ROUNDS: u32 = 60;

/// The most rounds of refinement on one level (each visits about half the nodes left).
pub const MAX_REFINE_ROUNDS: u32 = 64;

/// A pair of local-moving rounds that moves at most this many of `n` nodes ends the phase.
pub fn quiet_moves(n: usize) -> u64 {
    (n / 100_000) as u64
}

/// One level's graph: both directions of every edge stored, weights in fixed point. Entries on
/// the diagonal (self-loops of the input) stay in the rows but count only in the strength.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub indptr: Vec<u64>,
    pub indices: Vec<u32>,
    pub weights: Vec<u64>,
    /// Each node's strength: its row's weights (the input's self-loop included), or at an
    /// aggregate the sum of its members' strengths.
    pub strength: Vec<u64>,
}

impl Level {
    pub fn n(&self) -> usize {
        self.strength.len()
    }

    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    pub(crate) fn row(&self, v: usize) -> (&[u32], &[u64]) {
        let r = self.indptr[v] as usize..self.indptr[v + 1] as usize;
        (&self.indices[r.clone()], &self.weights[r])
    }
}

/// The constants of a run: `scale` is `resolution / 2m` (fixed point), `unit` `2^-e` (a fixed
/// weight times `unit` is the weight), `beta` the refinement's randomness, `seed` the
/// random state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Consts {
    pub scale: f64,
    pub unit: f64,
    pub beta: f64,
    pub seed: u64,
    /// Leiden's refinement, or none (Louvain).
    pub refine: bool,
}

/// The fixed-point exponent for `graph`: 32, or less when the total weight would pass 2^61.
pub fn fixed_exponent(graph: &CsrMatrix<f32>) -> i32 {
    let total: f64 = graph.data.par_iter().map(|&w| w as f64).sum();
    if total > 0.0 {
        ((61.0 - total.log2()).floor() as i32).min(32)
    } else {
        32
    }
}

/// A weight in fixed point.
#[inline]
pub fn to_fixed(w: f32, factor: f64) -> u64 {
    (w as f64 * factor).round() as u64
}

/// The first level: `graph`'s pattern with its weights in fixed point (exponent `e`).
pub fn level0(graph: &CsrMatrix<f32>, e: i32) -> Level {
    let factor = 2f64.powi(e);
    let weights: Vec<u64> = graph
        .data
        .par_iter()
        .map(|&w| to_fixed(w, factor))
        .collect();
    let strength = (0..graph.n_rows)
        .into_par_iter()
        .map(|v| {
            weights[graph.indptr[v] as usize..graph.indptr[v + 1] as usize]
                .iter()
                .sum()
        })
        .collect();
    Level {
        // Copied by every core: at the atlas's size a copy on one thread takes a second.
        indptr: graph.indptr.par_iter().copied().collect(),
        indices: graph.indices.par_iter().copied().collect(),
        weights,
        strength,
    }
}

impl Consts {
    pub fn new(g: &Level, params: &LeidenParams, e: i32) -> Consts {
        let total: u64 = g.strength.iter().sum();
        Consts {
            scale: if total > 0 {
                params.resolution / total as f64
            } else {
                0.0
            },
            unit: 2f64.powi(-e),
            beta: params.beta,
            seed: params.random_state,
            refine: params.refine,
        }
    }

    /// The gain of moving a node of strength `k` into a community of strength `big_k` to which
    /// it has weight `w` (the sequential code's `w - k K resolution / 2m`).
    #[inline]
    pub fn gain(&self, w: u64, k: u64, big_k: u64) -> f64 {
        w as f64 - k as f64 * big_k as f64 * self.scale
    }

    /// Whether a set of strength `s` with weight `ext` to the rest of its community (strength
    /// `c`) is well connected.
    #[inline]
    pub fn well_connected(&self, ext: u64, s: u64, c: u64) -> bool {
        ext as f64 >= s as f64 * (c - s) as f64 * self.scale
    }

    /// The refinement's key of a candidate: `gain / beta` (in weight units) plus Gumbel noise.
    #[inline]
    pub fn key(&self, gain: f64, noise: f64) -> f64 {
        gain * self.unit / self.beta + noise
    }
}

/// The random-number streams of one round of one level of one iteration: the refinement's
/// colours (this), its Gumbel noise (`| 1`), and with [`MOVE_STREAM`] the local moving's colours.
pub fn stream(iteration: u32, level: u32, round: u32) -> u64 {
    ((iteration as u64) << 48) | ((level as u64) << 32) | ((round as u64) << 1)
}

/// Marks the local moving's streams.
pub const MOVE_STREAM: u64 = 1 << 31;

/// Whether an iteration is finished by the sequential algorithm from `level` (of `nnz` stored
/// edges): an aggregate level of at most `host_below` edges, or a first level of at most a
/// sixteenth of that (a graph of up to ~40,000 cells at the default). Such a small graph gets
/// [`super::leiden`] itself, the CPU's result: there the GPU's launches cost more than the work,
/// and on the 559-cell celltypist sample both the parallel first level and the sequential
/// finish of the fixed-point graph gave partitions of higher modularity than leidenalg's but an
/// adjusted Rand index of 0.906 / 0.908 with it, where the gate asks 0.95.
pub fn hands_over(level: u32, nnz: usize, host_below: usize) -> bool {
    if level == 0 {
        nnz <= host_below / 16
    } else {
        nnz <= host_below
    }
}

/// Finishes an iteration on a small level with the sequential algorithm (its queue of moves
/// with exact totals after each one): on aggregate nodes, synchronous moves judged on the
/// round's stale totals merge communities that one-at-a-time moves keep apart. On an earlier
/// 1M-cell demo graph (27 M edges; 200 rounds of local moving, half the nodes moving), the
/// parallel algorithm on every level reached a modularity of 0.8835, sequential from the
/// aggregates of at most 0.2 M / 4 M / 16 M edges 0.8890 / 0.8920 / 0.8995. On today's demo
/// graph (26 M edges) the sequential algorithm throughout reaches 0.9136 in 18 s on 16 cores,
/// this hand-over 0.9118-0.9143 in 1.7-1.9 s (2026-11-29, H200). One thread, its own
/// counter-based generator: the same result on every run.
pub fn finish_sequential(
    g: &Level,
    mut part: Vec<u32>,
    node_of: &[u32],
    c: &Consts,
    params: &LeidenParams,
    iteration: u32,
) -> (Vec<u32>, bool) {
    // Each row in neighbour order: the sequential algorithm breaks ties by the order it meets
    // communities, and the GPU's aggregates list their rows' entries in hash-table order. The
    // rows are sorted on every core (a level handed over holds up to `HOST_BELOW` edges).
    // Each run of rows sorts in one scratch row of its own.
    let graph =
        super::Graph::from_rows_with(g.n(), Vec::<(u32, u64)>::new, |row, v, indices, weights| {
            let (idx, w) = g.row(v);
            row.clear();
            row.extend(
                idx.iter()
                    .zip(w)
                    .filter(|&(&u, &w)| u as usize != v && w > 0)
                    .map(|(&u, &w)| (u, w)),
            );
            row.sort_unstable();
            let mut outside = 0u64;
            for &(u, w) in row.iter() {
                indices.push(u);
                weights.push(w as f64 * c.unit);
                outside += w;
            }
            // The strength less the edges to others: the node's inner weight, its loop.
            (g.strength[v] - outside) as f64 * c.unit
        });
    let mut rng = crate::random::SplitMix64::new(hash3(c.seed, 0x5e9_0e47, iteration as u64));
    let changed = super::one_iteration(&graph, &mut part, params, &mut rng);
    (node_of.iter().map(|&a| part[a as usize]).collect(), changed)
}

/// The frame the twin and the GPU share: a small graph to the sequential algorithm
/// ([`hands_over`]); else the checks, the fixed-point first level, and `n_iterations`
/// iterations (negative: until one changes nothing) of `iterate(level 0, constants,
/// membership, iteration)`, which returns the new membership and whether a node moved.
pub(crate) fn run_iterations(
    graph: &CsrMatrix<f32>,
    params: &LeidenParams,
    host_below: usize,
    mut iterate: impl FnMut(&Level, &Consts, Vec<u32>, u32) -> Result<(Vec<u32>, bool)>,
) -> Result<Partition> {
    if hands_over(0, graph.nnz(), host_below) {
        // A small graph: the sequential algorithm, the CPU's own result.
        return super::leiden(graph, params);
    }
    check_params(params)?;
    crate::graph::check_graph(graph, "leiden")?;
    let e = fixed_exponent(graph);
    let g0 = level0(graph, e);
    let c = Consts::new(&g0, params, e);
    let mut membership: Vec<u32> = (0..graph.n_rows as u32).collect();
    let mut iteration = 0u32;
    while params.n_iterations < 0 || (iteration as i32) < params.n_iterations {
        let (m, changed) = iterate(&g0, &c, membership, iteration)?;
        membership = m;
        iteration += 1;
        if !changed && params.n_iterations < 0 {
            break;
        }
    }
    Ok(finish(graph, membership, params.resolution))
}

/// The labels renumbered by size and the modularity.
pub(crate) fn finish(
    graph: &CsrMatrix<f32>,
    mut membership: Vec<u32>,
    resolution: f64,
) -> Partition {
    let n_communities = renumber_by_size(&mut membership);
    let quality = modularity(graph, &membership, resolution);
    Partition {
        membership,
        n_communities,
        quality,
    }
}
