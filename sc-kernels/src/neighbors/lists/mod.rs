//! The cells in lists by k-means (an inverted file's index), shared by the approximate search
//! ([`super::ivf`]) and the pruned exact kNN ([`super::pruned`]): training on a seeded sample,
//! the lists laid out one after another, each list's probe order; [`gpu`] lays them out on the
//! device and [`packed`] packs them for the tensor-core scan.

pub(crate) mod gpu;
pub(crate) mod packed;
pub(crate) use gpu::{centroids_gpu, ListLayout};

use crate::error::Result;
use crate::neighbors::scan::device::QT;
use crate::neighbors::scan::host::products;
use crate::random::SplitMix64;
use faer::MatRef;
use rayon::prelude::*;

/// Training cells per list (k-means on a sample).
pub(crate) const TRAIN_PER_LIST: usize = 64;
/// Lloyd rounds.
pub(crate) const TRAIN_ITERS: usize = 10;
/// Seed of the training sample, the empty lists' new centroids and the recall sample.
pub(crate) const SEED: u64 = 0x1f_5eed;

/// The cells stored list by list: list `l` holds positions `starts[l] .. starts[l] + sizes[l]`
/// (starts a multiple of 4), `perm[position]` the cell (~0 in the padding between lists).
pub(crate) struct Lists {
    pub perm: Vec<u32>,
    pub starts: Vec<u64>,
    pub sizes: Vec<u32>,
}

impl Lists {
    pub(crate) fn new(assign: &[u32], n_lists: usize) -> Lists {
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
    pub(crate) fn tiles(&self) -> Vec<u32> {
        self.tiles_every(QT)
    }

    /// (list, first position) per `step` cells of a list.
    pub(crate) fn tiles_every(&self, step: usize) -> Vec<u32> {
        let mut tiles = Vec::new();
        for (l, (&s, &z)) in self.starts.iter().zip(&self.sizes).enumerate() {
            let mut p = s;
            while p < s + z as u64 {
                tiles.extend([l as u32, p as u32]);
                p += step as u64;
            }
        }
        tiles
    }
}

/// Every list in the order list `l`'s cells probe them: `l` itself, then the others by the
/// distance of their centroid to `l`'s (f64, ties by index).
pub(crate) fn probe_order(centroids: &[f32], d: usize, l: usize) -> Vec<u32> {
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
pub(crate) fn probe_table(
    centroids: &[f32],
    d: usize,
    sizes: &[u32],
    n_probes: usize,
    min_refs: usize,
) -> (Vec<u32>, Vec<u32>) {
    let rows: Vec<Vec<u32>> = (0..sizes.len())
        .into_par_iter()
        .map(|l| leading(probe_order(centroids, d, l), sizes, n_probes, min_refs))
        .collect();
    csr(rows)
}

/// The first `n_probes` of each row of a probe table (`ptr`, `probes`, as [`probe_table`]'s),
/// and on until they hold `min_refs` cells or the row ends: the table of `n_probes` where the
/// rows are [`probe_table`]'s, without ordering the lists again.
pub(crate) fn probe_prefix(
    (ptr, probes): (&[u32], &[u32]),
    sizes: &[u32],
    n_probes: usize,
    min_refs: usize,
) -> (Vec<u32>, Vec<u32>) {
    let rows = ptr.windows(2).map(|w| {
        let row = probes[w[0] as usize..w[1] as usize].iter().copied();
        leading(row, sizes, n_probes, min_refs)
    });
    csr(rows.collect())
}

/// The lists of `order` that a list's cells probe: the first `n_probes`, and on until they
/// hold `min_refs` cells.
fn leading(
    order: impl IntoIterator<Item = u32>,
    sizes: &[u32],
    n_probes: usize,
    min_refs: usize,
) -> Vec<u32> {
    let mut row = Vec::with_capacity(n_probes);
    let mut refs = 0usize;
    for m in order {
        if row.len() >= n_probes && refs >= min_refs {
            break;
        }
        row.push(m);
        refs += sizes[m as usize] as usize;
    }
    row
}

/// Rows as CSR: (`ptr`, the rows one after another).
fn csr(rows: Vec<Vec<u32>>) -> (Vec<u32>, Vec<u32>) {
    let mut ptr = vec![0u32];
    let mut flat = Vec::new();
    for r in rows {
        flat.extend(r);
        ptr.push(flat.len() as u32);
    }
    (ptr, flat)
}

/// References scanned per cell, on average.
pub(crate) fn refs_per_cell(sizes: &[u32], ptr: &[u32], probes: &[u32], n: usize) -> f64 {
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
pub(crate) fn sample_rows(n: usize, m: usize, seed: u64) -> Vec<u32> {
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
pub(crate) fn gather(xf: &[f32], d: usize, rows: &[u32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * d);
    for &r in rows {
        out.extend_from_slice(&xf[r as usize * d..(r as usize + 1) * d]);
    }
    out
}

pub(crate) fn row_norms_host(xf: &[f32], d: usize) -> Vec<f32> {
    xf.par_chunks(d.max(1))
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect()
}

/// The nearest centroid of each point (f32 `|c|^2 - 2 p.c`, ties by the smaller index), as
/// the GPU's scan with `k = 1`; the products by blocks of matrix products.
pub(crate) fn nearest_host(points: &[f32], centroids: &[f32], d: usize) -> Vec<u32> {
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
pub(crate) fn training_sample(xf: &[f32], n: usize, d: usize, n_lists: usize) -> Vec<f32> {
    gather(xf, d, &sample_rows(n, TRAIN_PER_LIST * n_lists, SEED))
}

/// k-means centroids (`n_lists x d`) of the training points `pts`; `nearest` assigns them to
/// centroids (the CPU's or the GPU's).
pub(crate) fn train(
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
