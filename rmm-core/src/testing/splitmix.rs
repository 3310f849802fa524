//! SplitMix64: the small, fast, seeded generator the benchmark workloads are defined with.

/// SplitMix64 (Steele, Lea and Flood), all arithmetic wrapping: the state advances by the
/// golden-ratio increment `0x9e3779b97f4a7c15`, and each output is the new state mixed by
/// `z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^ z >> 31`.
/// The benchmark workloads (`benches/WORKLOADS.md`) are defined with it; `below(n)` is
/// `next() % n`.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (n > 0), by modulo as the workloads define it.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 0 (the published reference values).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(g.next(), 0x06c4_5d18_8009_454f);
    }
}
