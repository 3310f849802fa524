//! k-means (scanpy's and rapids-singlecell's `tl.kmeans`, scikit-learn's `KMeans` with its
//! defaults): greedy k-means++ seeds (Arthur and Vassilvitskii 2007, with scikit-learn's
//! `2 + ln k` candidates per seed, the one that lowers the potential most kept), then Lloyd's
//! iterations ([`lloyd`], shared with harmony's clustering) until no assignment changes or the
//! centroids' squared shift falls to `tol` times the data's mean variance per column; the best
//! of `n_init` runs by inertia. Draws come from [`SplitMix64`] keyed by the seed, so the same
//! seed gives the same clusters on any thread count (not scikit-learn's draws: its result is
//! matched by quality, inertia, not label for label).

#[cfg(test)]
mod tests;

use crate::error::{KernelError, Result};
use crate::random::{mix64, SplitMix64};
use crate::stats::chunked_sum;
use rayon::prelude::*;

mod gpu;
pub use gpu::{kmeans_gpu, KERNELS};

/// Rows per task of the assignment step, and per chunk of the centroids' sums (the GPU twin's
/// too).
pub const ROWS: usize = 2048;

/// scikit-learn's / cuML's parameters and defaults (rapids-singlecell's seed, 42).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KMeansParams {
    pub n_clusters: usize,
    pub n_init: usize,
    pub max_iter: usize,
    /// Relative to the mean variance of the columns.
    pub tol: f64,
    pub random_state: u64,
}

impl Default for KMeansParams {
    fn default() -> Self {
        KMeansParams {
            n_clusters: 8,
            n_init: 1,
            max_iter: 300,
            tol: 1e-4,
            random_state: 42,
        }
    }
}

/// The clustering found.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansResult {
    pub labels: Vec<u32>,
    /// `n_clusters x d`, row-major.
    pub centers: Vec<f32>,
    /// Sum of squared distances of the rows to their centre (f64).
    pub inertia: f64,
    /// Lloyd iterations of the best run.
    pub n_iter: usize,
}

/// k-means of the rows of `x` (`n x d`, row-major).
pub fn kmeans(x: &[f32], n: usize, d: usize, p: &KMeansParams) -> Result<KMeansResult> {
    check(x, n, d, p)?;
    let k = p.n_clusters;
    let seed = |s| Ok(seed_plus_plus(x, n, d, k, s));
    best_of_runs(x, n, d, p, seed, |centers, tol| {
        let n_iter = lloyd(x, n, d, p.n_clusters, centers, p.max_iter, tol);
        Ok((n_iter, assign(x, n, d, p.n_clusters, centers)))
    })
}

/// `n_init` runs (the input [`check`]ed), each from `seed(random state)`'s k-means++ seeds
/// ([`seed_plus_plus`] or the GPU twin's): `run(centers, tol)` moves the seeds by Lloyd's
/// iterations and returns the iterations and the final assignment (the host's [`lloyd`] and
/// [`assign`], or the GPU twin's); the run of least inertia is kept.
pub(crate) fn best_of_runs(
    x: &[f32],
    n: usize,
    d: usize,
    p: &KMeansParams,
    mut seed: impl FnMut(u64) -> Result<Vec<f32>>,
    mut run: impl FnMut(&mut Vec<f32>, f64) -> Result<(usize, Vec<u32>)>,
) -> Result<KMeansResult> {
    let tol = p.tol * mean_column_variance(x, n, d);
    let mut best: Option<KMeansResult> = None;
    for r in 0..p.n_init {
        let mut centers = seed(mix64(p.random_state ^ mix64(r as u64)))?;
        let (n_iter, labels) = run(&mut centers, tol)?;
        let inertia = inertia(x, d, &labels, &centers);
        if best.as_ref().is_none_or(|b| inertia < b.inertia) {
            best = Some(KMeansResult {
                labels,
                centers,
                inertia,
                n_iter,
            });
        }
    }
    Ok(best.expect("n_init >= 1"))
}

