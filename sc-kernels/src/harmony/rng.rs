//! The random numbers of harmony, defined by integer arithmetic only, so that the CPU reference
//! and the GPU twin (`harmony.cu` repeats [`permuted_index`] bit for bit) draw the same k-means
//! seeds and visit the cells in the same random blocks.
//!
//! - [`derive_key`]: a key for each use, hashed with [`mix64`]; the k-means++ draws come from
//!   [`SplitMix64::from_state`](crate::random::SplitMix64::from_state) of such a key.
//! - [`Permutation`]: a keyed pseudo-random permutation of `0..n` evaluated one index at a time
//!   (a 4-round Feistel network on the smallest even power of two `>= n`, with cycle walking to
//!   stay inside `0..n`), so the GPU computes a cell's block position in its own thread, with no
//!   sort and no host round trip.

use crate::random::mix64;

/// A key for one use of the random numbers: the user's seed and up to two counters (e.g. the
/// harmony round and the clustering iteration) and a purpose tag.
pub fn derive_key(seed: u64, tag: u64, a: u64, b: u64) -> u64 {
    let mut h = mix64(seed ^ 0x6a09_e667_f3bc_c908);
    for v in [tag, a, b] {
        h = mix64(h ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    h
}

/// Purpose tags of [`derive_key`].
pub const TAG_KMEANS_SAMPLE: u64 = 1;
pub const TAG_KMEANS_DRAWS: u64 = 2;
pub const TAG_BLOCKS: u64 = 3;

/// A keyed permutation of `0..n` (`1 <= n < 2^31`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    pub n: u32,
    /// Bits of each Feistel half: the domain is `4^half_bits >= n`.
    pub half_bits: u32,
    /// One key per round.
    pub keys: [u32; 4],
}

impl Permutation {
    pub fn new(n: usize, key: u64) -> Self {
        assert!(
            (1..(1usize << 31)).contains(&n),
            "permutation size {n} out of range"
        );
        let mut half_bits = 1;
        while (1u64 << (2 * half_bits)) < n as u64 {
            half_bits += 1;
        }
        let k2 = mix64(key ^ 0x3c6e_f372_fe94_f82b);
        Permutation {
            n: n as u32,
            half_bits,
            keys: [key as u32, (key >> 32) as u32, k2 as u32, (k2 >> 32) as u32],
        }
    }

    /// The element at position `i` (`i < n`).
    #[inline]
    pub fn at(&self, i: usize) -> u32 {
        permuted_index(i as u32, self.n, self.half_bits, &self.keys)
    }
}

/// Round function: a 32-bit finalizer (MurmurHash3's) of the half and the round key.
#[inline]
fn round_hash(r: u32, key: u32) -> u32 {
    let mut h = r.wrapping_mul(0x9e37_79b1) ^ key;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Position `i` of the permutation: Feistel rounds on `i` until the value falls in `0..n`
/// (cycle walking: the walk from an index in range returns to the range, so this is a bijection
/// of `0..n`; the expected number of walks is below 4).
#[inline]
pub fn permuted_index(i: u32, n: u32, half_bits: u32, keys: &[u32; 4]) -> u32 {
    let mask = (1u32 << half_bits) - 1;
    let mut x = i;
    loop {
        let mut l = x >> half_bits;
        let mut r = x & mask;
        for &k in keys {
            let t = l ^ (round_hash(r, k) & mask);
            l = r;
            r = t;
        }
        x = (l << half_bits) | r;
        if x < n {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    #[test]
    fn permutations_are_bijections() {
        for n in [1usize, 2, 3, 5, 17, 64, 100, 1000, 3500, 4097] {
            for key in [0u64, 1, 0xdead_beef_1234_5678] {
                let p = Permutation::new(n, key);
                let mut seen = vec![false; n];
                for i in 0..n {
                    let v = p.at(i) as usize;
                    assert!(
                        v < n && !seen[v],
                        "n {n} key {key}: {v} repeated or out of range"
                    );
                    seen[v] = true;
                }
            }
        }
    }

    #[test]
    fn permutations_depend_on_the_key_and_look_shuffled() {
        let n = 1000;
        let a: Vec<u32> = (0..n).map(|i| Permutation::new(n, 1).at(i)).collect();
        let b: Vec<u32> = (0..n).map(|i| Permutation::new(n, 2).at(i)).collect();
        assert_ne!(a, b);
        // Few fixed points and no long identity runs.
        let fixed = a
            .iter()
            .enumerate()
            .filter(|(i, &v)| *i as u32 == v)
            .count();
        assert!(fixed < 10, "{fixed} fixed points");
        // The first 5% hold cells from the whole range.
        let first: Vec<u32> = a[..50].to_vec();
        assert!(first.iter().any(|&v| v < 250) && first.iter().any(|&v| v > 750));
    }

    #[test]
    fn splitmix_is_reproducible_and_uniform_enough() {
        let mut g = SplitMix64::from_state(42);
        let mut h = SplitMix64::from_state(42);
        let xs: Vec<f64> = (0..10_000).map(|_| g.next_f64()).collect();
        assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert_eq!(h.next_f64(), xs[0]);
        let counts = (0..7000).fold([0usize; 7], |mut c, _| {
            c[h.below_u32(7)] += 1;
            c
        });
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
