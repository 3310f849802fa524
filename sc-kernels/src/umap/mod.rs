//! `umap` (scanpy's `tl.umap`): a low-dimensional layout of the cell graph by UMAP's stochastic
//! gradient descent (McInnes et al.), on the connectivities of `neighbors`.
//!
//! As umap-learn's `simplicial_set_embedding` with scanpy's arguments: the curve parameters `a`,
//! `b` fitted to `min_dist` and `spread` ([`find_ab_params`]); edges lighter than `max / n_epochs`
//! dropped; each edge sampled every `n_epochs * max / w` epochs with `negative_sample_rate`
//! negative samples per sample; the learning rate falling linearly from 1; gradients clipped to
//! +-4; a spectral start ([`spectral`]) scaled to [0, 10], or a uniform one in [-10, 10).
//!
//! One difference, for reproducibility: every cell moves itself, in the order of its edges,
//! reading the other cells' positions of the previous epoch. As in umap-learn, each move is
//! applied at once, so a cell's next move starts where its last one ended (a hub whose hundreds
//! of edges are sampled in one epoch walks towards its neighbours instead of taking all their
//! pulls at once from where it stood, which flung such cells far out); but the other ends are
//! read as they were when the epoch began, where umap-learn moves both ends of an edge in a
//! shared layout, in an order that depends on threads. An edge's pull moves both its ends in
//! umap-learn, once for each of the two directed copies the symmetric graph holds; here each end
//! takes its two pulls itself, one after the other. The negative samples come from a
//! counter-based hash of (seed, epoch, edge, sample) ([`crate::random`]). So the same graph and
//! seed give the same layout bit for bit on every run and thread count. The GPU twin
//! ([`umap_gpu`]) runs the same schedule and formulas with the same roundings (no fused
//! multiply-adds, `pow` by [`crate::fastmath::pow_f32`]): the same layout bit for bit on the CPU
//! and the GPU.

use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::fastmath::pow_f32;
use rayon::prelude::*;

pub(crate) mod gpu;
pub mod spectral;
mod spectral_gpu;

/// The step's kernel modules, for the warm-up ([`crate::warm_up`]): the epochs and the
/// spectral start.
pub const KERNELS: [crate::gpu::module_cache::KernelSource; 2] = [gpu::SRC, spectral_gpu::SRC];
pub use gpu::umap_gpu;

/// How the layout starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// The graph's Laplacian eigenvectors (each connected component apart), random where that
    /// cannot be had.
    Spectral,
    /// Uniform in [-10, 10).
    Random,
}

/// Parameters, with scanpy's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UmapParams {
    pub min_dist: f64,
    pub spread: f64,
    pub n_components: usize,
    /// `None`: 500 epochs up to 10,000 cells, 200 above (umap-learn's choice).
    pub n_epochs: Option<usize>,
    pub learning_rate: f64,
    /// Weight of the repulsion (umap-learn's `gamma`).
    pub repulsion_strength: f64,
    pub negative_sample_rate: usize,
    pub init: Init,
    pub random_state: u64,
}

impl Default for UmapParams {
    fn default() -> Self {
        UmapParams {
            min_dist: 0.5,
            spread: 1.0,
            n_components: 2,
            n_epochs: None,
            learning_rate: 1.0,
            repulsion_strength: 1.0,
            negative_sample_rate: 5,
            init: Init::Spectral,
            random_state: 0,
        }
    }
}

impl UmapParams {
    pub fn epochs_for(&self, n_cells: usize) -> usize {
        self.n_epochs
            .unwrap_or(if n_cells <= 10_000 { 500 } else { 200 })
    }

    fn check(&self) -> Result<()> {
        let positive = |name, v: f64| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(KernelError::param(name, format!("{v}: must be positive")))
            }
        };
        positive("spread", self.spread)?;
        positive("learning_rate", self.learning_rate)?;
        if !(self.min_dist >= 0.0 && self.min_dist <= self.spread) {
            return Err(KernelError::param(
                "min_dist",
                format!(
                    "{}: must be in [0, spread = {}]",
                    self.min_dist, self.spread
                ),
            ));
        }
        if !(self.repulsion_strength >= 0.0 && self.repulsion_strength.is_finite()) {
            return Err(KernelError::param(
                "repulsion_strength",
                format!("{}: must be >= 0", self.repulsion_strength),
            ));
        }
        if !(1..=gpu::MAX_DIMS).contains(&self.n_components) {
            return Err(KernelError::param(
                "n_components",
                format!("{}: must be in 1..={}", self.n_components, gpu::MAX_DIMS),
            ));
        }
        if self.n_epochs == Some(0) {
            return Err(KernelError::param("n_epochs", "0: at least 1"));
        }
        Ok(())
    }
}

