//! Approximate kNN by an inverted file ("IVF-flat"), for data too large for the exact scan's
//! `O(n^2)` work.
//!
//! The index: k-means (Lloyd, `TRAIN_ITERS` rounds) on a seeded sample of `TRAIN_PER_LIST`
//! cells per list gives `n_lists` centroids; every cell goes to the list of its nearest
//! centroid. The search is blocked by list: the cells of one list are queried together
//! against the lists of the `n_probes` centroids nearest to their own list's centroid (their
//! own first; more where those hold fewer than the candidates kept), so a block of 64 queries
//! shares every reference it loads, as in the exact scan. Within the probed lists the search is
//! exact: the same f32 candidates and f64 refinement as [`super::knn_exact`], so a neighbour
//! that is found has its exact distance, and the result differs from the exact kNN only where
//! a true neighbour lies in a list that was not probed.
//!
//! The scan's result then runs [`descent`](super::descent)'s local join (up to
//! [`IvfParams::descent_rounds`] rounds, default [`super::descent::DEFAULT_ROUNDS`]): the cells
//! that found a cell bring it their own neighbours. Each round is tried on the recall sample
//! first and runs only where it raises the sample's recall by [`DESCENT_MIN_GAIN`] or more: on
//! real cells (pbmc68k's PCs) a round finds much of what few probes miss, on the generated
//! atlas's blobs it found 0.5% more in 2.7 s (`benches/RESULTS.md`).
//!
//! Recall is measured, not assumed: [`recall`] compares the result with the exact kNN of a
//! seeded sample of [`RECALL_CELLS`] cells (exact on the device on the GPU), after the scan and
//! after the local join.
//!
//! On the GPU the lists are laid out one after another (each starting at a multiple of 4, the
//! scan's vector loads), `ivf_scan` runs one block per 64 cells of a list, and `knn_refine`
//! picks the neighbours; the centroid assignments run on the exact scan's kernel (`k = 1`).
//! Several GPUs each build the same index (the same kernels on the same data) and take a
//! share of the blocks.

use super::descent::{descend_gpu, descend_host, Trial, DEFAULT_ROUNDS};
use super::gpu::{refine, scan_table, Products, RefTable, DK, QT, RT, SRC, THREADS};
use super::host_scan::{exact_best, products, Candidates};
use super::ivf_tensor;
use super::{check_finite, check_k, Knn, EXTRA};
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use crate::random::SplitMix64;
use faer::MatRef;
use rayon::prelude::*;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

/// Training cells per list (k-means on a sample).
const TRAIN_PER_LIST: usize = 64;
/// Lloyd rounds.
const TRAIN_ITERS: usize = 10;
/// Seed of the training sample, the empty lists' new centroids and the recall sample.
const SEED: u64 = 0x1f_5eed;
/// Cells whose exact kNN measures the recall.
pub const RECALL_CELLS: usize = 2048;

/// Most rounds of the local join a search takes (each round after the first finds little).
pub const MAX_DESCENT_ROUNDS: usize = 8;

/// The rise of the sample's recall@k for which a round of the local join runs.
pub const DESCENT_MIN_GAIN: f64 = 0.01;

/// recall@k that the probes are chosen to reach when no probe count is given.
pub const DEFAULT_TARGET_RECALL: f64 = 0.95;

/// The inverted file's size; `None`: the default for the data (see [`IvfParams::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct IvfParams {
    pub n_lists: Option<usize>,
    /// Lists each list's cells probe; `None`: the fewest that reach `target_recall` on the
    /// recall sample (see [`probes_for`]).
    pub n_probes: Option<usize>,
    /// The recall@k the chosen probes reach on the sample (without `n_probes`); `None`:
    /// [`DEFAULT_TARGET_RECALL`]. The scan's recall: the local join then raises it.
    pub target_recall: Option<f64>,
    /// Rounds of NN-descent's local join after the scan ([`super::descent`]); `None`:
    /// [`DEFAULT_ROUNDS`], 0: the scan's result as it is.
    pub descent_rounds: Option<usize>,
}

/// How many lists are probed: a given count, or the fewest that reach a recall on the sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probes {
    Fixed(usize),
    Target(f64),
}

/// Lists and probes settled for `n` cells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfShape {
    pub n_lists: usize,
    pub probes: Probes,
    pub descent_rounds: usize,
}

impl IvfParams {
    /// The shape for `n` cells: `n_lists` defaults to `sqrt(n)` (at least 1), the probes to
    /// those reaching [`DEFAULT_TARGET_RECALL`]; a named error for 0, more lists than cells,
    /// more probes than lists, a recall outside (0, 1], or both a probe count and a recall.
    pub fn settle(&self, n: usize) -> Result<IvfShape> {
        let n_lists = self
            .n_lists
            .unwrap_or_else(|| ((n as f64).sqrt().round() as usize).clamp(1, n.max(1)));
        if n_lists == 0 || n_lists > n {
            return Err(KernelError::param(
                "n_lists",
                format!("must be between 1 and the number of cells ({n}), got {n_lists}"),
            ));
        }
        let probes = match (self.n_probes, self.target_recall) {
            (Some(_), Some(_)) => {
                return Err(KernelError::param(
                    "target_recall",
                    "n_probes and target_recall both choose the probes: give one",
                ))
            }
            (Some(p), None) if p == 0 || p > n_lists => {
                return Err(KernelError::param(
                    "n_probes",
                    format!("must be between 1 and n_lists ({n_lists}), got {p}"),
                ))
            }
            (Some(p), None) => Probes::Fixed(p),
            (None, Some(t)) if !(t > 0.0 && t <= 1.0) => {
                return Err(KernelError::param(
                    "target_recall",
                    format!("must be above 0 and at most 1, got {t}"),
                ))
            }
            (None, t) => Probes::Target(t.unwrap_or(DEFAULT_TARGET_RECALL)),
        };
        let descent_rounds = self.descent_rounds.unwrap_or(DEFAULT_ROUNDS);
        if descent_rounds > MAX_DESCENT_ROUNDS {
            return Err(KernelError::param(
                "descent_rounds",
                format!("must be at most {MAX_DESCENT_ROUNDS}, got {descent_rounds}"),
            ));
        }
        Ok(IvfShape {
            n_lists,
            probes,
            descent_rounds,
        })
    }
}