/// The refusals of bad input, before any work.
pub(crate) fn check(x: &[f32], n: usize, d: usize, p: &KMeansParams) -> Result<()> {
    let k = p.n_clusters;
    if x.len() != n * d {
        return Err(KernelError::Shape(format!(
            "{} values for {n} rows of {d}",
            x.len()
        )));
    }
    if k == 0 || k > n {
        return Err(KernelError::param(
            "n_clusters",
            format!("must be between 1 and the number of rows ({n}), got {k}"),
        ));
    }
    if p.n_init == 0 || p.max_iter == 0 {
        return Err(KernelError::param(
            "n_init",
            "n_init and max_iter must be at least 1",
        ));
    }
    if !(p.tol >= 0.0) {
        return Err(KernelError::param(
            "tol",
            format!("must be >= 0, got {}", p.tol),
        ));
    }
    crate::dense::check_finite_rows(x, d)
}

/// The mean over the columns of their variance (scikit-learn's scale of `tol`).
fn mean_column_variance(x: &[f32], n: usize, d: usize) -> f64 {
    let sums = chunked_sum(n, ROWS, 2 * d, |rows, acc| {
        for i in rows {
            for (j, &v) in x[i * d..(i + 1) * d].iter().enumerate() {
                acc[j] += v as f64;
                acc[d + j] += (v as f64) * (v as f64);
            }
        }
    });
    let n = n as f64;
    (0..d)
        .map(|j| (sums[d + j] / n - (sums[j] / n).powi(2)).max(0.0))
        .sum::<f64>()
        / d.max(1) as f64
}

/// Squared distance of two rows, in f64.
fn dist2(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&u, &v)| (u as f64 - v as f64).powi(2))
        .sum()
}

/// Sum of the squared distances of the rows to their centres.
pub fn inertia(x: &[f32], d: usize, labels: &[u32], centers: &[f32]) -> f64 {
    chunked_sum(labels.len(), ROWS, 1, |rows, acc| {
        for i in rows {
            let c = labels[i] as usize;
            acc[0] += dist2(&x[i * d..(i + 1) * d], &centers[c * d..(c + 1) * d]);
        }
    })[0]
}

/// Greedy k-means++: the first seed a uniform row; each next one the best, by the potential
/// (the sum of every row's squared distance to its nearest seed) it leaves, of `2 + ln k`
/// rows drawn with probability proportional to their squared distance to the nearest seed.
pub fn seed_plus_plus(x: &[f32], n: usize, d: usize, k: usize, seed: u64) -> Vec<f32> {
    seed_with(&HostDistances { x, d }, x, n, d, k, seed).expect("the host's passes cannot fail")
}

/// The passes over the rows k-means++ makes, where the rows are: the host's
/// ([`HostDistances`]) or the GPU twin's, with the same bits.
pub(crate) trait Distances {
    /// Each row's squared distance to its nearest seed, where the passes keep it.
    type Closest;
    /// Each row's squared distance to `centre` ([`dist2`]), or the lesser of it and its entry
    /// of `closest`.
    fn distances(&self, centre: &[f32], closest: Option<&Self::Closest>) -> Result<Self::Closest>;
    /// The sum of `c` over chunks of [`ROWS`] rows, each chunk's in order, the chunks' in order.
    fn potential(&self, c: &Self::Closest) -> Result<f64>;
    /// `c` on the host (the draws' weights).
    fn on_host(&self, c: &Self::Closest) -> Result<Vec<f64>>;
}

/// [`Distances`] on the host's cores.
struct HostDistances<'a> {
    x: &'a [f32],
    d: usize,
}

impl Distances for HostDistances<'_> {
    type Closest = Vec<f64>;

    fn distances(&self, centre: &[f32], closest: Option<&Vec<f64>>) -> Result<Vec<f64>> {
        let d = self.d;
        let row = |i: usize| &self.x[i * d..(i + 1) * d];
        Ok(match closest {
            None => (0..self.x.len() / d.max(1))
                .into_par_iter()
                .map(|i| dist2(row(i), centre))
                .collect(),
            Some(c) => c
                .par_iter()
                .enumerate()
                .map(|(i, &old)| old.min(dist2(row(i), centre)))
                .collect(),
        })
    }

    fn potential(&self, c: &Vec<f64>) -> Result<f64> {
        Ok(chunked_sum(c.len(), ROWS, 1, |rows, acc| {
            acc[0] += rows.map(|i| c[i]).sum::<f64>()
        })[0])
    }

    fn on_host(&self, c: &Vec<f64>) -> Result<Vec<f64>> {
        Ok(c.clone())
    }
}

