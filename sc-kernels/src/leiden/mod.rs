//! `leiden` (scanpy's `tl.leiden`): communities of the cell graph by the Leiden algorithm (Traag,
//! Waltman & van Eck 2019) with the modularity quality function and a resolution, as leidenalg's
//! `RBConfigurationVertexPartition` and igraph's `community_leiden(objective_function=
//! "modularity")` define it:
//!
//! `Q = 1/(2m) * sum_c (in_c - resolution * K_c^2 / (2m))`, `in_c` the weight inside community
//! `c` (each edge counted from both ends), `K_c` the strength of its nodes, `2m` the total.
//!
//! Each iteration: fast local moving of nodes (a queue, each node to the neighbouring community
//! of the largest gain), refinement inside each community (singletons merged into well-connected
//! sub-communities, chosen at random with weights `exp(gain / 0.01)`, leidenalg's randomness),
//! aggregation of the refined communities into nodes starting from the unrefined partition, until
//! every community is one node. `n_iterations` iterations (scanpy's igraph flavour: 2), or until an
//! iteration changes nothing when negative.
//!
//! Reproducible: one thread, a counter-based generator ([`crate::random`]) and fixed tie-breaking
//! (the current community first, then the first community met), so the same graph and seed give
//! the same labels bit for bit on every run and machine. The labels are numbered by community
//! size, largest first (ties by their smallest node), as leidenalg renumbers them.
//!
//! [`leiden`] is the sequential algorithm (the CPU path). [`leiden_gpu`] runs the parallel
//! algorithm of [`parallel`] (synchronous rounds of local moving and refinement, exact
//! fixed-point sums, order-free decisions) on the device, and [`leiden_parallel`] is its CPU
//! twin: the two give the same labels bit for bit, and the same quality as [`leiden`] (within
//! 0.005 of modularity on the tests' graphs) but not its labels.

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::random::SplitMix64;
use rayon::prelude::*;

mod frame;
mod gpu;
pub mod parallel;

pub use frame::HOST_BELOW;
pub use gpu::{leiden_gpu, leiden_gpu_with};
pub use parallel::{leiden_parallel, leiden_parallel_with};

/// The CUDA module of [`leiden_gpu`] (what the warm-up compiles).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;

/// Parameters, with scanpy's defaults (igraph flavour's iteration count).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeidenParams {
    pub resolution: f64,
    /// Iterations of the whole algorithm; negative: until one changes nothing.
    pub n_iterations: i32,
    pub random_state: u64,
    /// Randomness of the refinement (leidenalg's `theta`, igraph's `beta`).
    pub beta: f64,
    /// Refine the communities before aggregating (Leiden); `false`: aggregate the communities
    /// of the local moving themselves (Louvain, Blondel et al. 2008).
    pub refine: bool,
}

impl Default for LeidenParams {
    fn default() -> Self {
        LeidenParams {
            resolution: 1.0,
            n_iterations: 2,
            random_state: 0,
            beta: 0.01,
            refine: true,
        }
    }
}

impl LeidenParams {
    /// Louvain's parameters (scanpy's and rapids-singlecell's `tl.louvain`): no refinement,
    /// iterations until one changes nothing.
    pub fn louvain(resolution: f64, random_state: u64) -> Self {
        LeidenParams {
            resolution,
            n_iterations: -1,
            random_state,
            refine: false,
            ..Default::default()
        }
    }
}

/// The partition found.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Community of each node, `0` the largest.
    pub membership: Vec<u32>,
    pub n_communities: usize,
    /// Its modularity at the resolution used.
    pub quality: f64,
}

