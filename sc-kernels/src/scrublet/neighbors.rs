//! Scrublet's kNN classifier needs, for each cell of the manifold (observed cells, then
//! doublets), only how many doublets are among its `k_adj - 1` nearest other cells, not the
//! neighbours themselves. At a million cells `k_adj` is about 1,500 over 3 M points, which no
//! kNN that keeps its lists handles well; here each cell's candidates are scanned for that
//! count alone.
//!
//! - **The candidates** ([`Search`]): every other cell while there are at most
//!   [`EXACT_POINTS`] (exact), else an inverted file as scanpy's pynndescent is approximate
//!   from 2,731 cells: k-means lists of about `LIST_PER_K * k_adj` cells (the kNN's own
//!   `lists`), and each list's cells scan the lists nearest its centroid until they hold
//!   `CANDIDATES_PER_K * k_adj` cells.
//! - **The order**: squared distances in f64, summed dimension by dimension without fused
//!   multiply-adds (the GPU's twin, `neighbors_gpu.rs`, sums in the same order, so both get
//!   the same bits), ties by the smaller cell index.
//! - **The count**: the doublets (cells `>= n_obs`) among the first `k_adj - 1` candidates in
//!   that order; and whether any two cells coincide (a distance of 0), which scanpy's count
//!   depends on (`score.rs`).

use crate::neighbors::lists::{
    nearest_host, probe_table, refs_per_cell, train, training_sample, Lists,
};
use rayon::prelude::*;
use std::collections::BinaryHeap;

/// Most points (cells and doublets) whose candidates are every other point.
pub const EXACT_POINTS: usize = 32_768;
/// Cells per list of the inverted file, per neighbour (`k_adj`), at least [`MIN_LIST`].
const LIST_PER_K: usize = 4;
const MIN_LIST: usize = 2048;
/// Candidates each cell scans, per neighbour, at least (from at least [`MIN_PROBES`] lists).
const CANDIDATES_PER_K: usize = 12;
const MIN_PROBES: usize = 4;

/// Each cell's candidates: the cells of the lists its own list probes.
pub struct Search {
    pub(crate) lists: Lists,
    /// CSR over the lists: the lists whose cells list `l`'s cells scan.
    pub(crate) probe_ptr: Vec<u32>,
    pub(crate) probes: Vec<u32>,
}

impl Search {
    /// The candidates of the `n` points `x` (`d` values each) for `k_adj` neighbours: one list
    /// (exact) up to [`EXACT_POINTS`], else the inverted file trained on the host.
    pub fn host(x: &[f32], n: usize, d: usize, k_adj: usize) -> Search {
        Search::host_with(x, n, d, k_adj, list_count(n, k_adj))
    }

    /// [`Search::host`] with `n_lists` lists (1: exact).
    pub fn host_with(x: &[f32], n: usize, d: usize, k_adj: usize, n_lists: usize) -> Search {
        if n_lists <= 1 {
            return Search::exact(n);
        }
        let pts = training_sample(x, n, d, n_lists);
        let centroids = train(&pts, d, n_lists, |c| Ok(nearest_host(&pts, c, d)))
            .expect("the host's assignments do not fail");
        Search::of(&nearest_host(x, &centroids, d), &centroids, d, k_adj)
    }

    /// Every point a candidate of every point.
    pub fn exact(n: usize) -> Search {
        Search {
            lists: Lists::new(&vec![0; n], 1),
            probe_ptr: vec![0, 1],
            probes: vec![0],
        }
    }

    /// The search of the lists `assign` (each point's) with their `centroids`.
    pub(crate) fn of(assign: &[u32], centroids: &[f32], d: usize, k_adj: usize) -> Search {
        let lists = Lists::new(assign, centroids.len() / d);
        let (probe_ptr, probes) = probe_table(
            centroids,
            d,
            &lists.sizes,
            MIN_PROBES,
            CANDIDATES_PER_K * k_adj,
        );
        Search {
            lists,
            probe_ptr,
            probes,
        }
    }

    /// The positions of list `l`'s cells.
    fn list(&self, l: usize) -> std::ops::Range<usize> {
        let s = self.lists.starts[l] as usize;
        s..s + self.lists.sizes[l] as usize
    }

    /// The candidates' positions of list `l`'s cells, list by list.
    fn candidates(&self, l: usize) -> impl Iterator<Item = usize> + '_ {
        self.probes[self.probe_ptr[l] as usize..self.probe_ptr[l + 1] as usize]
            .iter()
            .flat_map(|&m| self.list(m as usize))
    }

    /// Candidates scanned per point, on average.
    pub fn candidates_per_point(&self) -> f64 {
        let n: usize = self.lists.sizes.iter().map(|&s| s as usize).sum();
        refs_per_cell(&self.lists.sizes, &self.probe_ptr, &self.probes, n)
    }
}

/// Lists for `n` points and `k_adj` neighbours: 1 (exact) up to [`EXACT_POINTS`].
pub(crate) fn list_count(n: usize, k_adj: usize) -> usize {
    if n <= EXACT_POINTS {
        1
    } else {
        (n / (LIST_PER_K * k_adj).max(MIN_LIST)).max(1)
    }
}

/// What the scan found.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// Each point's doublets among its `k_adj - 1` nearest other candidates.
    pub counts: Vec<u32>,
    /// Whether two points coincide (a candidate at distance 0).
    pub coincident: bool,
    /// With `lists`: each observed cell's doublet neighbours among them (doublet rows).
    pub lists: Option<Vec<Vec<u32>>>,
}

