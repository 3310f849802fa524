//! Frees kept apart in a batch, then merged into runs of touching blocks all at once (see
//! `CoalescingFreeList::pending`): a stream that only frees (its blocks allocated on another
//! stream) would otherwise pay for the address maps on every free, when most of a batch's blocks
//! touch each other.
//!
//! The batch is sorted by address with a radix sort of the addresses' offsets from the batch's
//! lowest, in 256-byte units, [`DIGIT_BITS`] bits a pass: a batch from one portion spans a few
//! MiB (one or two passes), where `sort_unstable` cost 120 instructions a block.

use rmm_cuda::ALIGNMENT;

/// A free block: (address, size).
type Block = (u64, usize);

/// Bits of the offset sorted a pass at most (shared evenly by the passes a batch's span needs):
/// workload A's 64 KiB batches take two passes, where 8 bits took three.
const DIGIT_BITS: u32 = 11;
const DIGITS: usize = 1 << DIGIT_BITS;
/// Radix passes at most; a batch spanning more units than that many digits cover is sorted by
/// comparison.
const MAX_PASSES: u32 = 3;

/// Sorts `blocks` (address, size) by address; `scratch` is working space, kept between calls.
pub(crate) fn sort_by_address(blocks: &mut [Block], scratch: &mut Vec<Block>) {
    let Some(low) = blocks.iter().map(|b| b.0).min() else {
        return;
    };
    let high = blocks.iter().map(|b| b.0).max().unwrap_or(low);
    let unit = ALIGNMENT.trailing_zeros();
    let span = (high - low) >> unit;
    let span_bits = u64::BITS - span.leading_zeros();
    let passes = span_bits.div_ceil(DIGIT_BITS);
    if passes > MAX_PASSES {
        blocks.sort_unstable_by_key(|b| b.0);
        return;
    }
    // The passes share the bits evenly, so none counts into more buckets than it needs.
    let bits = span_bits.div_ceil(passes.max(1));
    let buckets = 1usize << bits;
    if scratch.len() < blocks.len() {
        scratch.resize(blocks.len(), (0, 0));
    }
    let other = &mut scratch[..blocks.len()];
    let mut at = [0u32; DIGITS];
    for pass in 0..passes {
        let (from, to): (&[Block], &mut [Block]) = if pass % 2 == 0 {
            (blocks, other)
        } else {
            (other, blocks)
        };
        let shift = unit + bits * pass;
        // (Masked with `DIGITS - 1` too, so the compiler sees every index in bounds.)
        let digit = |a: u64| (((a - low) >> shift) as usize) & (buckets - 1) & (DIGITS - 1);
        at[..buckets].fill(0);
        for b in from.iter() {
            at[digit(b.0)] += 1;
        }
        let mut sum = 0;
        for slot in at[..buckets].iter_mut() {
            (*slot, sum) = (sum, sum + *slot);
        }
        for &b in from.iter() {
            let d = digit(b.0);
            to[at[d] as usize] = b;
            at[d] += 1;
        }
    }
    if passes % 2 == 1 {
        blocks.copy_from_slice(other);
    }
}

/// Merges the touching blocks of `sorted` (sorted by address, none overlapping) into runs, in
/// place; `joins(addr)` says whether blocks may merge at `addr` (not at a chunk's boundary).
pub(crate) fn merge_runs(sorted: &mut Vec<Block>, joins: impl Fn(u64) -> bool) {
    let mut kept = 0;
    for i in 0..sorted.len() {
        let (a, s) = sorted[i];
        if kept > 0 {
            let (start, len) = &mut sorted[kept - 1];
            if *start + *len as u64 == a && joins(a) {
                *len += s;
                continue;
            }
        }
        sorted[kept] = (a, s);
        kept += 1;
    }
    sorted.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SplitMix64;

    #[test]
    fn sorts_as_a_comparison_sort_does_at_every_span() {
        let mut rng = SplitMix64::new(9);
        let mut scratch = Vec::new();
        for span_log2 in [0u32, 8, 12, 20, 33, 40, 48, 56] {
            for n in [0usize, 1, 2, 7, 300, 1024] {
                let base = 1u64 << 40;
                let mut blocks: Vec<(u64, usize)> = (0..n)
                    .map(|i| {
                        let off = rng.below(1u64 << span_log2) << 8;
                        (base + off, i)
                    })
                    .collect();
                let mut expected = blocks.clone();
                expected.sort_by_key(|b| b.0);
                sort_by_address(&mut blocks, &mut scratch);
                let addrs = |v: &[(u64, usize)]| v.iter().map(|b| b.0).collect::<Vec<_>>();
                assert_eq!(addrs(&blocks), addrs(&expected), "span 2^{span_log2}, {n}");
                let mut sizes: Vec<usize> = blocks.iter().map(|b| b.1).collect();
                sizes.sort_unstable();
                assert_eq!(sizes, (0..n).collect::<Vec<_>>(), "every block kept once");
            }
        }
    }

    #[test]
    fn runs_merge_touching_blocks_except_at_boundaries() {
        let sorted = [
            (0x1000, 0x100),
            (0x1100, 0x200),
            (0x1300, 0x100),
            (0x2000, 0x100),
            (0x2100, 0x100),
            (0x5000, 0x100),
        ];
        let mut all = sorted.to_vec();
        merge_runs(&mut all, |_| true);
        assert_eq!(all, [(0x1000, 0x400), (0x2000, 0x200), (0x5000, 0x100)]);
        let mut cut = sorted.to_vec();
        merge_runs(&mut cut, |a| a != 0x1300);
        assert_eq!(
            cut,
            [
                (0x1000, 0x300),
                (0x1300, 0x100),
                (0x2000, 0x200),
                (0x5000, 0x100)
            ]
        );
        let mut none = Vec::new();
        merge_runs(&mut none, |_| true);
        assert!(none.is_empty());
    }
}