/// The layout and what was used to make it.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// `n_cells x n_components` (`obsm['X_umap']`).
    pub embedding: DenseMatrix<f32>,
    pub a: f64,
    pub b: f64,
    pub n_epochs: usize,
    /// How it started (e.g. "spectral", or why it fell back to random).
    pub init: String,
    /// Seconds the graph's checks and the sampling schedule took, the start took (the
    /// spectral layout) and the epochs took.
    pub schedule_seconds: f64,
    pub start_seconds: f64,
    pub epochs_seconds: f64,
}

/// The curve `1 / (1 + a d^(2b))` closest (least squares on 300 points of [0, 3 spread]) to 1
/// below `min_dist` and `exp(-(d - min_dist) / spread)` above, by Levenberg-Marquardt from
/// (1, 1) as scipy's `curve_fit` does.
pub fn find_ab_params(spread: f64, min_dist: f64) -> (f64, f64) {
    let xs: Vec<f64> = (0..300).map(|i| 3.0 * spread * i as f64 / 299.0).collect();
    let ys: Vec<f64> = xs
        .iter()
        .map(|&x| {
            if x < min_dist {
                1.0
            } else {
                (-(x - min_dist) / spread).exp()
            }
        })
        .collect();
    let residuals = |a: f64, b: f64| -> f64 {
        xs.iter()
            .zip(&ys)
            .map(|(&x, &y)| (1.0 / (1.0 + a * x.powf(2.0 * b)) - y).powi(2))
            .sum()
    };
    let (mut a, mut b, mut lambda) = (1.0f64, 1.0f64, 1e-3);
    let mut cost = residuals(a, b);
    for _ in 0..500 {
        // J^T J and J^T r of the residuals f(x) - y.
        let (mut jaa, mut jab, mut jbb, mut ga, mut gb) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (&x, &y) in xs.iter().zip(&ys) {
            let p = if x > 0.0 { x.powf(2.0 * b) } else { 0.0 };
            let f = 1.0 / (1.0 + a * p);
            let da = -p * f * f;
            let db = if x > 0.0 { da * a * 2.0 * x.ln() } else { 0.0 };
            let r = f - y;
            jaa += da * da;
            jab += da * db;
            jbb += db * db;
            ga += da * r;
            gb += db * r;
        }
        let (maa, mbb) = (jaa * (1.0 + lambda), jbb * (1.0 + lambda));
        let det = maa * mbb - jab * jab;
        if det.abs() < 1e-300 {
            break;
        }
        let step_a = -(mbb * ga - jab * gb) / det;
        let step_b = -(maa * gb - jab * ga) / det;
        let trial = residuals(a + step_a, b + step_b);
        if trial < cost {
            let done = (cost - trial) <= 1e-15 * cost.max(1e-300);
            a += step_a;
            b += step_b;
            cost = trial;
            lambda *= 0.3;
            if done {
                break;
            }
        } else {
            lambda *= 10.0;
            if lambda > 1e12 {
                break;
            }
        }
    }
    (a, b)
}

/// The edges UMAP samples and when: the graph less its light edges, and what each kept edge's
/// period in epochs (and its negative samples') follows from ([`Schedule::epochs_per_sample`];
/// the GPU forms the periods on the device from the same numbers, `umap_periods`).
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub n_epochs: usize,
    /// The kept edges, both directions, in rows.
    pub graph: CsrMatrix<f32>,
    /// The heaviest weight of the graph.
    pub max_weight: f32,
    /// Negative samples per sampled edge (at least 1 in the periods' formula).
    pub negative_sample_rate: usize,
}

/// Rows per block of the schedule's parallel filter.
const FILTER_ROWS: usize = 1 << 14;

