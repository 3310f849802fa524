//! Counter-based random numbers: the same seed gives the same numbers on every run, every thread
//! count and on the GPU (the CUDA kernels hash with the same `mix64`), which is what makes the
//! graph steps' results reproducible bit for bit.

/// SplitMix64's finaliser: a bijective hash of 64 bits with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`-th number of the stream `(seed, stream)`: independent of any order of evaluation.
#[inline]
pub fn hash3(seed: u64, stream: u64, i: u64) -> u64 {
    mix64(mix64(seed ^ mix64(stream.wrapping_add(0x9e37_79b9_7f4a_7c15))).wrapping_add(i))
}

/// A standard normal, the `i`-th of the stream `(seed, stream)` (Box-Muller on two uniforms
/// hashed from it): for parallel loops that need one per item, whatever the thread count.
pub fn normal_at(seed: u64, stream: u64, i: u64) -> f64 {
    let h = hash3(seed, stream, i);
    let unit = |x: u64| (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    let (u1, u2) = (1.0 - unit(h), unit(mix64(h)));
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A sequential generator (SplitMix64) for the single-threaded parts: permutations, choices.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(mix64(seed ^ 0x5851_f42d_4c95_7f2d))
    }

    /// A generator that starts from `state` as given, the seed not mixed first (harmony draws
    /// from keys already hashed by its `derive_key`).
    pub fn from_state(state: u64) -> Self {
        SplitMix64(state)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below 2^-32 for n < 2^32).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Uniform in `0..n` (`n > 0`) from the upper 32 bits by a 32-bit multiply-shift (bias below
    /// 2^-32 for the sizes harmony draws from; its k-means++ seeds are defined by it).
    pub fn below_u32(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Standard normal, by Box-Muller.
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// `0..n` in a random order (Fisher-Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut p: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let a: Vec<u64> = (0..5).map(|i| hash3(7, 3, i)).collect();
        let b: Vec<u64> = (0..5).map(|i| hash3(7, 3, i)).collect();
        assert_eq!(a, b);
        assert_ne!(hash3(7, 3, 0), hash3(8, 3, 0));
        assert_ne!(hash3(7, 3, 0), hash3(7, 4, 0));
        let mut r = SplitMix64::new(1);
        let p = r.permutation(100);
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..100).collect::<Vec<u32>>());
        assert_ne!(p, s);
    }

    #[test]
    fn uniforms_and_normals_have_the_right_moments() {
        let mut r = SplitMix64::new(42);
        let n = 200_000;
        let (mut su, mut sn, mut sn2) = (0.0, 0.0, 0.0);
        for _ in 0..n {
            su += r.next_f64();
            let z = r.normal();
            sn += z;
            sn2 += z * z;
        }
        assert!((su / n as f64 - 0.5).abs() < 0.01);
        assert!((sn / n as f64).abs() < 0.01);
        assert!((sn2 / n as f64 - 1.0).abs() < 0.02);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}

/// numpy's legacy `RandomState(seed)` (MT19937 seeded by `init_genrand`), for the draws whose
/// values scanpy's results depend on: the same seed gives numpy's numbers.
pub struct NumpyRandomState(rand_mt::Mt);

impl NumpyRandomState {
    pub fn new(seed: u32) -> Self {
        NumpyRandomState(rand_mt::Mt::new(seed))
    }