/// What the inverted file did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfStats {
    pub n_lists: usize,
    /// Lists each list's cells probed (at least; more where those held too few cells).
    pub n_probes: usize,
    /// The recall the probes were chosen for; `None`: a given count.
    pub target_recall: Option<f64>,
    /// References scanned per cell, on average.
    pub refs_per_cell: f64,
    pub recall: Option<Recall>,
    /// `Some(q)`: the probed lists were scanned on tensor cores, and `q` cells, not certified
    /// by the FP16 bound, scanned again in f32; `None`: in f32 (or on the CPU).
    pub f32_queries: Option<usize>,
    /// Rounds of the local join run after the scan.
    pub descent_rounds: usize,
    /// The scan's recall (before the local join; `recall` is the result's).
    pub scan_recall: Option<Recall>,
    /// Neighbours the local join put in rows that did not hold them.
    pub descent_replaced: usize,
    /// The sample's recall gain of the round that was tried and not run (under
    /// [`DESCENT_MIN_GAIN`]); `None`: every round asked for ran (or none was asked for).
    pub descent_declined: Option<f64>,
}

/// recall@k of an approximate kNN: the share of the exact kNN's `k - 1` other neighbours of
/// the sampled cells that it found (a neighbour tied with the exact k-th counts as found).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recall {
    pub value: f64,
    pub cells: usize,
    pub k: usize,
}

/// The approximate kNN (self included) of the rows of `x` on the CPU, and what it did
/// (recall included).
pub fn knn_ivf<T: crate::real::Real>(
    x: &DenseMatrix<T>,
    k: usize,
    params: &IvfParams,
) -> Result<(Knn, IvfStats)> {
    let (n, d) = (x.n_rows, x.n_cols);
    check_k(n, k)?;
    check_finite(x)?;
    let shape = params.settle(n)?;
    let xf: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
    let kc = (k + EXTRA).min(n);
    let pts = training_sample(&xf, n, d, shape.n_lists);
    let centroids = train(&pts, d, shape.n_lists, |c| Ok(nearest_host(&pts, c, d)))?;
    let assign = nearest_host(&xf, &centroids, d);
    let lists = Lists::new(&assign, shape.n_lists);
    let norms = row_norms_host(&xf, d);
    let sample = exact_sample_host(&xf, &norms, n, d, k);
    let n_probes = settle_probes(shape.probes, &sample, &assign, &centroids, d);
    let (probe_ptr, probes) = probe_table(&centroids, d, &lists.sizes, n_probes, kc);
    // The cells in list order once (as the GPU lays them out), padding left out: each list is
    // then one block of rows, its norms one slice.
    let order: Vec<u32> = lists
        .perm
        .iter()
        .copied()
        .filter(|&c| c != u32::MAX)
        .collect();
    let xo = gather(&xf, d, &order);
    let no: Vec<f32> = order.iter().map(|&c| norms[c as usize]).collect();
    let mut first = vec![0usize; shape.n_lists + 1];
    for (l, &s) in lists.sizes.iter().enumerate() {
        first[l + 1] = first[l] + s as usize;
    }
    let list = |l: usize| first[l]..first[l + 1];
    let mut indices = vec![0u32; n * k];
    let mut distances = vec![0f32; n * k];
    let rows: Vec<(&[u32], Vec<u32>, Vec<f32>)> = (0..shape.n_lists)
        .into_par_iter()
        .map(|l| {
            let (qr, queries) = (list(l), &order[list(l)]);
            let a = MatRef::from_row_major_slice(&xo[qr.start * d..qr.end * d], qr.len(), d);
            let mut cand = Candidates::new(queries.len(), kc);
            for &p in &probes[probe_ptr[l] as usize..probe_ptr[l + 1] as usize] {
                let rr = list(p as usize);
                let b = MatRef::from_row_major_slice(&xo[rr.start * d..rr.end * d], rr.len(), d);
                let prod = products(b, a);
                cand.offer(prod.as_ref(), &no[rr.clone()], |j| order[rr.start + j]);
            }
            let (mut oi, mut od) = (vec![0u32; queries.len() * k], vec![0f32; queries.len() * k]);
            for (q, c) in cand.lists.iter().enumerate() {
                let (i, dd) = (&mut oi[q * k..(q + 1) * k], &mut od[q * k..(q + 1) * k]);
                exact_best(&xf, d, queries[q] as usize, c.iter().map(|e| e.1), i, dd);
            }
            (queries, oi, od)
        })
        .collect();
    for (cells, oi, od) in rows {
        for (q, &c) in cells.iter().enumerate() {
            let c = c as usize;
            indices[c * k..(c + 1) * k].copy_from_slice(&oi[q * k..(q + 1) * k]);
            distances[c * k..(c + 1) * k].copy_from_slice(&od[q * k..(q + 1) * k]);
        }
    }
    let knn = Knn {
        n_obs: n,
        k,
        indices,
        distances,
    };
    let scan_recall = recall(&sample, &knn);
    let mut gate = Gate::new(&sample, scan_recall.value);
    let mut worth = |_: &[u32], dist: &[f32]| gate.worth(dist);
    let trial = Trial {
        cells: &sample.cells,
        worth: &mut worth,
    };
    let (knn, done) = descend_host(&xf, d, knn, shape.descent_rounds, Some(trial));
    let stats = IvfStats {
        n_lists: shape.n_lists,
        n_probes,
        target_recall: target_of(shape.probes),
        refs_per_cell: refs_per_cell(&lists.sizes, &probe_ptr, &probes, n),
        recall: Some(recall(&sample, &knn)),
        f32_queries: None,
        descent_rounds: done.rounds,
        scan_recall: Some(scan_recall),
        descent_replaced: done.replaced,
        descent_declined: gate.declined,
    };
    Ok((knn, stats))
}

/// The exact kNN of a seeded sample of the cells: what [`recall`] compares with.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleKnn {
    pub cells: Vec<u32>,
    pub k: usize,
    pub indices: Vec<u32>,
    pub distances: Vec<f32>,
}

/// The sample's cells: [`RECALL_CELLS`] of the `n` (all of them when fewer), seeded.
fn recall_cells(n: usize) -> Vec<u32> {
    sample_rows(n, RECALL_CELLS, SEED ^ 0x7ec0)
}

/// recall@k of `approx` against the exact kNN of a sample of its cells.
pub fn recall(sample: &SampleKnn, approx: &Knn) -> Recall {
    recall_of(sample, |_, c| approx.row(c as usize).1)
}

/// recall@k of the rows whose distances `dist(s, cell)` gives for the sample's `s`-th cell.
fn recall_of<'a>(sample: &SampleKnn, dist: impl Fn(usize, u32) -> &'a [f32]) -> Recall {
    let k = sample.k;
    let mut found = 0usize;
    for (s, &c) in sample.cells.iter().enumerate() {
        let kth = sample.distances[(s + 1) * k - 1];
        found += dist(s, c)[1..]
            .iter()
            .filter(|&&v| v <= kth)
            .count()
            .min(k - 1);
    }
    let total = sample.cells.len() * (k - 1);
    Recall {
        value: if total == 0 {
            1.0
        } else {
            found as f64 / total as f64
        },
        cells: sample.cells.len(),
        k,
    }
}