/// [`seed_plus_plus`] with its passes over the rows made by `passes`.
pub(crate) fn seed_with<D: Distances>(
    passes: &D,
    x: &[f32],
    n: usize,
    d: usize,
    k: usize,
    seed: u64,
) -> Result<Vec<f32>> {
    let row = |i: usize| &x[i * d..(i + 1) * d];
    let mut draws = SplitMix64::new(seed);
    let trials = 2 + (k as f64).ln() as usize;
    let mut centers = Vec::with_capacity(k * d);
    centers.extend_from_slice(row(draws.below(n)));
    let mut closest = passes.distances(&centers, None)?;
    for _ in 1..k {
        let weights = passes.on_host(&closest)?;
        let candidates = draw_by_weight(&weights, trials, &mut draws);
        // Each candidate's closest distances and potential; the lowest potential wins (the
        // first on ties).
        let mut best: Option<(f64, usize, D::Closest)> = None;
        for c in candidates {
            let with = passes.distances(row(c), Some(&closest))?;
            let potential = passes.potential(&with)?;
            if best.as_ref().is_none_or(|b| potential < b.0) {
                best = Some((potential, c, with));
            }
        }
        let (_, c, with) = best.expect("at least two candidates");
        centers.extend_from_slice(row(c));
        closest = with;
    }
    Ok(centers)
}

/// `count` rows drawn with probability proportional to `weights` (uniform when they are all 0:
/// every row coincides with a seed).
fn draw_by_weight(weights: &[f64], count: usize, draws: &mut SplitMix64) -> Vec<usize> {
    let mut cumulative = Vec::with_capacity(weights.len());
    let mut total = 0.0;
    for &w in weights {
        total += w;
        cumulative.push(total);
    }
    (0..count)
        .map(|_| {
            if total > 0.0 {
                let target = draws.next_f64() * total;
                cumulative
                    .partition_point(|&c| c <= target)
                    .min(weights.len() - 1)
            } else {
                draws.below(weights.len())
            }
        })
        .collect()
}

/// Nearest centroid of each row (`|c|^2 - 2 z.c` in f32, ties to the lower index). Each dot
/// product and norm is summed over the columns in order, every product and sum rounded (the
/// GPU twin's `kmeans_assign` gets these bits). The sums advance together in tiles of
/// [`TILE_ROWS`] rows by [`TILE_CENTROIDS`] centroids (the centroids read transposed), so that
/// the tile's independent chains of additions keep the core busy.
pub fn assign(zn: &[f32], n: usize, d: usize, k: usize, centroids: &[f32]) -> Vec<u32> {
    let norms = centroid_norms(centroids, d);
    // Transposed and padded to whole tiles of centroids: ct[j * kp + c].
    let kp = k.div_ceil(TILE_CENTROIDS) * TILE_CENTROIDS;
    let mut ct = vec![0f32; d * kp];
    for (c, row) in centroids.chunks_exact(d).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            ct[j * kp + c] = v;
        }
    }
    let mut out = vec![0u32; n];
    out.par_chunks_mut(ROWS).enumerate().for_each(|(t, o)| {
        let mut dots = vec![0f32; TILE_ROWS * kp];
        for (q, labels) in o.chunks_mut(TILE_ROWS).enumerate() {
            let r0 = t * ROWS + q * TILE_ROWS;
            let rows = &zn[r0 * d..(r0 + labels.len()) * d];
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 (checked just above).
                unsafe { tile_dots_avx2(rows, d, &ct, kp, &mut dots) };
            } else {
                tile_dots(rows, d, &ct, kp, &mut dots);
            }
            #[cfg(not(target_arch = "x86_64"))]
            tile_dots(rows, d, &ct, kp, &mut dots);
            for (r, label) in labels.iter_mut().enumerate() {
                *label = nearest(&dots[r * kp..r * kp + k], &norms);
            }
        }
    });
    out
}