    /// A value in `0..=max`, as numpy's `random_interval` and `randint(0, max + 1)` draw it:
    /// MT19937 outputs (32 bits when `max` fits in them, else 64) masked to the smallest
    /// `2^k - 1` at least `max`, redrawn until in range.
    pub fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = u64::MAX >> max.leading_zeros();
        loop {
            let v = if max <= u64::from(u32::MAX) {
                u64::from(self.0.next_u32()) & mask
            } else {
                self.0.next_u64() & mask
            };
            if v <= max {
                return v;
            }
        }
    }

    /// A value in `[0, 1)` as numpy's legacy `random_sample` (`np.random.random`) draws it: 53
    /// bits from two MT19937 outputs (27 and 26 of their high bits).
    pub fn random_sample(&mut self) -> f64 {
        let a = self.0.next_u32() >> 5;
        let b = self.0.next_u32() >> 6;
        (f64::from(a) * 67_108_864.0 + f64::from(b)) / 9_007_199_254_740_992.0
    }

    /// numpy's legacy `permutation(n)`: `0..n` shuffled from the end, each value swapped with
    /// one at a position drawn at or below it (also what `choice(n, k, replace=False)` takes the
    /// first `k` of).
    pub fn permutation(&mut self, n: u64) -> Vec<u64> {
        let mut all: Vec<u64> = (0..n).collect();
        for i in (1..all.len()).rev() {
            let j = self.interval(i as u64) as usize;
            all.swap(i, j);
        }
        all
    }

    /// scikit-learn's `sample_without_replacement(n_population, n_samples)` with its `auto`
    /// method: tracking selection below 1% of the population, a permutation's first
    /// `n_samples` up to 99%, reservoir sampling above (`n_samples <= n_population`).
    pub fn sample_without_replacement(&mut self, n_population: u64, n_samples: usize) -> Vec<u64> {
        let ratio = if n_population == 0 {
            1.0
        } else {
            n_samples as f64 / n_population as f64
        };
        if ratio > 0.01 && ratio < 0.99 {
            let mut all = self.permutation(n_population);
            all.truncate(n_samples);
            return all;
        }
        if ratio < 0.2 {
            let mut seen = std::collections::HashSet::with_capacity(n_samples);
            let mut out = Vec::with_capacity(n_samples);
            while out.len() < n_samples {
                let j = self.interval(n_population - 1);
                if seen.insert(j) {
                    out.push(j);
                }
            }
            return out;
        }
        let mut out: Vec<u64> = (0..n_samples as u64).collect();
        for i in n_samples as u64..n_population {
            let j = self.interval(i) as usize;
            if j < n_samples {
                out[j] = i;
            }
        }
        out
    }
}

#[cfg(test)]
mod numpy_tests {
    use super::NumpyRandomState;

    #[test]
    fn draws_are_numpys() {
        // numpy 2.4's RandomState(seed).randint(n), five times.
        let draws = |seed: u32, n: u64| {
            let mut r = NumpyRandomState::new(seed);
            (0..5).map(|_| r.interval(n - 1)).collect::<Vec<_>>()
        };
        assert_eq!(
            draws(0, 559 * 559),
            [305711, 117952, 152315, 304137, 122579]
        );
        assert_eq!(
            draws(7, 70000 * 70000),
            [1322904761, 1133316631, 372560217, 1801189930, 68334472]
        );
        assert_eq!(draws(3, 1000), [874, 664, 249, 643, 952]);
    }

    #[test]
    fn uniforms_are_numpys() {
        // numpy's np.random.seed(seed); np.random.random(3).
        let draws = |seed: u32| {
            let mut r = NumpyRandomState::new(seed);
            [r.random_sample(), r.random_sample(), r.random_sample()]
        };
        assert_eq!(
            draws(0),
            [0.5488135039273248, 0.7151893663724195, 0.6027633760716439]
        );
    }

    #[test]
    fn samples_are_scikit_learns() {
        // scanpy's sample_comb((n, n), k, RandomState(seed)) as flat indices i * n + j.
        let pairs = |seed: u32, n: u64, k: usize| {
            NumpyRandomState::new(seed)
                .sample_without_replacement(n * n, k)
                .into_iter()
                .map(|v| (v / n, v % n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pairs(0, 559, 6),
            [
                (546, 497),
                (211, 3),
                (272, 267),
                (544, 41),
                (219, 158),
                (154, 207)
            ]
        );
        assert_eq!(
            pairs(7, 70000, 4),
            [
                (18898, 44761),
                (16190, 16631),
                (5322, 20217),
                (25731, 19930)
            ]
        );
        // 10 of 25: a permutation's first ten.
        assert_eq!(
            pairs(0, 5, 10),
            [
                (1, 0),
                (0, 2),
                (3, 4),
                (3, 1),
                (2, 1),
                (4, 2),
                (3, 2),
                (4, 4),
                (4, 3),
                (2, 4)
            ]
        );
        assert_eq!(
            pairs(0, 20, 8),
            [
                (6, 12),
                (15, 9),
                (17, 1),
                (9, 16),
                (12, 6),
                (3, 0),
                (7, 15),
                (13, 1)
            ]
        );
        // Reservoir sampling (995 of 1,000): its sum as scikit-learn's.
        let r = NumpyRandomState::new(4).sample_without_replacement(1000, 995);
        assert_eq!(
            (r[..6].to_vec(), r.iter().sum::<u64>()),
            (vec![0, 1, 2, 3, 4, 5], 497159)
        );
    }
}
