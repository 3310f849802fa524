//! The initial centroids of harmony: k-means on the unit-length embedding.
//!
//! [`seed_centroids`]: k-means++ (Arthur and Vassilvitskii 2007) on a keyed random sample of
//! `min(n, 64 k)` rows, all draws from [`SplitMix64`]; host code that the GPU twin calls too,
//! so both start from the same seeds. Then [`crate::kmeans::lloyd`]'s iterations on all rows
//! (without a tolerance: until no assignment changes, or [`LLOYD_MAX_ITER`]).

use super::rng::{derive_key, Permutation, TAG_KMEANS_DRAWS, TAG_KMEANS_SAMPLE};
use crate::random::SplitMix64;
use rayon::prelude::*;

/// Lloyd iterations after the seeding (rapids-singlecell runs cuML's k-means with 25).
pub const LLOYD_MAX_ITER: usize = 25;

/// Rows of the k-means++ sample per cluster.
pub const SAMPLE_PER_CLUSTER: usize = 64;

/// The rows k-means++ seeds from: a keyed sample of `min(n, 64 k)` of the `n` rows.
pub fn sample_indices(n: usize, k: usize, seed: u64) -> Vec<usize> {
    let m = n.min(SAMPLE_PER_CLUSTER * k).max(k.min(n));
    let perm = Permutation::new(n, derive_key(seed, TAG_KMEANS_SAMPLE, 0, 0));
    (0..m).map(|i| perm.at(i) as usize).collect()
}

/// `k` seeds (row-major `k x d`) by k-means++ on the rows of `zn` (`n x d`) that
/// [`sample_indices`] picks.
pub fn seed_centroids(zn: &[f32], n: usize, d: usize, k: usize, seed: u64) -> Vec<f32> {
    let sample: Vec<f32> = sample_indices(n, k, seed)
        .iter()
        .flat_map(|&i| zn[i * d..(i + 1) * d].iter().copied())
        .collect();
    seed_from_sample(&sample, d, k, seed)
}

/// k-means++ on the sample rows (row-major `m x d`, `m >= k`): the first seed uniform, each
/// next one with probability proportional to its squared distance to the nearest seed so far.
pub fn seed_from_sample(sample: &[f32], d: usize, k: usize, seed: u64) -> Vec<f32> {
    let m = sample.len() / d;
    let row = |i: usize| &sample[i * d..(i + 1) * d];
    let mut draws = SplitMix64::from_state(derive_key(seed, TAG_KMEANS_DRAWS, 0, 0));
    let mut chosen = vec![false; m];
    let mut centroids = Vec::with_capacity(k * d);
    let first = draws.below_u32(m);
    chosen[first] = true;
    centroids.extend_from_slice(row(first));
    let mut d2 = vec![f64::INFINITY; m];
    for c in 1..k {
        let last = &centroids[(c - 1) * d..c * d];
        d2.par_iter_mut().enumerate().for_each(|(i, best)| {
            let dist: f64 = row(i)
                .iter()
                .zip(last)
                .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
                .sum();
            if dist < *best {
                *best = dist;
            }
        });
        let total: f64 = (0..m).filter(|&i| !chosen[i]).map(|i| d2[i]).sum();
        let u = draws.next_f64();
        let next = if total > 0.0 {
            let target = u * total;
            let mut acc = 0.0;
            let mut pick = None;
            for i in (0..m).filter(|&i| !chosen[i]) {
                acc += d2[i];
                pick = Some(i);
                if acc > target {
                    break;
                }
            }
            pick.expect("an unchosen row is left (m >= k)")
        } else {
            // Every unchosen row coincides with a seed: take the u-th unchosen one.
            let free: Vec<usize> = (0..m).filter(|&i| !chosen[i]).collect();
            free[((u * free.len() as f64) as usize).min(free.len() - 1)]
        };
        chosen[next] = true;
        centroids.extend_from_slice(row(next));
    }
    centroids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmeans::{assign, lloyd};

    /// Three tight groups on the unit circle (in 3-D).
    fn groups() -> (Vec<f32>, usize) {
        let centers = [[1.0f32, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        let mut g = SplitMix64::from_state(7);
        let mut z = vec![];
        for i in 0..300 {
            let c = centers[i % 3];
            let row: Vec<f32> = c
                .iter()
                .map(|&v| v + 0.05 * (g.next_f64() as f32 - 0.5))
                .collect();
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            z.extend(row.iter().map(|v| v / norm));
        }
        (z, 300)
    }

    #[test]
    fn kmeans_finds_separated_groups() {
        let (z, n) = groups();
        let mut c = seed_centroids(&z, n, 3, 3, 1);
        let its = lloyd(&z, n, 3, 3, &mut c, LLOYD_MAX_ITER, 0.0);
        assert!(its < LLOYD_MAX_ITER);
        let labels = assign(&z, n, 3, 3, &c);
        // Every group is one cluster and the clusters differ.
        for g in 0..3 {
            let l: Vec<u32> = (g..n).step_by(3).map(|i| labels[i]).collect();
            assert!(l.iter().all(|&x| x == l[0]), "group {g} split");
        }
        assert_ne!(labels[0], labels[1]);
        assert_ne!(labels[1], labels[2]);
        assert_ne!(labels[0], labels[2]);
    }

    #[test]
    fn seeding_is_deterministic_and_handles_duplicates() {
        let (z, n) = groups();
        assert_eq!(
            seed_centroids(&z, n, 3, 5, 9),
            seed_centroids(&z, n, 3, 5, 9)
        );
        assert_ne!(
            seed_centroids(&z, n, 3, 5, 9),
            seed_centroids(&z, n, 3, 5, 10)
        );
        // All rows equal: distances are all zero, seeds are still distinct rows.
        let same = [0.6f32, 0.8, 0.0].repeat(10);
        let c = seed_centroids(&same, 10, 3, 4, 0);
        assert_eq!(c.len(), 12);
    }
}