impl Schedule {
    pub(crate) fn new(
        graph: &CsrMatrix<f32>,
        n_epochs: usize,
        negative_sample_rate: usize,
    ) -> Self {
        let max = graph.data.par_iter().copied().reduce(|| 0.0f32, f32::max);
        // umap-learn's threshold; with few epochs it uses its default count's.
        let threshold = max / if n_epochs > 10 { n_epochs } else { 200 } as f32;
        let keep = |w: f32| w >= threshold && w > 0.0;
        // Blocks of rows in parallel: count what each keeps, then fill each block's share.
        let n = graph.n_rows;
        let counts: Vec<usize> = (0..n.div_ceil(FILTER_ROWS))
            .into_par_iter()
            .map(|b| {
                let rows = b * FILTER_ROWS..((b + 1) * FILTER_ROWS).min(n);
                let span = graph.indptr[rows.start] as usize..graph.indptr[rows.end] as usize;
                graph.data[span].iter().filter(|&&w| keep(w)).count()
            })
            .collect();
        let total: usize = counts.iter().sum();
        let mut indptr = vec![0u64; n + 1];
        let mut indices = vec![0u32; total];
        let mut data = vec![0f32; total];
        let mut shares = Vec::with_capacity(counts.len());
        let (mut idx_rest, mut data_rest) = (indices.as_mut_slice(), data.as_mut_slice());
        let mut offset = 0u64;
        for (ptr, &c) in indptr[1..].chunks_mut(FILTER_ROWS).zip(&counts) {
            let (i, ir) = std::mem::take(&mut idx_rest).split_at_mut(c);
            let (d, dr) = std::mem::take(&mut data_rest).split_at_mut(c);
            shares.push((ptr, i, d, offset));
            (idx_rest, data_rest) = (ir, dr);
            offset += c as u64;
        }
        shares
            .into_par_iter()
            .enumerate()
            .for_each(|(b, (ptr, out_idx, out_w, offset))| {
                let mut p = 0usize;
                for (i, end) in ptr.iter_mut().enumerate() {
                    let (idx, w) = graph.row(b * FILTER_ROWS + i);
                    for (&c, &w) in idx.iter().zip(w) {
                        if keep(w) {
                            out_idx[p] = c;
                            out_w[p] = w;
                            p += 1;
                        }
                    }
                    *end = offset + p as u64;
                }
            });
        Schedule {
            n_epochs,
            graph: CsrMatrix {
                n_rows: graph.n_rows,
                n_cols: graph.n_cols,
                indptr,
                indices,
                data,
            },
            max_weight: max,
            negative_sample_rate,
        }
    }

    /// Each kept edge's period in epochs, and its negative samples' (umap-learn's
    /// `make_epochs_per_sample`, then divided by the rate).
    pub(crate) fn epochs_per_sample(&self) -> (Vec<f64>, Vec<f64>) {
        let rate = self.negative_sample_rate.max(1) as f64;
        let per_sample: Vec<f64> = self
            .graph
            .data
            .par_iter()
            .map(|&w| sample_period(w, self.max_weight, self.n_epochs))
            .collect();
        let per_negative = per_sample.par_iter().map(|p| p / rate).collect();
        (per_sample, per_negative)
    }
}

/// umap-learn's `make_epochs_per_sample` of one edge: the epochs between its samples, from its
/// weight `w` and the heaviest `max`.
#[inline]
pub(crate) fn sample_period(w: f32, max: f32, n_epochs: usize) -> f64 {
    let e = n_epochs as f64;
    e / (e * (w as f64 / max as f64))
}

/// The fixed numbers of every gradient.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gradient {
    pub a: f32,
    pub b: f32,
    pub gamma: f32,
    pub negative_samples: bool,
    pub seed: u64,
}

impl Gradient {
    /// The coefficient of the attraction along an edge at squared distance `d2`
    /// (`d2^(b-1)` as `d2^b / d2`: one power and one division for both terms).
    #[inline]
    pub fn attraction(&self, d2: f32) -> f32 {
        if d2 > 0.0 {
            let p = pow_f32(d2, self.b);
            -2.0 * self.a * self.b * p / (d2 * (self.a * p + 1.0))
        } else {
            0.0
        }
    }

    /// The coefficient of the repulsion from a negative sample at squared distance `d2`.
    #[inline]
    pub fn repulsion(&self, d2: f32) -> f32 {
        if d2 > 0.0 {
            2.0 * self.gamma * self.b / ((0.001 + d2) * (self.a * pow_f32(d2, self.b) + 1.0))
        } else {
            0.0
        }
    }
}

#[inline]
fn clip(v: f32) -> f32 {
    v.clamp(-4.0, 4.0)
}

/// `cur` moved by `alpha` times `coeff (cur - other)`, each coordinate's move clipped to 4.
#[inline]
pub(crate) fn nudge(cur: &mut [f32], other: &[f32], coeff: f32, alpha: f32) {
    for (c, &o) in cur.iter_mut().zip(other) {
        *c += clip(coeff * (*c - o)) * alpha;
    }
}