/// Whether a round of the local join runs: its rows for the recall sample (a trial) must raise
/// the sample's recall by [`DESCENT_MIN_GAIN`].
struct Gate<'a> {
    sample: &'a SampleKnn,
    recall: f64,
    declined: Option<f64>,
}

impl<'a> Gate<'a> {
    fn new(sample: &'a SampleKnn, recall: f64) -> Self {
        Gate {
            sample,
            recall,
            declined: None,
        }
    }

    /// The trial's distances (`k` per sampled cell, in the sample's order).
    fn worth(&mut self, dist: &[f32]) -> bool {
        let k = self.sample.k;
        let after = recall_of(self.sample, |s, _| &dist[s * k..(s + 1) * k]).value;
        let gain = after - self.recall;
        if gain >= DESCENT_MIN_GAIN {
            self.recall = after;
            true
        } else {
            self.declined = Some(gain);
            false
        }
    }
}

/// The sample's exact kNN on the CPU.
fn exact_sample_host(xf: &[f32], norms: &[f32], n: usize, d: usize, k: usize) -> SampleKnn {
    let cells = recall_cells(n);
    let kc = (k + EXTRA).min(n);
    let qx = gather(xf, d, &cells);
    let a = MatRef::from_row_major_slice(&qx, cells.len(), d);
    const REFS: usize = 4096;
    let parts: Vec<Candidates> = (0..n.div_ceil(REFS))
        .into_par_iter()
        .map(|b| {
            let r0 = b * REFS;
            let nr = REFS.min(n - r0);
            let rb = MatRef::from_row_major_slice(&xf[r0 * d..(r0 + nr) * d], nr, d);
            let prod = products(rb, a);
            let mut c = Candidates::new(cells.len(), kc);
            c.offer(prod.as_ref(), &norms[r0..r0 + nr], |j| (r0 + j) as u32);
            c
        })
        .collect();
    let cand: Vec<Vec<u32>> = (0..cells.len())
        .map(|q| {
            parts
                .iter()
                .flat_map(|p| p.lists[q].iter().map(|e| e.1))
                .collect()
        })
        .collect();
    exact_rows(xf, d, k, cells, &cand)
}

/// The exact best `k` of each sampled cell's candidates (ids of cells; ~0: none).
fn exact_rows(xf: &[f32], d: usize, k: usize, cells: Vec<u32>, cand: &[Vec<u32>]) -> SampleKnn {
    let mut indices = vec![0u32; cells.len() * k];
    let mut distances = vec![0f32; cells.len() * k];
    indices
        .par_chunks_mut(k)
        .zip(distances.par_chunks_mut(k))
        .enumerate()
        .for_each(|(s, (oi, od))| {
            let c = cand[s].iter().copied().filter(|&j| j != u32::MAX);
            exact_best(xf, d, cells[s] as usize, c, oi, od);
        });
    SampleKnn {
        cells,
        k,
        indices,
        distances,
    }
}

/// The cells stored list by list: list `l` holds positions `starts[l] .. starts[l] + sizes[l]`
/// (starts a multiple of 4), `perm[position]` the cell (~0 in the padding between lists).
pub(super) struct Lists {
    pub perm: Vec<u32>,
    pub starts: Vec<u64>,
    pub sizes: Vec<u32>,
}

impl Lists {
    fn new(assign: &[u32], n_lists: usize) -> Lists {
        let mut sizes = vec![0u32; n_lists];
        for &a in assign {
            sizes[a as usize] += 1;
        }
        let mut starts = Vec::with_capacity(n_lists);
        let mut end = 0u64;
        for &s in &sizes {
            starts.push(end);
            end += (s as u64).div_ceil(4) * 4;
        }
        let mut perm = vec![u32::MAX; end as usize];
        let mut fill = starts.clone();
        for (i, &a) in assign.iter().enumerate() {
            perm[fill[a as usize] as usize] = i as u32;
            fill[a as usize] += 1;
        }
        Lists {
            perm,
            starts,
            sizes,
        }
    }

    /// The blocks of the scan: (list, first position) per `QT` cells of a list.
    fn tiles(&self) -> Vec<u32> {
        let mut tiles = Vec::new();
        for (l, (&s, &z)) in self.starts.iter().zip(&self.sizes).enumerate() {
            let mut p = s;
            while p < s + z as u64 {
                tiles.extend([l as u32, p as u32]);
                p += QT as u64;
            }
        }
        tiles
    }
}