/// Communities of `graph` (symmetric, non-negative weights: `obsp['connectivities']`).
pub fn leiden(graph: &CsrMatrix<f32>, params: &LeidenParams) -> Result<Partition> {
    check_params(params)?;
    crate::graph::check_graph(graph, "leiden")?;
    let g = Graph::from_csr(graph);
    let mut rng = SplitMix64::new(params.random_state);
    let mut membership: Vec<u32> = (0..g.n() as u32).collect();
    let mut iteration = 0;
    while params.n_iterations < 0 || iteration < params.n_iterations {
        let changed = one_iteration(&g, &mut membership, params, &mut rng);
        iteration += 1;
        if !changed && params.n_iterations < 0 {
            break;
        }
    }
    let n_communities = renumber_by_size(&mut membership);
    let quality = modularity(graph, &membership, params.resolution);
    Ok(Partition {
        membership,
        n_communities,
        quality,
    })
}

fn check_params(p: &LeidenParams) -> Result<()> {
    if !(p.resolution > 0.0 && p.resolution.is_finite()) {
        return Err(KernelError::param(
            "resolution",
            format!("{}: must be positive and finite", p.resolution),
        ));
    }
    if !(p.beta > 0.0 && p.beta.is_finite()) {
        return Err(KernelError::param(
            "beta",
            format!("{}: must be positive", p.beta),
        ));
    }
    if p.n_iterations == 0 {
        return Err(KernelError::param(
            "n_iterations",
            "0: at least 1, or negative to iterate until nothing changes",
        ));
    }
    Ok(())
}

/// The modularity of `membership` on `graph` at `resolution` (0 for a graph without edges).
/// Each row's sums are taken in parallel, then added up in row order: the same value on any
/// number of threads.
pub fn modularity(graph: &CsrMatrix<f32>, membership: &[u32], resolution: f64) -> f64 {
    let n_comm = membership
        .par_iter()
        .map(|&c| c as usize + 1)
        .max()
        .unwrap_or(0);
    // Per row: its weight inside its community, and its strength.
    let rows: Vec<(f64, f64)> = (0..graph.n_rows)
        .into_par_iter()
        .map(|v| {
            let (idx, w) = graph.row(v);
            let c = membership[v];
            idx.iter().zip(w).fold((0.0, 0.0), |(inside, k), (&u, &w)| {
                let w = w as f64;
                let same = membership[u as usize] == c;
                (if same { inside + w } else { inside }, k + w)
            })
        })
        .collect();
    let (mut inside, mut strength) = (vec![0.0f64; n_comm], vec![0.0f64; n_comm]);
    let mut total = 0.0;
    for (&c, &(i, k)) in membership.iter().zip(&rows) {
        inside[c as usize] += i;
        strength[c as usize] += k;
        total += k;
    }
    if total == 0.0 {
        return 0.0;
    }
    inside
        .iter()
        .zip(&strength)
        .map(|(i, k)| i - resolution * k * k / total)
        .sum::<f64>()
        / total
}

/// A weighted undirected graph in adjacency lists (both directions stored), self-loops apart.
struct Graph {
    indptr: Vec<usize>,
    indices: Vec<u32>,
    weights: Vec<f64>,
    /// Weight of the loop on each node, counted from both ends (as an aggregate's inner weight).
    self_loops: Vec<f64>,
    /// Strength of each node: its edges' weights plus its loop.
    strength: Vec<f64>,
    /// The total strength, `2m`.
    total: f64,
}

impl Graph {
    fn from_csr(m: &CsrMatrix<f32>) -> Graph {
        Graph::from_rows(m.n_rows, |v, indices, weights| {
            let mut self_loop = 0.0;
            let (idx, w) = m.row(v);
            for (&u, &w) in idx.iter().zip(w) {
                if u as usize == v {
                    self_loop += w as f64;
                } else if w > 0.0 {
                    indices.push(u);
                    weights.push(w as f64);
                }
            }
            self_loop
        })
    }

    fn with_edges(
        indptr: Vec<usize>,
        indices: Vec<u32>,
        weights: Vec<f64>,
        self_loops: Vec<f64>,
    ) -> Graph {
        let strength: Vec<f64> = (0..self_loops.len())
            .into_par_iter()
            .map(|v| weights[indptr[v]..indptr[v + 1]].iter().sum::<f64>() + self_loops[v])
            .collect();
        let total = strength.iter().sum();
        Graph {
            indptr,
            indices,
            weights,
            self_loops,
            strength,
            total,
        }
    }