/// The negative samples of edge `e` at `epoch` are drawn from this key (one hash per edge).
#[inline]
pub(crate) fn negative_key(seed: u64, epoch: usize, e: usize) -> u64 {
    crate::random::hash3(seed, epoch as u64, e as u64)
}

/// The negative sample `p` of the edge whose [`negative_key`] is `key`: a cell in `0..n`.
#[inline]
pub(crate) fn negative_sample(key: u64, p: usize, n: usize) -> usize {
    let h = crate::random::mix64(key.wrapping_add((p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    (((h >> 32) * n as u64) >> 32) as usize
}

/// The layout of `graph` (symmetric connectivities), on the CPU.
pub fn umap(graph: &CsrMatrix<f32>, params: &UmapParams) -> Result<Layout> {
    let (schedule, gradient, start) = prepare(graph, params)?;
    let mut y = start.embedding.data.clone();
    let t = std::time::Instant::now();
    optimize(&schedule, &gradient, params, &mut y);
    Ok(Layout {
        epochs_seconds: t.elapsed().as_secs_f64(),
        embedding: DenseMatrix {
            n_rows: graph.n_rows,
            n_cols: params.n_components,
            data: y,
        },
        ..start
    })
}

/// What both devices start from: the checked graph's schedule, the gradient's constants and the
/// initial layout (computed on the CPU: see [`spectral`]).
pub(crate) fn prepare(
    graph: &CsrMatrix<f32>,
    params: &UmapParams,
) -> Result<(Schedule, Gradient, Layout)> {
    prepare_on(graph, params, &spectral::host_space)
}

/// [`prepare`] with the spectral start's Lanczos vectors where `make` puts them.
pub(crate) fn prepare_on(
    graph: &CsrMatrix<f32>,
    params: &UmapParams,
    make: &spectral::SpaceMaker<'_>,
) -> Result<(Schedule, Gradient, Layout)> {
    params.check()?;
    let t = std::time::Instant::now();
    let mut trace = crate::gpu::trace::PhaseTrace::on_host("umap");
    crate::graph::check_graph(graph, "umap")?;
    trace.mark("checks")?;
    if graph.n_rows < 2 {
        return Err(KernelError::Unsupported(format!(
            "umap: {} cell(s); at least 2",
            graph.n_rows
        )));
    }
    let n_epochs = params.epochs_for(graph.n_rows);
    let schedule = Schedule::new(graph, n_epochs, params.negative_sample_rate);
    let schedule_seconds = t.elapsed().as_secs_f64();
    trace.mark("schedule")?;
    let t = std::time::Instant::now();
    let (a, b) = find_ab_params(params.spread, params.min_dist);
    let gradient = Gradient {
        a: a as f32,
        b: b as f32,
        gamma: params.repulsion_strength as f32,
        negative_samples: params.negative_sample_rate > 0,
        seed: params.random_state,
    };
    let (embedding, init) = spectral::initial_layout_on(graph, params, make)?;
    Ok((
        schedule,
        gradient,
        Layout {
            embedding,
            a,
            b,
            n_epochs,
            init,
            schedule_seconds,
            start_seconds: t.elapsed().as_secs_f64(),
            epochs_seconds: 0.0,
        },
    ))
}

/// Every epoch: each cell's move from the layout of the epoch before (see the module docs).
fn optimize(s: &Schedule, g: &Gradient, params: &UmapParams, y: &mut Vec<f32>) {
    let dim = params.n_components;
    let n = s.graph.n_rows;
    let (per_sample, per_negative) = s.epochs_per_sample();
    let (mut next_sample, mut next_negative) = (per_sample.clone(), per_negative.clone());
    let periods = (per_sample.as_slice(), per_negative.as_slice());
    let mut out = y.clone();
    for epoch in 0..s.n_epochs {
        let alpha = (params.learning_rate * (1.0 - epoch as f64 / s.n_epochs as f64)) as f32;
        let prev: &[f32] = y;
        // Each row's edges are its own: split the per-edge state by rows.
        let rows = split_by_rows(&s.graph.indptr, &mut next_sample, &mut next_negative);
        out.par_chunks_mut(dim)
            .zip(rows)
            .enumerate()
            .for_each(|(j, (yj, (ns, nn)))| {
                move_cell(s, periods, g, epoch, alpha, prev, dim, n, j, yj, ns, nn);
            });
        std::mem::swap(y, &mut out);
    }
}

/// The per-edge state of each row, as mutable slices.
fn split_by_rows<'a>(
    indptr: &[u64],
    a: &'a mut [f64],
    b: &'a mut [f64],
) -> Vec<(&'a mut [f64], &'a mut [f64])> {
    let mut out = Vec::with_capacity(indptr.len() - 1);
    let (mut a, mut b) = (a, b);
    for w in indptr.windows(2) {
        let len = (w[1] - w[0]) as usize;
        let (ha, ta) = std::mem::take(&mut a).split_at_mut(len);
        let (hb, tb) = std::mem::take(&mut b).split_at_mut(len);
        out.push((ha, hb));
        a = ta;
        b = tb;
    }
    out
}

/// Cell `j`'s position after `epoch`, written to `yj`: from its previous position, each of its
/// edges sampled now in order, two pulls towards the other end (one for each direction of the
/// pair), then the pushes of the edge's negative samples, each move applied before the next is
/// computed. The GPU kernel `umap_epoch` is this function.
#[allow(clippy::too_many_arguments)]
#[inline]
fn move_cell(
    s: &Schedule,
    (per_sample, per_negative): (&[f64], &[f64]),
    g: &Gradient,
    epoch: usize,
    alpha: f32,
    prev: &[f32],
    dim: usize,
    n: usize,
    j: usize,
    yj: &mut [f32],
    next_sample: &mut [f64],
    next_negative: &mut [f64],
) {
    let cur = yj;
    cur.copy_from_slice(&prev[j * dim..(j + 1) * dim]);
    let first = s.graph.indptr[j] as usize;
    let e_now = epoch as f64;
    for (i, &k) in s.graph.row(j).0.iter().enumerate() {
        if next_sample[i] > e_now {
            continue;
        }
        let e = first + i;
        let other = &prev[k as usize * dim..(k as usize + 1) * dim];
        for _ in 0..2 {
            let coeff = g.attraction(squared_distance(cur, other));
            nudge(cur, other, coeff, alpha);
        }
        next_sample[i] += per_sample[e];
        if !g.negative_samples {
            continue;
        }
        let count = ((e_now - next_negative[i]) / per_negative[e]).max(0.0) as usize;
        let key = negative_key(g.seed, epoch, e);
        for p in 0..count {
            let k = negative_sample(key, p, n);
            if k == j {
                continue;
            }
            let other = &prev[k * dim..(k + 1) * dim];
            let coeff = g.repulsion(squared_distance(cur, other));
            if coeff > 0.0 {
                nudge(cur, other, coeff, alpha);
            }
        }
        next_negative[i] += count as f64 * per_negative[e];
    }
}

#[inline]
pub(crate) fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// sklearn's `trustworthiness` of a layout: how far the `k` nearest neighbours in `embedding`
/// are from being the `k` nearest in `x` (1 is perfect). Exact, O(n^2): for tests and gates on
/// samples of a few thousand cells.
pub fn trustworthiness(x: &DenseMatrix<f32>, embedding: &DenseMatrix<f32>, k: usize) -> f64 {
    let n = x.n_rows;
    let ranks_in = |m: &DenseMatrix<f32>, i: usize| -> Vec<usize> {
        let row = |r: usize| &m.data[r * m.n_cols..(r + 1) * m.n_cols];
        let mut order: Vec<(f64, usize)> = (0..n)
            .filter(|&j| j != i)
            .map(|j| {
                let d: f64 = row(i)
                    .iter()
                    .zip(row(j))
                    .map(|(a, b)| ((a - b) as f64).powi(2))
                    .sum();
                (d, j)
            })
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        order.into_iter().map(|(_, j)| j).collect()
    };
    let penalty: f64 = (0..n)
        .into_par_iter()
        .map(|i| {
            let original = ranks_in(x, i);
            let mut rank = vec![0usize; n];
            for (r, &j) in original.iter().enumerate() {
                rank[j] = r + 1;
            }
            ranks_in(embedding, i)[..k]
                .iter()
                .map(|&j| rank[j].saturating_sub(k) as f64)
                .sum::<f64>()
        })
        .sum();
    let (n, k) = (n as f64, k as f64);
    1.0 - penalty * 2.0 / (n * k * (2.0 * n - 3.0 * k - 1.0))
}

#[cfg(test)]
pub(crate) mod tests;
