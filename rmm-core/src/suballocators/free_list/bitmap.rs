//! A two-level bitmap over the exact-size bins of [`super::CoalescingFreeList`]: finds the first
//! non-empty bin at or above a given one with a handful of word operations, whatever the number
//! of bins.

/// Number of bins the bitmap covers (one per 256-byte size step up to 4 MiB).
pub(crate) const BINS: usize = 1 << 14;

/// The exact-size bin of `size` (a non-zero multiple of 256 bytes): bin 0 holds 256 bytes.
#[inline(always)]
pub(crate) fn bin_of(size: usize) -> usize {
    size / rmm_cuda::ALIGNMENT - 1
}
const WORDS: usize = BINS / 64;
const SUMMARY: usize = WORDS / 64;

/// Bit `b` of `words[b / 64]` says bin `b` is non-empty; bit `w` of `summary[w / 64]` says word
/// `w` is non-zero.
#[derive(Clone)]
pub(crate) struct BinBitmap {
    words: Box<[u64; WORDS]>,
    summary: [u64; SUMMARY],
}

impl BinBitmap {
    pub(crate) fn new() -> Self {
        BinBitmap {
            words: Box::new([0; WORDS]),
            summary: [0; SUMMARY],
        }
    }

    #[inline]
    pub(crate) fn set(&mut self, bin: usize) {
        let w = bin >> 6;
        self.words[w] |= 1 << (bin & 63);
        self.summary[w >> 6] |= 1 << (w & 63);
    }

    #[inline]
    pub(crate) fn clear(&mut self, bin: usize) {
        let w = bin >> 6;
        self.words[w] &= !(1 << (bin & 63));
        if self.words[w] == 0 {
            self.summary[w >> 6] &= !(1 << (w & 63));
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
        let mut next = w + 1;
        while next < WORDS {
            let s = next >> 6;
            let mask = self.summary[s] & (!0u64 << (next & 63));
            if mask != 0 {
                let word = (s << 6) | mask.trailing_zeros() as usize;
                return Some((word << 6) | self.words[word].trailing_zeros() as usize);
            }
            next = (s + 1) << 6;
        }
        None
    }

    /// The highest non-empty bin.
    pub(crate) fn last(&self) -> Option<usize> {
        for s in (0..SUMMARY).rev() {
            if self.summary[s] != 0 {
                let word = (s << 6) | (63 - self.summary[s].leading_zeros() as usize);
                return Some((word << 6) | (63 - self.words[word].leading_zeros() as usize));
            }
        }
        None
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
}