    fn n(&self) -> usize {
        self.strength.len()
    }

    fn edges(&self, v: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let r = self.indptr[v]..self.indptr[v + 1];
        self.indices[r.clone()]
            .iter()
            .map(|&u| u as usize)
            .zip(self.weights[r].iter().copied())
    }

    /// The graph whose row `v` (of `n`) `row(v, indices, weights)` appends, returning the node's
    /// loop. Each row depends on its node alone, so the rows are made on every core, in runs of
    /// consecutive nodes each with its own buffers (and `row`'s scratch, made by `scratch`),
    /// then laid one after the other: the same graph as made in order.
    fn from_rows_with<S>(
        n: usize,
        scratch: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, usize, &mut Vec<u32>, &mut Vec<f64>) -> f64 + Sync,
    ) -> Graph {
        let run = n.div_ceil(2 * rayon::current_num_threads()).max(1);
        let runs: Vec<(Vec<usize>, Vec<u32>, Vec<f64>, Vec<f64>)> = (0..n)
            .step_by(run)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|first| {
                let mut s = scratch();
                let nodes = first..(first + run).min(n);
                let (mut ends, mut loops) = (Vec::with_capacity(nodes.len()), Vec::new());
                let (mut indices, mut weights) = (Vec::new(), Vec::new());
                for v in nodes {
                    loops.push(row(&mut s, v, &mut indices, &mut weights));
                    ends.push(indices.len());
                }
                (ends, indices, weights, loops)
            })
            .collect();
        let nnz: usize = runs.iter().map(|r| r.1.len()).sum();
        let mut indptr = Vec::with_capacity(n + 1);
        indptr.push(0);
        let (mut indices, mut weights) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        let mut self_loops = Vec::with_capacity(n);
        for (ends, i, w, loops) in runs {
            let base = indices.len();
            indptr.extend(ends.iter().map(|e| base + e));
            indices.extend_from_slice(&i);
            weights.extend_from_slice(&w);
            self_loops.extend_from_slice(&loops);
        }
        Graph::with_edges(indptr, indices, weights, self_loops)
    }

    /// [`Graph::from_rows_with`] for rows that need no scratch.
    fn from_rows(
        n: usize,
        row: impl Fn(usize, &mut Vec<u32>, &mut Vec<f64>) -> f64 + Sync,
    ) -> Graph {
        Graph::from_rows_with(n, || (), |_, v, i, w| row(v, i, w))
    }

    /// The graph of the communities of `membership` (numbered `0..n_comm`): one node each, the
    /// weights between them summed, the weight inside each its loop.
    fn aggregate(&self, membership: &[u32], n_comm: usize) -> Graph {
        let members = members_of(membership, n_comm);
        Graph::from_rows_with(
            n_comm,
            || Accumulator::new(n_comm),
            |acc, c, indices, weights| {
                let mut self_loop = 0.0;
                for &v in &members[c] {
                    self_loop += self.self_loops[v as usize];
                    for (u, w) in self.edges(v as usize) {
                        acc.add(membership[u] as usize, w);
                    }
                }
                for (d, w) in acc.drain() {
                    if d == c {
                        self_loop += w;
                    } else {
                        indices.push(d as u32);
                        weights.push(w);
                    }
                }
                self_loop
            },
        )
    }
}

/// The nodes of each community, in node order.
fn members_of(membership: &[u32], n_comm: usize) -> Vec<Vec<u32>> {
    let mut members = vec![Vec::new(); n_comm];
    for (v, &c) in membership.iter().enumerate() {
        members[c as usize].push(v as u32);
    }
    members
}

/// Sums of weights per community for one node's edges: a dense array and the list of the
/// communities touched, in the order first met (which is what ties are broken by).
struct Accumulator {
    sums: Vec<f64>,
    touched: Vec<usize>,
}

impl Accumulator {
    fn new(n: usize) -> Self {
        Accumulator {
            sums: vec![0.0; n],
            touched: Vec::new(),
        }
    }