/// Points whose distances are computed together (each chunk of candidates is read once for
/// them), and candidates per chunk (a chunk of all dimensions stays in the core's cache).
const QUERY_BLOCK: usize = 16;
const CANDIDATE_CHUNK: usize = 512;

/// One point's count, whether a candidate coincides with it, and (when asked) its doublet
/// neighbours.
struct Found {
    cell: u32,
    count: u32,
    zero: bool,
    list: Vec<u32>,
}

/// The counts of the `n` points `x` (`d` values each; the first `n_obs` observed cells) for
/// `k_adj` neighbours, over `search`'s candidates, on every core. With `lists`, also each
/// observed cell's doublet neighbours.
pub fn count_host(
    x: &[f32],
    d: usize,
    n_obs: usize,
    k_adj: usize,
    search: &Search,
    lists: bool,
) -> Counted {
    let n = x.len() / d.max(1);
    let keep = k_adj.saturating_sub(1);
    let perm = &search.lists.perm;
    let found: Vec<Found> = (0..search.lists.sizes.len())
        .into_par_iter()
        .flat_map_iter(|l| {
            let cand: Vec<u32> = search
                .candidates(l)
                .map(|p| perm[p])
                .filter(|&c| c != u32::MAX)
                .collect();
            // The candidates dimension by dimension, so that the distance loops run along them.
            let m = cand.len();
            let mut ct = vec![0f64; d * m];
            for (j, &c) in cand.iter().enumerate() {
                for t in 0..d {
                    ct[t * m + j] = x[c as usize * d + t] as f64;
                }
            }
            let queries: Vec<u32> = search.list(l).map(|p| perm[p]).collect();
            let scan = Scan {
                x,
                d,
                n_obs,
                keep,
                lists,
                cand: &cand,
                ct: &ct,
            };
            queries
                .par_chunks(QUERY_BLOCK)
                .flat_map_iter(|block| scan.block(block))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut counts = vec![0u32; n];
    let mut coincident = false;
    let mut out_lists = lists.then(|| vec![Vec::new(); n_obs]);
    for f in found {
        let i = f.cell as usize;
        counts[i] = f.count;
        coincident |= f.zero;
        if let (Some(o), true) = (out_lists.as_mut(), i < n_obs) {
            o[i] = f.list;
        }
    }
    Counted {
        counts,
        coincident,
        lists: out_lists,
    }
}

/// One list's candidates, scanned for blocks of its points.
struct Scan<'a> {
    x: &'a [f32],
    d: usize,
    n_obs: usize,
    keep: usize,
    lists: bool,
    cand: &'a [u32],
    /// The candidates' coordinates, dimension by dimension (`d x m`).
    ct: &'a [f64],
}

impl Scan<'_> {
    /// The points `block`: their distances to every candidate, then each one's count.
    fn block(&self, block: &[u32]) -> Vec<Found> {
        let m = self.cand.len();
        let mut dist = vec![0f64; block.len() * m];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            unsafe { self.distances_avx2(block, &mut dist) };
        } else {
            self.distances(block, &mut dist);
        }
        #[cfg(not(target_arch = "x86_64"))]
        self.distances(block, &mut dist);
        block
            .iter()
            .enumerate()
            .map(|(q, &i)| self.point(i, &dist[q * m..(q + 1) * m]))
            .collect()
    }

    /// [`Scan::distances`] compiled for AVX2: four f64 lanes, the same operations in the same
    /// order (no fused multiply-adds), so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn distances_avx2(&self, block: &[u32], dist: &mut [f64]) {
        self.distances(block, dist)
    }

    /// Each point of `block` against every candidate, chunk by chunk of candidates.
    #[inline(always)]
    fn distances(&self, block: &[u32], dist: &mut [f64]) {
        let (d, m) = (self.d, self.cand.len());
        for c0 in (0..m).step_by(CANDIDATE_CHUNK) {
            let c1 = (c0 + CANDIDATE_CHUNK).min(m);
            for (q, &i) in block.iter().enumerate() {
                let row = &mut dist[q * m + c0..q * m + c1];
                let xi = &self.x[i as usize * d..(i as usize + 1) * d];
                for (t, &p) in xi.iter().enumerate() {
                    let p = p as f64;
                    for (s, &v) in row.iter_mut().zip(&self.ct[t * m + c0..t * m + c1]) {
                        let u = p - v;
                        *s += u * u;
                    }
                }
            }
        }
    }

    /// Point `i`'s count from its distance to each candidate (itself among them or not): the
    /// `keep` smallest (key, index) pairs kept in a bounded max-heap, the doublets among them
    /// counted.
    fn point(&self, i: u32, dist: &[f64]) -> Found {
        let mut zero = false;
        let mut near: BinaryHeap<(u64, u32)> = BinaryHeap::with_capacity(self.keep + 1);
        for (&j, s) in self.cand.iter().zip(dist) {
            if j == i {
                continue;
            }
            let key = (s.to_bits(), j);
            zero |= key.0 == 0;
            if near.len() < self.keep {
                near.push(key);
            } else if let Some(mut top) = near.peek_mut() {
                if key < *top {
                    *top = key;
                }
            }
        }
        let n_obs = self.n_obs as u32;
        let count = near.iter().filter(|&&(_, j)| j >= n_obs).count() as u32;
        let list = if self.lists && i < n_obs {
            let mut doublets: Vec<(u64, u32)> =
                near.into_iter().filter(|&(_, j)| j >= n_obs).collect();
            doublets.sort_unstable();
            doublets.into_iter().map(|(_, j)| j - n_obs).collect()
        } else {
            Vec::new()
        };
        Found {
            cell: i,
            count,
            zero,
            list,
        }
    }
}
