//! A three-level bitmap over the exact-size bins of [`super::CoalescingFreeList`]: finds the
//! first non-empty bin at or above a given one with a handful of word operations, whatever the
//! number of bins, and says "none" as fast (a stream that only carves its portion asks on every
//! request: walking the summary words cost 66 instructions a request).

/// Number of bins the bitmap covers (one per 256-byte size step up to 4 MiB).
pub(crate) const BINS: usize = 1 << 14;

/// The exact-size bin of `size` (a non-zero multiple of 256 bytes): bin 0 holds 256 bytes.
#[inline(always)]
pub(crate) fn bin_of(size: usize) -> usize {
    size / rmm_cuda::ALIGNMENT - 1
}
const WORDS: usize = BINS / 64;
const SUMMARY: usize = WORDS / 64;
const _: () = assert!(SUMMARY <= 64, "one top word covers the summary words");

/// Bit `b` of `words[b / 64]` says bin `b` is non-empty; bit `w` of `summary[w / 64]` says word
/// `w` is non-zero; bit `s` of `top` says `summary[s]` is non-zero.
#[derive(Clone)]
pub(crate) struct BinBitmap {
    words: Box<[u64; WORDS]>,
    summary: [u64; SUMMARY],
    top: u64,
}

impl BinBitmap {
    pub(crate) fn new() -> Self {
        BinBitmap {
            words: Box::new([0; WORDS]),
            summary: [0; SUMMARY],
            top: 0,
        }
    }

    #[inline]
    pub(crate) fn set(&mut self, bin: usize) {
        let w = bin >> 6;
        self.words[w] |= 1 << (bin & 63);
        self.summary[w >> 6] |= 1 << (w & 63);
        self.top |= 1 << (w >> 6);
    }

    #[inline]
    pub(crate) fn clear(&mut self, bin: usize) {
        let w = bin >> 6;
        self.words[w] &= !(1 << (bin & 63));
        if self.words[w] == 0 {
            let s = w >> 6;
            self.summary[s] &= !(1 << (w & 63));
            if self.summary[s] == 0 {
                self.top &= !(1 << s);
            }
        }
    }

    /// The first non-empty bin `>= bin`.
    #[inline]
    pub(crate) fn first_from(&self, bin: usize) -> Option<usize> {
        if bin >= BINS {
            return None;
        }
        let w = bin >> 6;
        let here = self.words[w] & (!0u64 << (bin & 63));
        if here != 0 {
            return Some((w << 6) | here.trailing_zeros() as usize);
        }
        // A later word of this summary word, else the first later summary word in use.
        let next = w + 1;
        let s = next >> 6;
        let mut word = None;
        if s < SUMMARY {
            let mask = self.summary[s] & (!0u64 << (next & 63));
            if mask != 0 {
                word = Some((s << 6) | mask.trailing_zeros() as usize);
            }
        }
        let word = match word {
            Some(word) => word,
            None => {
                let later = self.top & (!0u64).checked_shl(s as u32 + 1).unwrap_or(0);
                if later == 0 {
                    return None;
                }
                let s = later.trailing_zeros() as usize;
                (s << 6) | self.summary[s].trailing_zeros() as usize
            }
        };
        Some((word << 6) | self.words[word].trailing_zeros() as usize)
    }

    /// The highest non-empty bin.
    pub(crate) fn last(&self) -> Option<usize> {
        if self.top == 0 {
            return None;
        }
        let s = 63 - self.top.leading_zeros() as usize;
        let word = (s << 6) | (63 - self.summary[s].leading_zeros() as usize);
        Some((word << 6) | (63 - self.words[word].leading_zeros() as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_set_bin_at_or_above() {
        let mut b = BinBitmap::new();
        assert_eq!(b.first_from(0), None);
        assert_eq!(b.last(), None);
        for bin in [3, 64, 4095, 9000, BINS - 1] {
            b.set(bin);
        }
        assert_eq!(b.first_from(0), Some(3));
        assert_eq!(b.first_from(3), Some(3));
        assert_eq!(b.first_from(4), Some(64));
        assert_eq!(b.first_from(65), Some(4095));
        assert_eq!(b.first_from(4096), Some(9000));
        assert_eq!(b.first_from(9001), Some(BINS - 1));
        assert_eq!(b.last(), Some(BINS - 1));
        b.clear(BINS - 1);
        assert_eq!(b.first_from(9001), None);
        assert_eq!(b.last(), Some(9000));
        b.clear(9000);
        b.clear(4095);
        assert_eq!(b.first_from(65), None);
        assert_eq!(b.last(), Some(64));
    }

    #[test]
    fn agrees_with_a_set_of_bins_under_random_sets_and_clears() {
        let mut b = BinBitmap::new();
        let mut model = std::collections::BTreeSet::new();
        let mut rng = crate::testing::SplitMix64::new(11);
        for step in 0..100_000 {
            // Bins clustered in a few regions, so words and summary words empty and refill.
            let bin = [0, 4032, 4096 * 2 + 17, BINS - 200][rng.below(4) as usize]
                + rng.below(200) as usize;
            if rng.below(2) == 0 {
                b.set(bin);
                model.insert(bin);
            } else {
                b.clear(bin);
                model.remove(&bin);
            }
            let from = if step % 2 == 0 {
                bin
            } else {
                rng.below(BINS as u64 + 10) as usize
            };
            assert_eq!(
                b.first_from(from),
                model.range(from..).next().copied(),
                "from {from}"
            );
            assert_eq!(b.last(), model.last().copied());
        }
    }
}