    /// Adds `w > 0` (every stored weight is positive, so a zero sum means not yet touched).
    fn add(&mut self, c: usize, w: f64) {
        if self.sums[c] == 0.0 {
            self.touched.push(c);
        }
        self.sums[c] += w;
    }

    fn drain(&mut self) -> impl Iterator<Item = (usize, f64)> + '_ {
        let sums = &mut self.sums;
        self.touched
            .drain(..)
            .map(move |c| (c, std::mem::take(&mut sums[c])))
    }
}

/// One iteration of the algorithm from `membership` (updated); whether any node moved.
fn one_iteration(
    original: &Graph,
    membership: &mut [u32],
    params: &LeidenParams,
    rng: &mut SplitMix64,
) -> bool {
    let mut changed = false;
    let mut aggregated: Option<Graph> = None;
    // The aggregate node of each original node, and the partition of the aggregate's nodes.
    let mut node_of: Vec<u32> = (0..original.n() as u32).collect();
    let mut part: Vec<u32> = membership.to_vec();
    loop {
        let g = aggregated.as_ref().unwrap_or(original);
        changed |= move_nodes_fast(g, &mut part, params.resolution, rng);
        let n_comm = renumber(&mut part);
        if n_comm == g.n() {
            break;
        }
        let mut refined = if params.refine {
            refine(g, &part, n_comm, params, rng)
        } else {
            part.clone()
        };
        let n_refined = renumber(&mut refined);
        // Each refined community lies inside one community of `part`: the aggregate starts there.
        let mut next_part = vec![0u32; n_refined];
        for v in 0..g.n() {
            next_part[refined[v] as usize] = part[v];
        }
        for a in node_of.iter_mut() {
            *a = refined[*a as usize];
        }
        let next = g.aggregate(&refined, n_refined);
        aggregated = Some(next);
        part = next_part;
    }
    for (m, &a) in membership.iter_mut().zip(&node_of) {
        *m = part[a as usize];
    }
    changed
}

/// The local moving phase: nodes visited from a queue (first in a random order), each moved to
/// the community of its neighbours (or an empty one) that gains the most; the neighbours left
/// outside the new community are queued again. Whether any node moved.
fn move_nodes_fast(g: &Graph, part: &mut [u32], resolution: f64, rng: &mut SplitMix64) -> bool {
    let n = g.n();
    let scale = resolution / g.total;
    let mut community_strength = vec![0.0f64; n];
    let mut size = vec![0u32; n];
    for v in 0..n {
        community_strength[part[v] as usize] += g.strength[v];
        size[part[v] as usize] += 1;
    }
    let mut empty: Vec<u32> = (0..n as u32).filter(|&c| size[c as usize] == 0).collect();
    let mut queue: std::collections::VecDeque<u32> = rng.permutation(n).into();
    let mut queued = vec![true; n];
    let mut acc = Accumulator::new(n);
    let mut changed = false;
    while let Some(v) = queue.pop_front() {
        let v = v as usize;
        queued[v] = false;
        let current = part[v] as usize;
        let k = g.strength[v];
        for (u, w) in g.edges(v) {
            acc.add(part[u] as usize, w);
        }
        community_strength[current] -= k;
        size[current] -= 1;
        let gain = |c: usize, w: f64, s: &[f64]| w - k * s[c] * scale;
        let mut best = current;
        let mut best_gain = gain(current, acc.sums[current], &community_strength);
        for &c in &acc.touched {
            let g_c = gain(c, acc.sums[c], &community_strength);
            if g_c > best_gain {
                best = c;
                best_gain = g_c;
            }
        }
        if best_gain < 0.0 {
            // Alone in a new community gains 0.
            best = if size[current] == 0 {
                current
            } else {
                empty.pop().expect("a node left leaves a community free") as usize
            };
        }
        acc.drain().for_each(drop);
        community_strength[best] += k;
        size[best] += 1;
        if best != current {
            if size[current] == 0 {
                empty.push(current as u32);
            }
            part[v] = best as u32;
            changed = true;
            for (u, _) in g.edges(v) {
                if !queued[u] && part[u] as usize != best {
                    queued[u] = true;
                    queue.push_back(u as u32);
                }
            }
        }
    }
    changed
}