/// Every list in the order list `l`'s cells probe them: `l` itself, then the others by the
/// distance of their centroid to `l`'s (f64, ties by index).
fn probe_order(centroids: &[f32], d: usize, l: usize) -> Vec<u32> {
    let n_lists = centroids.len() / d;
    let cl = &centroids[l * d..(l + 1) * d];
    let mut order: Vec<(f64, u32)> = (0..n_lists)
        .filter(|&m| m != l)
        .map(|m| {
            let cm = &centroids[m * d..(m + 1) * d];
            let s: f64 = cl
                .iter()
                .zip(cm)
                .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                .sum();
            (s, m as u32)
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    std::iter::once(l as u32)
        .chain(order.into_iter().map(|(_, m)| m))
        .collect()
}

/// The lists each list's cells probe (CSR: `probes[ptr[l] .. ptr[l + 1]]`): the first
/// `n_probes` of [`probe_order`], and on until they hold `min_refs` cells (the candidates
/// kept) or every list is probed.
pub(super) fn probe_table(
    centroids: &[f32],
    d: usize,
    sizes: &[u32],
    n_probes: usize,
    min_refs: usize,
) -> (Vec<u32>, Vec<u32>) {
    let rows: Vec<Vec<u32>> = (0..sizes.len())
        .into_par_iter()
        .map(|l| {
            let mut row = Vec::with_capacity(n_probes);
            let mut refs = 0usize;
            for m in probe_order(centroids, d, l) {
                if row.len() >= n_probes && refs >= min_refs {
                    break;
                }
                row.push(m);
                refs += sizes[m as usize] as usize;
            }
            row
        })
        .collect();
    let mut ptr = vec![0u32];
    let mut probes = Vec::new();
    for r in rows {
        probes.extend(r);
        ptr.push(probes.len() as u32);
    }
    (ptr, probes)
}

/// The probe count of `probes`: a given one, or [`probes_for`] its target on `sample`.
fn settle_probes(
    probes: Probes,
    sample: &SampleKnn,
    assign: &[u32],
    centroids: &[f32],
    d: usize,
) -> usize {
    match probes {
        Probes::Fixed(p) => p,
        Probes::Target(t) => probes_for(t, sample, assign, centroids, d),
    }
}

fn target_of(probes: Probes) -> Option<f64> {
    match probes {
        Probes::Fixed(_) => None,
        Probes::Target(t) => Some(t),
    }
}

/// The fewest probes with which the search finds `target` of the sample's exact neighbours.
/// Within the probed lists the search is exact, so a sampled cell of list `l` finds its true
/// neighbour of list `m` exactly when `m` is among `l`'s probes: with `m`'s place in
/// [`probe_order`] plus one. The `target` quantile of those counts over the sample is the
/// answer, and the recall then measured on the same sample is at least `target` (neighbours
/// tied with the k-th aside).
pub fn probes_for(
    target: f64,
    sample: &SampleKnn,
    assign: &[u32],
    centroids: &[f32],
    d: usize,
) -> usize {
    let (k, n_lists) = (sample.k, centroids.len() / d);
    let mut by_list: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (s, &c) in sample.cells.iter().enumerate() {
        by_list.entry(assign[c as usize]).or_default().push(s);
    }
    let by_list: Vec<(u32, Vec<usize>)> = by_list.into_iter().collect();
    let mut need: Vec<u32> = by_list
        .par_iter()
        .flat_map_iter(|(l, members)| {
            let mut place = vec![0u32; n_lists];
            for (r, m) in probe_order(centroids, d, *l as usize)
                .into_iter()
                .enumerate()
            {
                place[m as usize] = r as u32 + 1;
            }
            let rows = members.iter().flat_map(move |&s| {
                sample.indices[s * k + 1..(s + 1) * k]
                    .iter()
                    .map(|&j| assign[j as usize])
            });
            rows.map(move |m| place[m as usize]).collect::<Vec<_>>()
        })
        .collect();
    if need.is_empty() {
        return 1;
    }
    let at = ((target * need.len() as f64).ceil() as usize).clamp(1, need.len()) - 1;
    let (_, p, _) = need.select_nth_unstable(at);
    (*p as usize).max(1)
}

/// References scanned per cell, on average.
pub(super) fn refs_per_cell(sizes: &[u32], ptr: &[u32], probes: &[u32], n: usize) -> f64 {
    let total: f64 = (0..sizes.len())
        .map(|l| {
            let refs: u64 = probes[ptr[l] as usize..ptr[l + 1] as usize]
                .iter()
                .map(|&p| sizes[p as usize] as u64)
                .sum();
            sizes[l] as f64 * refs as f64
        })
        .sum();
    total / n.max(1) as f64
}

/// `m` distinct rows of `n` in order (all when `m >= n`), one at a seeded place in each of
/// `m` equal strides: spread over the whole file (cells stored batch by batch are all
/// sampled), in `O(m)`.
fn sample_rows(n: usize, m: usize, seed: u64) -> Vec<u32> {
    if m >= n {
        return (0..n as u32).collect();
    }
    let mut rng = SplitMix64::new(seed);
    (0..m)
        .map(|i| {
            let (lo, hi) = (i * n / m, (i + 1) * n / m);
            (lo + rng.below(hi - lo)) as u32
        })
        .collect()
}

/// The rows `rows` of `xf` (`d` values each), one after another.
fn gather(xf: &[f32], d: usize, rows: &[u32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * d);
    for &r in rows {
        out.extend_from_slice(&xf[r as usize * d..(r as usize + 1) * d]);
    }
    out
}

fn row_norms_host(xf: &[f32], d: usize) -> Vec<f32> {
    xf.par_chunks(d.max(1))
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// The nearest centroid of each point (f32 `|c|^2 - 2 p.c`, ties by the smaller index), as
/// the GPU's scan with `k = 1`; the products by blocks of matrix products.
fn nearest_host(points: &[f32], centroids: &[f32], d: usize) -> Vec<u32> {
    const BLOCK: usize = 1024;
    let cn = row_norms_host(centroids, d);
    let nl = cn.len();
    let c = MatRef::from_row_major_slice(centroids, nl, d);
    points
        .par_chunks(BLOCK * d.max(1))
        .flat_map_iter(|block| {
            let cn = &cn;
            let nb = block.len() / d.max(1);
            let p = MatRef::from_row_major_slice(block, nb, d);
            let prod = products(c, p);
            (0..nb).map(move |q| {
                let col = prod.as_ref().col(q).try_as_col_major().unwrap().as_slice();
                let mut best = (f32::INFINITY, 0u32);
                for (l, (&nc, &dot)) in cn.iter().zip(col).enumerate() {
                    let v = nc - 2.0 * dot;
                    if v < best.0 {
                        best = (v, l as u32);
                    }
                }
                best.1
            })
        })
        .collect()
}

/// The k-means training points: a seeded sample of the `n` cells of `xf`, `TRAIN_PER_LIST`
/// per list (every cell when fewer).
fn training_sample(xf: &[f32], n: usize, d: usize, n_lists: usize) -> Vec<f32> {
    gather(xf, d, &sample_rows(n, TRAIN_PER_LIST * n_lists, SEED))
}

/// k-means centroids (`n_lists x d`) of the training points `pts`; `nearest` assigns them to
/// centroids (the CPU's or the GPU's).
fn train(
    pts: &[f32],
    d: usize,
    n_lists: usize,
    mut nearest: impl FnMut(&[f32]) -> Result<Vec<u32>>,
) -> Result<Vec<f32>> {
    let m = pts.len() / d;
    // Evenly spaced training points start the centroids.
    let mut centroids = Vec::with_capacity(n_lists * d);
    for l in 0..n_lists {
        let p = l * m / n_lists;
        centroids.extend_from_slice(&pts[p * d..(p + 1) * d]);
    }
    let mut rng = SplitMix64::new(SEED ^ 0xe3);
    for _ in 0..TRAIN_ITERS {
        let assign = nearest(&centroids)?;
        let (order, starts) = crate::group_by::group_by_key(&assign, n_lists);
        // Each list's mean on its own core, its points added in their order: the same sums
        // as one pass over the points.
        centroids.par_chunks_mut(d).enumerate().for_each(|(l, c)| {
            let points = &order[starts[l]..starts[l + 1]];
            if points.is_empty() {
                return;
            }
            let mut sum = vec![0f64; d];
            for &p in points {
                for (t, v) in sum
                    .iter_mut()
                    .zip(&pts[p as usize * d..(p as usize + 1) * d])
                {
                    *t += *v as f64;
                }
            }
            for (t, s) in c.iter_mut().zip(&sum) {
                *t = (*s / points.len() as f64) as f32;
            }
        });
        // An empty list restarts at a random sampled cell (in list order: the seed's draws).
        for l in 0..n_lists {
            if starts[l] == starts[l + 1] {
                let p = rng.below(m);
                centroids[l * d..(l + 1) * d].copy_from_slice(&pts[p * d..(p + 1) * d]);
            }
        }
    }
    Ok(centroids)
}

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
/// ([`ivf_tensor`](super::ivf_tensor)).
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
        _ => ivf_tensor::plan(ctx, n, d, k),
    };
    let mut stats = index.stats;
    let (cells, (out_idx, out_dist)) = match plan {
        Some(plan) => {
            let (out_idx, out_dist) = out()?;
            let slots =
                ivf_tensor::Slots::new(&index.lists.perm, &index.lists.starts, &index.lists.sizes);
            let starts = ctx.upload(&index.lists.starts)?;
            let sizes = ctx.upload(&index.lists.sizes)?;
            let ptr = ctx.upload(&index.probe_ptr)?;
            let probes = ctx.upload(&index.probes)?;
            let layout = ivf_tensor::F32Layout {
                xp: &index.xp,
                table: &index.table,
                perm: &index.perm,
                starts: &starts,
                sizes: &sizes,
            };
            let probes = ivf_tensor::DeviceProbes {
                ptr: &ptr,
                probes: &probes,
                host_ptr: &index.probe_ptr,
                host_probes: &index.probes,
            };
            let (cells, f32_queries) = ivf_tensor::search(
                ctx,
                xd,
                (n, d, k),
                &slots,
                &layout,
                &probes,
                part,
                plan,
                (&out_idx, &out_dist),
            )?;
            trace.mark("tensor scan, refine")?;
            stats.f32_queries = Some(f32_queries);
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
        ..
    } = index;
    let n = xd.len() / d;
    let kc = (k + EXTRA).min(n);
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

/// k-means centroids (`n_lists x d`) of the `n` rows of `xd` (on the device): the training
/// sample ([`TRAIN_PER_LIST`] seeded cells a list) gathered there, trained with the device's
/// assignments.
pub(super) fn centroids_gpu(
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
fn gather_gpu(
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
pub(super) struct ListLayout {
    pub lists: Lists,
    pub perm: DeviceVec<u32>,
    pub xp: DeviceVec<f32>,
    pub table: RefTable,
}

impl ListLayout {
    /// The layout of the `n x d` rows of `xd` for `centroids`, with every cell's list.
    pub(super) fn new(
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

/// The inverted file on one GPU, with its probes settled: what every part searches.
struct GpuIndex {
    lists: Lists,
    perm: DeviceVec<u32>,
    /// The cells in list order, and their reference-major table.
    xp: DeviceVec<f32>,
    table: RefTable,
    sample: SampleKnn,
    stats: IvfStats,
    probe_ptr: Vec<u32>,
    probes: Vec<u32>,
}

/// The index's shape for `k` neighbours of the cells of `x`, after the checks every GPU
/// index makes before any device work.
fn gpu_shape(x: &DenseMatrix<f32>, k: usize, params: &IvfParams) -> Result<IvfShape> {
    let (n, d) = (x.n_rows, x.n_cols);
    check_k(n, k)?;
    check_finite(x)?;
    let shape = params.settle(n)?;
    if d == 0 || d > super::GPU_MAX_DIMS || k > super::GPU_MAX_K {
        return Err(KernelError::Unsupported(format!(
            "the GPU kNN takes 1 to {} dimensions and k up to {} (got {d} and {k})",
            super::GPU_MAX_DIMS,
            super::GPU_MAX_K
        )));
    }
    Ok(shape)
}

impl GpuIndex {
    /// Centroids trained with the device's assignments, every cell's list, the sample's exact
    /// kNN (which chooses the probes, alike on every part) and the probe table.
    fn build(
        ctx: &GpuContext,
        x: &DenseMatrix<f32>,
        xd: &DeviceVec<f32>,
        k: usize,
        params: &IvfParams,
        trace: &mut PhaseTrace<'_>,
    ) -> Result<GpuIndex> {
        let shape = gpu_shape(x, k, params)?;
        ctx.bind_to_thread()?;
        let centroids = centroids_gpu(ctx, xd, x.n_rows, x.n_cols, shape.n_lists)?;
        trace.mark("train")?;
        GpuIndex::with_centroids(ctx, x, xd, k, &shape, centroids, None, trace)
    }

    /// The index of `shape` from its trained `centroids`; `sample`, the recall sample's exact
    /// kNN when measured elsewhere (else measured here, on the cells in list order).
    #[allow(clippy::too_many_arguments)]
    fn with_centroids(
        ctx: &GpuContext,
        x: &DenseMatrix<f32>,
        xd: &DeviceVec<f32>,
        k: usize,
        shape: &IvfShape,
        centroids: Vec<f32>,
        sample: Option<SampleKnn>,
        trace: &mut PhaseTrace<'_>,
    ) -> Result<GpuIndex> {
        let (n, d) = (x.n_rows, x.n_cols);
        let kc = (k + EXTRA).min(n);
        let (assign, layout) = ListLayout::new(ctx, xd, d, &centroids, shape.n_lists)?;
        let ListLayout {
            lists,
            perm,
            xp,
            table,
        } = layout;
        trace.mark("lists")?;
        let sample = match sample {
            Some(s) => s,
            None => exact_sample_gpu(ctx, &x.data, &table, Some(&perm), recall_cells(n), k)?,
        };
        let n_probes = settle_probes(shape.probes, &sample, &assign, &centroids, d);
        let (probe_ptr, probes) = probe_table(&centroids, d, &lists.sizes, n_probes, kc);
        trace.mark("recall sample")?;
        let stats = IvfStats {
            n_lists: shape.n_lists,
            n_probes,
            target_recall: target_of(shape.probes),
            refs_per_cell: refs_per_cell(&lists.sizes, &probe_ptr, &probes, n),
            recall: None,
            f32_queries: None,
            descent_rounds: 0,
            scan_recall: None,
            descent_replaced: 0,
            descent_declined: None,
        };
        Ok(GpuIndex {
            lists,
            perm,
            xp,
            table,
            sample,
            stats,
            probe_ptr,
            probes,
        })
    }
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

/// The exact kNN of the sampled `cells` on the device: their candidates from the whole table
/// (of the cells in list order, `perm` giving each position's cell, or in their own order),
/// in spans of references so that the few queries fill the device; each span's candidates,
/// then the best of all on the host.
fn exact_sample_gpu(
    ctx: &GpuContext,
    xf: &[f32],
    table: &RefTable,
    perm: Option<&DeviceVec<u32>>,
    cells: Vec<u32>,
    k: usize,
) -> Result<SampleKnn> {
    let (n, d, positions) = (xf.len() / table.d, table.d, table.n);
    let kc = (k + EXTRA).min(n);
    let q = cells.len();
    if q == 0 {
        return Ok(exact_rows(xf, d, k, cells, &[]));
    }
    let qs = ctx.upload(&gather(xf, d, &cells))?;
    let blocks = q.div_ceil(QT);
    let spans = (4 * ctx.multiprocessors() as usize)
        .div_ceil(blocks)
        .min(positions.div_ceil(4096))
        .max(1);
    let sc = ctx.alloc::<u32>(spans * q * kc)?;
    scan_table(ctx, table, perm, &qs, kc, 0..q, None, spans, &sc)?;
    let sc = ctx.download(&sc)?;
    let cand: Vec<Vec<u32>> = (0..q)
        .map(|r| {
            (0..spans)
                .flat_map(|y| &sc[(y * q + r) * kc..(y * q + r + 1) * kc])
                .copied()
                .collect()
        })
        .collect();
    Ok(exact_rows(xf, d, k, cells, &cand))
}

/// The exact kNN of the sampled `cells` of `x` (`xd` on the device), on a table of the cells
/// in their own order: what a GPU measures before any index exists.
fn exact_sample_unlisted(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    cells: Vec<u32>,
    k: usize,
) -> Result<SampleKnn> {
    if cells.is_empty() {
        return Ok(exact_rows(&x.data, x.n_cols, k, cells, &[]));
    }
    let table = RefTable::new(ctx, xd, x.n_rows, x.n_cols, 0)?;
    exact_sample_gpu(ctx, &x.data, &table, None, cells, k)
}

/// The parts of a sample, measured a share each, as one (the parts in the sample's order).
fn join_samples(k: usize, parts: impl IntoIterator<Item = SampleKnn>) -> SampleKnn {
    let mut all = SampleKnn {
        cells: Vec::new(),
        k,
        indices: Vec::new(),
        distances: Vec::new(),
    };
    for p in parts {
        all.cells.extend(p.cells);
        all.indices.extend(p.indices);
        all.distances.extend(p.distances);
    }
    all
}

/// Device bytes [`knn_ivf_gpu`] holds at its peak for `n` cells of `d` dimensions, `k`
/// neighbours and `n_lists` lists: the embedding, its copy in list order and that copy's reference-major table,
/// then the candidates, the refinement's workspace and its rows. What a device budget must hold
/// at least (the atlas run, 11.35 M x 100: 20.7 GB estimated, 21.8 GB peak measured with the
/// pool's rounding and the graph's start).
/// On tensor cores the cells are packed again (FP16, in chunks of 128 per list) with their
/// bound terms, and the candidates and the refinement's workspace are held a batch at a time
/// ([`ivf_tensor`]); the estimate is the larger of the two scans'.
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
    let width = super::tensor::width(k as usize, n as usize) as u64;
    let batch = (ivf_tensor::BATCH_SLOTS as u64).min(slots);
    let tensor_scan =
        slots * (32 * ks + 24) + rows + batch * (width * 4 + 5 + (width + 1) * 12 + k * 8);
    let join = n * d * 4 + super::descent::device_bytes(n as usize, k as usize);
    (tables + f32_scan.max(tensor_scan)).max(join)
}

/// The nearest of the `centroids` (`d` values each) to each of the `m` rows of `points` on
/// the device (the exact scan with one candidate).
fn nearest_gpu(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn clusters(n: usize, d: usize, centres: usize, seed: u64) -> DenseMatrix<f32> {
        let mut rng = SplitMix64::new(seed);
        let c: Vec<f64> = (0..centres * d).map(|_| rng.normal() * 8.0).collect();
        let data = (0..n * d)
            .map(|t| (c[(t / d % centres) * d + t % d] + rng.normal()) as f32)
            .collect();
        DenseMatrix::new(n, d, data).unwrap()
    }

    /// The training's update as one pass over the points (what [`train`] did before it summed
    /// each list on its own core).
    fn train_in_one_pass(pts: &[f32], d: usize, n_lists: usize) -> Vec<f32> {
        let m = pts.len() / d;
        let mut centroids = Vec::new();
        for l in 0..n_lists {
            let p = l * m / n_lists;
            centroids.extend_from_slice(&pts[p * d..(p + 1) * d]);
        }
        let mut rng = SplitMix64::new(SEED ^ 0xe3);
        for _ in 0..TRAIN_ITERS {
            let assign = nearest_host(pts, &centroids, d);
            let mut sums = vec![0f64; n_lists * d];
            let mut counts = vec![0usize; n_lists];
            for (p, &a) in assign.iter().enumerate() {
                counts[a as usize] += 1;
                let s = &mut sums[a as usize * d..(a as usize + 1) * d];
                for (t, v) in s.iter_mut().zip(&pts[p * d..(p + 1) * d]) {
                    *t += *v as f64;
                }
            }
            for l in 0..n_lists {
                let c = &mut centroids[l * d..(l + 1) * d];
                if counts[l] == 0 {
                    let p = rng.below(m);
                    c.copy_from_slice(&pts[p * d..(p + 1) * d]);
                } else {
                    for (t, s) in c.iter_mut().zip(&sums[l * d..(l + 1) * d]) {
                        *t = (*s / counts[l] as f64) as f32;
                    }
                }
            }
        }
        centroids
    }

    #[test]
    fn each_lists_mean_on_its_own_core_is_the_one_pass_mean_bit_for_bit() {
        // Many lists for few points: lists go empty and restart from the seed's draws.
        for (n, d, lists) in [(3000, 7, 40), (500, 3, 200), (64, 5, 64)] {
            let x = clusters(n, d, 6, n as u64);
            let got = train(&x.data, d, lists, |c| Ok(nearest_host(&x.data, c, d))).unwrap();
            let want = train_in_one_pass(&x.data, d, lists);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{n} x {d}, {lists} lists");
        }
    }

    fn part(n: usize, k: usize, cells: &[u32], tag: u32) -> IvfRows {
        let mut indices = vec![u32::MAX; n * k];
        let mut distances = vec![f32::NAN; n * k];
        for &c in cells {
            for j in 0..k {
                indices[c as usize * k + j] = c * 100 + j as u32 + tag;
                distances[c as usize * k + j] = (c + tag) as f32;
            }
        }
        IvfRows {
            cells: cells.to_vec(),
            indices,
            distances,
            stats: IvfStats {
                n_lists: 2,
                n_probes: 1,
                target_recall: None,
                refs_per_cell: 1.0,
                recall: None,
                f32_queries: Some(tag as usize),
                descent_rounds: 0,
                scan_recall: None,
                descent_replaced: 0,
                descent_declined: None,
            },
            sample: None,
        }
    }

    #[test]
    fn parts_join_row_by_row_and_a_cell_in_two_parts_or_none_is_named() {
        let (n, k) = (7, 3);
        let shares: [&[u32]; 3] = [&[4, 0], &[6, 1, 3], &[2, 5]];
        let tags = [0u32, 1000, 2000];
        let parts = || {
            shares
                .iter()
                .zip(tags)
                .map(|(c, t)| part(n, k, c, t))
                .collect()
        };
        let (knn, stats) = join_parts(n, k, parts()).unwrap();
        for (c, t) in [
            (0, 0),
            (4, 0),
            (1, 1000),
            (3, 1000),
            (6, 1000),
            (2, 2000),
            (5, 2000),
        ] {
            let want: Vec<u32> = (0..k as u32).map(|j| c * 100 + j + t).collect();
            assert_eq!(knn.row(c as usize).0, &want[..], "cell {c}");
            assert_eq!(knn.row(c as usize).1, &[(c + t) as f32; 3][..], "cell {c}");
        }
        assert_eq!(stats.f32_queries, Some(3000));
        let mut twice = parts();
        twice[2].cells.push(1);
        let e = join_parts(n, k, twice).unwrap_err().to_string();
        assert!(e.contains("cell 1 is in two parts"), "{e}");
        let mut short = parts();
        short[1].cells.pop();
        let e = join_parts(n, k, short).unwrap_err().to_string();
        assert!(e.contains("hold 6 cells, not 7"), "{e}");
        let mut outside = parts();
        outside[0].cells.push(9);
        let e = join_parts(n, k, outside).unwrap_err().to_string();
        assert!(e.contains("cell 9 of 7"), "{e}");
    }

    #[test]
    fn a_sample_measured_in_shares_joins_into_the_whole() {
        let x = clusters(900, 6, 4, 5);
        let norms = row_norms_host(&x.data, 6);
        let whole = exact_sample_host(&x.data, &norms, 900, 6, 10);
        let shares = (0..3).map(|r| {
            let range = crate::comm::rank_rows(whole.cells.len(), 3, r);
            SampleKnn {
                cells: whole.cells[range.clone()].to_vec(),
                k: 10,
                indices: whole.indices[range.start * 10..range.end * 10].to_vec(),
                distances: whole.distances[range.start * 10..range.end * 10].to_vec(),
            }
        });
        assert_eq!(join_samples(10, shares), whole);
    }

    #[test]
    fn lists_hold_every_cell_once_from_aligned_starts() {
        let assign = [2u32, 0, 2, 1, 2, 2, 2, 0];
        let lists = Lists::new(&assign, 4);
        assert_eq!(lists.sizes, vec![2, 1, 5, 0]);
        assert_eq!(lists.starts, vec![0, 4, 8, 16]);
        assert!(lists.starts.iter().all(|s| s % 4 == 0));
        let mut cells: Vec<u32> = lists
            .perm
            .iter()
            .copied()
            .filter(|&c| c != u32::MAX)
            .collect();
        cells.sort_unstable();
        assert_eq!(cells, (0..8).collect::<Vec<_>>());
        assert_eq!(&lists.perm[8..13], &[0, 2, 4, 5, 6]);
        assert_eq!(lists.tiles(), vec![0, 0, 1, 4, 2, 8]);
        // 130 cells of one list: three blocks of up to 64.
        assert_eq!(
            Lists::new(&[0u32; 130], 1).tiles(),
            vec![0, 0, 0, 64, 0, 128]
        );
    }

    #[test]
    fn probes_start_with_the_own_list_and_hold_enough_cells() {
        // Centroids on a line at 0, 1, 2, 3; list sizes 1, 1, 1, 10.
        let c = [0f32, 1.0, 2.0, 3.0];
        let (ptr, probes) = probe_table(&c, 1, &[1, 1, 1, 10], 2, 3);
        let row = |l: usize| &probes[ptr[l] as usize..ptr[l + 1] as usize];
        assert_eq!(row(0), &[0, 1, 2], "two probes hold 2 cells: one more list");
        assert_eq!(row(1), &[1, 0, 2], "ties by index");
        assert_eq!(row(2), &[2, 1, 3]);
        assert_eq!(row(3), &[3, 2]);
        let per_cell = (3. + 3. + 12. + 10. * 11.) / 13.;
        assert_eq!(refs_per_cell(&[1, 1, 1, 10], &ptr, &probes, 13), per_cell);
    }

    #[test]
    fn bad_shapes_are_named() {
        let p = |l, q| IvfParams {
            n_lists: l,
            n_probes: q,
            target_recall: None,
            descent_rounds: Some(0),
        };
        assert_eq!(
            p(None, None).settle(1_000_000).unwrap(),
            IvfShape {
                n_lists: 1000,
                probes: Probes::Target(DEFAULT_TARGET_RECALL),
                descent_rounds: 0,
            }
        );
        assert_eq!(
            p(None, Some(7)).settle(200).unwrap().probes,
            Probes::Fixed(7)
        );
        let msg = |r: Result<IvfShape>| r.unwrap_err().to_string();
        assert!(msg(p(Some(10), Some(11)).settle(100)).contains("n_probes"));
        assert!(msg(p(Some(0), None).settle(100)).contains("n_lists"));
        assert!(msg(p(Some(101), None).settle(100)).contains("n_lists"));
        assert!(msg(p(Some(4), Some(0)).settle(100)).contains("n_probes"));
        let t = |n_probes, t| IvfParams {
            n_lists: None,
            n_probes,
            target_recall: Some(t),
            descent_rounds: Some(0),
        };
        for bad in [0.0, -0.5, 1.01, f64::NAN] {
            assert!(
                msg(t(None, bad).settle(100)).contains("target_recall"),
                "{bad}"
            );
        }
        assert!(msg(t(Some(3), 0.9).settle(100)).contains("give one"));
        assert_eq!(
            t(None, 1.0).settle(100).unwrap().probes,
            Probes::Target(1.0)
        );
    }

    #[test]
    fn the_probes_chosen_for_a_recall_reach_it_on_the_sample() {
        let x = clusters(6000, 12, 20, 7);
        let k = 15;
        let fixed = |p| {
            let params = IvfParams {
                n_lists: Some(80),
                n_probes: Some(p),
                target_recall: None,
                descent_rounds: Some(0),
            };
            knn_ivf(&x, k, &params).unwrap().1
        };
        for target in [0.6, 0.9, 0.99, 1.0] {
            let params = IvfParams {
                n_lists: Some(80),
                n_probes: None,
                target_recall: Some(target),
                descent_rounds: Some(0),
            };
            let (_, s) = knn_ivf(&x, k, &params).unwrap();
            let got = s.recall.unwrap().value;
            assert_eq!(s.target_recall, Some(target));
            assert!(got >= target, "target {target}: recall {got}");
            // The fewest: one probe less misses the target (where more than one is probed).
            if s.n_probes > 1 {
                let less = fixed(s.n_probes - 1).recall.unwrap().value;
                assert!(
                    less < target,
                    "target {target}: {} probes reach {less}",
                    s.n_probes - 1
                );
            }
            // The same probes given as a count give the same search.
            assert_eq!(fixed(s.n_probes).recall, s.recall, "target {target}");
        }
    }

    #[test]
    fn all_lists_probed_is_the_exact_knn() {
        let x = clusters(600, 7, 5, 3);
        let params = IvfParams {
            n_lists: Some(6),
            n_probes: Some(6),
            target_recall: None,
            descent_rounds: Some(0),
        };
        let (knn, stats) = knn_ivf(&x, 10, &params).unwrap();
        assert_eq!(knn, super::super::knn_exact(&x, 10).unwrap());
        assert_eq!(stats.refs_per_cell, 600.0);
        assert_eq!(stats.recall.unwrap().value, 1.0);
    }

    #[test]
    fn few_probes_find_most_neighbours_and_say_how_many() {
        let x = clusters(4000, 12, 20, 5);
        let k = 15;
        let exact = super::super::knn_exact(&x, k).unwrap();
        let (knn, stats) = knn_ivf(
            &x,
            k,
            &IvfParams {
                n_lists: Some(64),
                n_probes: Some(6),
                target_recall: None,
                descent_rounds: Some(0),
            },
        )
        .unwrap();
        // Every row: the cell itself first, distinct cells, ascending exact distances.
        for i in 0..4000 {
            let (idx, dist) = knn.row(i);
            assert_eq!(idx[0], i as u32);
            let mut s = idx.to_vec();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), k);
            assert!(dist.windows(2).all(|w| w[0] <= w[1]));
        }
        // The sampled recall agrees with the recall over every cell.
        let all = SampleKnn {
            cells: (0..4000).collect(),
            k,
            indices: exact.indices.clone(),
            distances: exact.distances.clone(),
        };
        let full = recall(&all, &knn).value;
        let sampled = stats.recall.unwrap();
        assert_eq!(sampled.cells, RECALL_CELLS);
        assert!(full > 0.8, "recall {full}");
        assert!(
            (sampled.value - full).abs() < 0.02,
            "{} vs {full}",
            sampled.value
        );
        assert!(
            stats.refs_per_cell < 4000.0 * 0.3,
            "{}",
            stats.refs_per_cell
        );
        // A found neighbour has its exact distance.
        for i in 0..4000 {
            let (ei, ed) = exact.row(i);
            let (ai, ad) = knn.row(i);
            for (t, j) in ai.iter().enumerate() {
                if let Some(p) = ei.iter().position(|e| e == j) {
                    assert_eq!(ad[t], ed[p]);
                }
            }
        }
    }

    #[test]
    fn the_local_join_raises_the_recall_and_says_so() {
        let x = clusters(4000, 12, 20, 5);
        let k = 15;
        let exact = super::super::knn_exact(&x, k).unwrap();
        let all = SampleKnn {
            cells: (0..4000).collect(),
            k,
            indices: exact.indices.clone(),
            distances: exact.distances.clone(),
        };
        let run = |rounds| {
            let p = IvfParams {
                n_lists: Some(64),
                n_probes: Some(2),
                target_recall: None,
                descent_rounds: rounds,
            };
            knn_ivf(&x, k, &p).unwrap()
        };
        let (scan, s0) = run(Some(0));
        let (joined, s1) = run(None);
        assert_eq!((s0.descent_rounds, s1.descent_rounds), (0, DEFAULT_ROUNDS));
        assert_eq!(s0.descent_replaced, 0);
        assert!(s1.descent_replaced > 0);
        assert_eq!(s1.scan_recall, s0.recall);
        let (before, after) = (recall(&all, &scan).value, recall(&all, &joined).value);
        assert!(before < 0.9 && after > before + 0.02, "{before} -> {after}");
        assert!(s1.recall.unwrap().value > s1.scan_recall.unwrap().value);
        assert_eq!(s1.descent_declined, None);
        // Every list probed: the scan is exact, the trial finds nothing and the round is not run.
        let all_lists = IvfParams {
            n_lists: Some(64),
            n_probes: Some(64),
            ..IvfParams::default()
        };
        let (exact_ivf, s) = knn_ivf(&x, k, &all_lists).unwrap();
        assert_eq!(exact_ivf, exact);
        assert_eq!((s.descent_rounds, s.descent_declined), (0, Some(0.0)));
        let bad = IvfParams {
            descent_rounds: Some(MAX_DESCENT_ROUNDS + 1),
            ..IvfParams::default()
        };
        assert!(bad
            .settle(4000)
            .unwrap_err()
            .to_string()
            .contains("descent_rounds"));
    }

    #[test]
    fn the_method_chooses_the_inverted_file_by_size_and_bad_values_are_named() {
        use super::super::{KnnMethod, AUTO_IVF_CELLS};
        let p = IvfParams::default();
        assert_eq!(KnnMethod::Auto(p).ivf_for(AUTO_IVF_CELLS - 1), None);
        assert_eq!(KnnMethod::Auto(p).ivf_for(AUTO_IVF_CELLS), Some(p));
        assert_eq!(KnnMethod::Ivf(p).ivf_for(10), Some(p));
        assert_eq!(KnnMethod::Exact.ivf_for(usize::MAX), None);
        let mut x = clusters(300, 4, 3, 1);
        x.data[7 * 4 + 2] = f32::NAN;
        match knn_ivf(&x, 5, &p) {
            Err(KernelError::NonFinite { row: 7, col: 2, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(
            knn_ivf(&clusters(300, 4, 3, 1), 301, &p).is_err(),
            "k above the cells"
        );
    }

    #[test]
    fn the_device_estimate_is_close_under_the_atlas_runs_peak() {
        let bytes = device_bytes(11_351_190, 100, 15, 3369) as f64;
        // The run's peak (20.28 GiB) also held the pool's rounding and the graph's start.
        let peak = 20.28 * (1u64 << 30) as f64;
        assert!(bytes < peak && bytes > 0.9 * peak, "{bytes} for {peak}");
    }

    #[test]
    fn training_is_seeded() {
        let x = clusters(2000, 5, 8, 9);
        let p = IvfParams {
            n_lists: Some(16),
            n_probes: Some(3),
            target_recall: None,
            descent_rounds: Some(0),
        };
        assert_eq!(knn_ivf(&x, 8, &p).unwrap(), knn_ivf(&x, 8, &p).unwrap());
    }
}