/// [`tile_dots`] compiled for AVX2: eight f32 lanes, the same operations in the same order (no
/// fused multiply-adds), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_dots_avx2(rows: &[f32], d: usize, ct: &[f32], kp: usize, dots: &mut [f32]) {
    tile_dots(rows, d, ct, kp, dots)
}

/// The dot products of `rows` (at most [`TILE_ROWS`] of `d`) with every centroid (`ct`: `d x
/// kp`, transposed) into `dots` (`rows x kp`), each over the columns in order.
#[inline(always)]
fn tile_dots(rows: &[f32], d: usize, ct: &[f32], kp: usize, dots: &mut [f32]) {
    let n_rows = rows.len() / d.max(1);
    for c0 in (0..kp).step_by(TILE_CENTROIDS) {
        let mut acc = [[0f32; TILE_CENTROIDS]; TILE_ROWS];
        for j in 0..d {
            let cj = &ct[j * kp + c0..j * kp + c0 + TILE_CENTROIDS];
            for (r, a) in acc.iter_mut().enumerate().take(n_rows) {
                let z = rows[r * d + j];
                for (s, &c) in a.iter_mut().zip(cj) {
                    *s += z * c;
                }
            }
        }
        for (r, a) in acc.iter().enumerate().take(n_rows) {
            dots[r * kp + c0..r * kp + c0 + TILE_CENTROIDS].copy_from_slice(a);
        }
    }
}

/// Rows and centroids of a tile of [`assign`]'s sums.
const TILE_ROWS: usize = 8;
const TILE_CENTROIDS: usize = 8;

/// Each centroid's squared norm in f32, its columns in order.
pub(crate) fn centroid_norms(centroids: &[f32], d: usize) -> Vec<f32> {
    centroids
        .chunks_exact(d)
        .map(|c| c.iter().fold(0f32, |s, v| s + v * v))
        .collect()
}

/// The centroid `c` of least `norms[c] - 2 dots[c]` (the first on ties).
fn nearest(dots: &[f32], norms: &[f32]) -> u32 {
    let mut best = (f32::INFINITY, 0u32);
    for (j, (&dot, &nc)) in dots.iter().zip(norms).enumerate() {
        let v = nc - 2.0 * dot;
        if v < best.0 {
            best = (v, j as u32);
        }
    }
    best.1
}

/// Lloyd iterations from `centroids` (updated in place) until no assignment changes, the
/// centroids move by at most `tol` (their squared shifts summed; `0`: no such test) or
/// `max_iter`; returns the iterations run. An empty cluster keeps its centroid.
pub fn lloyd(
    zn: &[f32],
    n: usize,
    d: usize,
    k: usize,
    centroids: &mut [f32],
    max_iter: usize,
    tol: f64,
) -> usize {
    let mut previous: Option<Vec<u32>> = None;
    for it in 0..max_iter {
        let labels = assign(zn, n, d, k, centroids);
        if previous.as_ref() == Some(&labels) {
            return it;
        }
        let acc = chunked_sum(n, ROWS, k * d + k, |range, acc| {
            for i in range {
                let c = labels[i] as usize;
                let z = &zn[i * d..(i + 1) * d];
                acc[c * d..(c + 1) * d]
                    .iter_mut()
                    .zip(z)
                    .for_each(|(a, &v)| *a += v as f64);
                acc[k * d + c] += 1.0;
            }
        });
        let shift = move_centroids(&acc, k, d, centroids);
        if tol > 0.0 && shift <= tol {
            return it + 1;
        }
        previous = Some(labels);
    }
    max_iter
}

/// Each centroid to the mean of its rows, from `acc`: the clusters' column sums (`k x d`) then
/// their counts (`k`), in f64, summed over chunks of [`ROWS`] rows in order. Returns the
/// centroids' squared shifts summed.
pub(crate) fn move_centroids(acc: &[f64], k: usize, d: usize, centroids: &mut [f32]) -> f64 {
    let mut shift = 0.0;
    for c in 0..k {
        let count = acc[k * d + c];
        if count > 0.0 {
            for j in 0..d {
                let new = (acc[c * d + j] / count) as f32;
                shift += (new as f64 - centroids[c * d + j] as f64).powi(2);
                centroids[c * d + j] = new;
            }
        }
    }
    shift
}