/// The refinement phase: inside each community of `part`, every node starts alone; in a random
/// order, each node still alone and well connected to its community joins a well-connected
/// sub-community of a non-negative gain, chosen with probability `exp(gain / beta)`.
fn refine(
    g: &Graph,
    part: &[u32],
    n_comm: usize,
    params: &LeidenParams,
    rng: &mut SplitMix64,
) -> Vec<u32> {
    let n = g.n();
    let scale = params.resolution / g.total;
    let mut comm_strength = vec![0.0f64; n_comm];
    for v in 0..n {
        comm_strength[part[v] as usize] += g.strength[v];
    }
    // Weight from each node to the rest of its community: the sub-communities' external weight.
    let mut external: Vec<f64> = (0..n)
        .into_par_iter()
        .map(|v| {
            g.edges(v)
                .filter(|&(u, _)| part[u] == part[v])
                .map(|(_, w)| w)
                .sum()
        })
        .collect();
    let mut refined: Vec<u32> = (0..n as u32).collect();
    let mut strength = g.strength.clone();
    let mut size = vec![1u32; n];
    let mut acc = Accumulator::new(n);
    let mut candidates: Vec<(usize, f64)> = Vec::new();
    let mut weights: Vec<f64> = Vec::new();
    for v in rng.permutation(n) {
        let v = v as usize;
        if size[refined[v] as usize] > 1 {
            continue;
        }
        let k = g.strength[v];
        let c_total = comm_strength[part[v] as usize];
        let well_connected = |ext: f64, s: f64| ext >= s * (c_total - s) * scale;
        if !well_connected(external[v], k) {
            continue;
        }
        for (u, w) in g.edges(v) {
            if part[u] == part[v] {
                acc.add(refined[u] as usize, w);
            }
        }
        let own = refined[v] as usize;
        candidates.clear();
        candidates.push((own, 0.0));
        for &s in &acc.touched {
            if s != own && well_connected(external[s], strength[s]) {
                let gain = acc.sums[s] - k * strength[s] * scale;
                if gain >= 0.0 {
                    candidates.push((s, gain));
                }
            }
        }
        let chosen = choose(&candidates, params.beta, rng, &mut weights);
        if chosen != own {
            let w_to_chosen = acc.sums[chosen];
            refined[v] = chosen as u32;
            strength[chosen] += k;
            strength[own] = 0.0;
            size[chosen] += 1;
            size[own] = 0;
            external[chosen] += external[own] - 2.0 * w_to_chosen;
        }
        acc.drain().for_each(drop);
    }
    refined
}

/// One of `candidates` (`(community, gain)`, the first the node's own), with probability
/// proportional to `exp(gain / beta)`; computed from the largest gain so nothing overflows.
/// `weights` is scratch for the candidates' terms.
fn choose(
    candidates: &[(usize, f64)],
    beta: f64,
    rng: &mut SplitMix64,
    weights: &mut Vec<f64>,
) -> usize {
    if candidates.len() == 1 {
        return candidates[0].0;
    }
    let max = candidates.iter().map(|c| c.1).fold(f64::MIN, f64::max);
    weights.clear();
    weights.extend(candidates.iter().map(|c| exp_or_zero((c.1 - max) / beta)));
    let total: f64 = weights.iter().sum();
    let mut r = rng.next_f64() * total;
    for (&(c, _), &w) in candidates.iter().zip(weights.iter()) {
        r -= w;
        if r < 0.0 {
            return c;
        }
    }
    candidates.last().expect("not empty").0
}

/// `x.exp()`, without the call where the result is exactly 0 (below -746 it rounds to zero):
/// `exp`'s underflow path is its slow one, and with beta 0.01 three in four of the refinement's
/// candidates take it on the second level of the 200k-cell demo's graph.
fn exp_or_zero(x: f64) -> f64 {
    if x < -746.0 {
        0.0
    } else {
        x.exp()
    }
}

/// Renumbers communities `0..n` in order of their first node; returns `n`.
fn renumber(part: &mut [u32]) -> usize {
    let mut map = vec![u32::MAX; part.len()];
    let mut n = 0u32;
    for c in part.iter_mut() {
        let m = &mut map[*c as usize];
        if *m == u32::MAX {
            *m = n;
            n += 1;
        }
        *c = *m;
    }
    n as usize
}

/// Renumbers communities by size, largest first (ties by first node); returns their count.
fn renumber_by_size(part: &mut [u32]) -> usize {
    let n = renumber(part);
    let mut size = vec![0usize; n];
    for &c in part.iter() {
        size[c as usize] += 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&c| (std::cmp::Reverse(size[c]), c));
    let mut rank = vec![0u32; n];
    for (r, &c) in order.iter().enumerate() {
        rank[c] = r as u32;
    }
    for c in part.iter_mut() {
        *c = rank[*c as usize];
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::graph;

    #[test]
    fn the_exp_shortcut_is_exp_bit_for_bit() {
        // Where the shortcut applies and across the subnormal range above it.
        for i in 0..200_000 {
            let x = -2000.0 + i as f64 * 0.0075;
            assert_eq!(exp_or_zero(x).to_bits(), x.exp().to_bits(), "{x}");
        }
        for x in [-746.0, -746.0 - 1e-9, -745.5, -745.13, f64::MIN, -1e300] {
            assert_eq!(exp_or_zero(x).to_bits(), x.exp().to_bits(), "{x}");
        }
    }

    /// `k` cliques of `size` nodes (weight 1), joined in a ring by single edges of `bridge`.
    fn ring_of_cliques(k: usize, size: usize, bridge: f32) -> CsrMatrix<f32> {
        let mut edges = Vec::new();
        for c in 0..k {
            for a in 0..size {
                for b in a + 1..size {
                    edges.push((c * size + a, c * size + b, 1.0));
                }
            }
            edges.push((c * size, ((c + 1) % k) * size + 1, bridge));
        }
        graph(k * size, &edges)
    }

    #[test]
    fn finds_the_cliques_of_a_ring() {
        let g = ring_of_cliques(8, 6, 0.1);
        let p = leiden(&g, &LeidenParams::default()).unwrap();
        assert_eq!(p.n_communities, 8);
        for c in 0..8 {
            let first = p.membership[c * 6];
            assert!(p.membership[c * 6..(c + 1) * 6].iter().all(|&m| m == first));
        }
        assert!((p.quality - modularity(&g, &p.membership, 1.0)).abs() < 1e-12);
        assert!(p.quality > 0.8, "{}", p.quality);
    }

    #[test]
    fn louvain_finds_the_cliques_and_leidens_quality() {
        let g = ring_of_cliques(8, 6, 0.1);
        let p = leiden(&g, &LeidenParams::louvain(1.0, 0)).unwrap();
        assert_eq!(p.n_communities, 8);
        let planted = crate::graph::tests::planted(6_000, 300, 0.7, 3);
        let louvain = leiden(&planted, &LeidenParams::louvain(1.0, 4)).unwrap();
        let leiden_q = leiden(&planted, &LeidenParams::default()).unwrap().quality;
        assert!(
            louvain.quality >= leiden_q - 0.005,
            "{} vs {leiden_q}",
            louvain.quality
        );
        assert_eq!(
            louvain,
            leiden(&planted, &LeidenParams::louvain(1.0, 4)).unwrap()
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_partition_and_resolution_matters() {
        let g = ring_of_cliques(12, 5, 0.5);
        let a = leiden(&g, &LeidenParams::default()).unwrap();
        let b = leiden(&g, &LeidenParams::default()).unwrap();
        assert_eq!(a, b);
        let coarse = leiden(
            &g,
            &LeidenParams {
                resolution: 0.05,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(coarse.n_communities < a.n_communities);
        let until_stable = leiden(
            &g,
            &LeidenParams {
                n_iterations: -1,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(until_stable.quality >= a.quality - 1e-12);
    }

    #[test]
    fn labels_are_numbered_by_size() {
        // A clique of 6 and one of 3, unconnected: the larger is community 0.
        let mut edges = Vec::new();
        for a in 0..3 {
            for b in a + 1..3 {
                edges.push((a, b, 1.0));
            }
        }
        for a in 3..9 {
            for b in a + 1..9 {
                edges.push((a, b, 1.0));
            }
        }
        let p = leiden(&graph(9, &edges), &LeidenParams::default()).unwrap();
        assert_eq!(p.membership, [1, 1, 1, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn beats_the_trivial_partitions_on_a_random_graph() {
        let mut rng = SplitMix64::new(3);
        let n = 400;
        let mut edges = Vec::new();
        // Four planted groups: dense inside, sparse between.
        for a in 0..n {
            for _ in 0..6 {
                let same = rng.next_f64() < 0.85;
                let b = if same {
                    (a / 100) * 100 + rng.below(100)
                } else {
                    rng.below(n)
                };
                if a != b {
                    edges.push((a.min(b), a.max(b), 0.2 + rng.next_f64() as f32));
                }
            }
        }
        edges.sort_by_key(|e| (e.0, e.1));
        edges.dedup_by_key(|e| (e.0, e.1));
        let g = graph(n, &edges);
        let p = leiden(&g, &LeidenParams::default()).unwrap();
        let planted: Vec<u32> = (0..n as u32).map(|v| v / 100).collect();
        assert!(
            p.quality >= modularity(&g, &planted, 1.0) - 0.01,
            "{}",
            p.quality
        );
        assert!(p.quality > modularity(&g, &vec![0; n], 1.0));
    }

    #[test]
    fn bad_parameters_and_graphs_are_named() {
        let g = ring_of_cliques(3, 4, 0.1);
        for (p, word) in [
            (
                LeidenParams {
                    resolution: 0.0,
                    ..Default::default()
                },
                "resolution",
            ),
            (
                LeidenParams {
                    n_iterations: 0,
                    ..Default::default()
                },
                "n_iterations",
            ),
        ] {
            assert!(leiden(&g, &p).unwrap_err().to_string().contains(word));
        }
        let rect = CsrMatrix::<f32>::zeros(3, 4);
        assert!(leiden(&rect, &LeidenParams::default()).is_err());
    }

    #[test]
    fn a_graph_without_edges_gives_singletons() {
        let g = CsrMatrix::<f32>::zeros(4, 4);
        let p = leiden(&g, &LeidenParams::default()).unwrap();
        assert_eq!(p.n_communities, 4);
        assert_eq!(p.quality, 0.0);
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// `LEIDEN_TIMING=cells cargo test --release -p sc-kernels --lib leiden::timing -- --ignored
    /// --nocapture`: a kNN-like graph of planted groups (15 neighbours a cell, 85% inside its
    /// group of 50,000), timed with the sequential algorithm and the parallel twin.
    #[test]
    #[ignore = "timing"]
    fn planted_groups() {
        let n: usize = std::env::var("LEIDEN_TIMING")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let g = crate::graph::tests::planted(n, 50_000, 0.85, 5);
        type Algorithm = fn(&CsrMatrix<f32>, &LeidenParams) -> Result<Partition>;
        for (name, algorithm) in [
            ("sequential", leiden as Algorithm),
            ("parallel twin", leiden_parallel as Algorithm),
        ] {
            let t = std::time::Instant::now();
            let p = algorithm(&g, &LeidenParams::default()).unwrap();
            // The labels' digest tells two builds' partitions apart (FNV-1a).
            let digest = p.membership.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
                (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
            });
            eprintln!(
                "{name}: {n} nodes, {} edges: {:.2} s, {} communities, modularity {:.17}, \
                 labels {digest:016x}",
                g.nnz(),
                t.elapsed().as_secs_f64(),
                p.n_communities,
                p.quality
            );
        }
    }
}
