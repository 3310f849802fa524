//! The sizes of the pool's and the arena's blocks: a request's bytes rounded up to 256, and
//! between [`EXACT_MAX`] and [`CLASSED_MAX`] to one of [`CLASSES`] sizes per power of two (as
//! PyTorch's `roundup_power2_divisions` and jemalloc's size classes do), so that a freed block
//! serves the next request of about its size whole, from its class's quick stack
//! (`super::quick`), with no cut and no merge.
//!
//! A request whose class finds no room although its exact size would (a chunk or an arena of
//! that very size, say) gets its exact size instead of growing the pool or failing; such blocks
//! are remembered ([`ExactBlocks`]) so that their free gives back what they hold.

use crate::resource::aligned_size;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest block of exact size (a multiple of 256). RMM's `random_allocations` draws sizes up to
/// 64 KiB from 256 sizes, which come back as they are. The pipeline's small buffers (per-cell
/// and per-gene vectors, 75 to 160 KB), rounded up to classes, took the streamed allocation
/// log's expandable pool from 320 to 384 MiB held at its peak, with 8 to 64 classes per power
/// of two (its blocks placed otherwise); rounded from 256 KiB up, they leave both logs' figures
/// as they were (`fragments_less_than_the_pool_and_no_more_than_recorded_on_the_pipeline_logs`).
pub(crate) const EXACT_MAX: usize = 256 << 10;
/// Largest block rounded to a class: larger requests (the pipeline's arrays) keep their size.
pub(crate) const CLASSED_MAX: usize = 4 << 20;
/// Size classes per power of two: a block is at most 1/32 larger than asked (with 16, the
/// in-memory pipeline log's expandable pool fragmented a little more at its peak: 0.055
/// against 0.053).
const CLASSES: usize = 32;
const CLASS_BITS: u32 = CLASSES.trailing_zeros();
/// Number of classes, between [`EXACT_MAX`] and [`CLASSED_MAX`].
pub(crate) const CLASS_COUNT: usize =
    (CLASSED_MAX.trailing_zeros() - EXACT_MAX.trailing_zeros()) as usize * CLASSES;

/// True for the request sizes that take a size class: above [`EXACT_MAX`], at most
/// [`CLASSED_MAX`].
#[inline(always)]
fn classed(bytes: usize) -> bool {
    bytes > EXACT_MAX && bytes <= CLASSED_MAX
}

/// The bytes a pool or arena block of `bytes` takes, unless [`ExactBlocks`] says otherwise.
#[inline(always)]
pub(crate) fn block_size(bytes: usize) -> usize {
    if classed(bytes) {
        class_of(bytes)
    } else {
        aligned_size(bytes)
    }
}

/// The size of the class `bytes` ([`classed`]) falls in.
#[inline(always)]
fn class_of(bytes: usize) -> usize {
    let step = 1usize << (log2_below(bytes) - CLASS_BITS);
    (bytes + step - 1) & !(step - 1)
}

/// `k` with `2^k < bytes <= 2^(k + 1)` (`bytes > 1`).
#[inline(always)]
fn log2_below(bytes: usize) -> u32 {
    usize::BITS - 1 - (bytes - 1).leading_zeros()
}

/// The index of the class of `size` bytes (a [`block_size`] above [`EXACT_MAX`], at most
/// [`CLASSED_MAX`]), from 0 for the smallest to `CLASS_COUNT - 1`.
#[inline(always)]
pub(crate) fn class_index(size: usize) -> usize {
    let k = log2_below(size);
    (k - EXACT_MAX.trailing_zeros()) as usize * CLASSES + (size >> (k - CLASS_BITS)) - CLASSES - 1
}

/// The size of class `i` ([`class_index`]'s inverse).
#[inline(always)]
pub(crate) fn class_size(i: usize) -> usize {
    let k = EXACT_MAX.trailing_zeros() + (i / CLASSES) as u32;
    (CLASSES + 1 + i % CLASSES) << (k - CLASS_BITS)
}

/// The size to try when the class of `bytes` (`size`) found no room: its exact size, where that
/// is smaller.
#[inline]
pub(crate) fn exact_fallback(bytes: usize, size: usize) -> Option<usize> {
    let exact = aligned_size(bytes);
    (exact < size).then_some(exact)
}

/// The live blocks a resource handed out at their exact size although their class is larger
/// ([`exact_fallback`]). Rare (memory too tight for the class), so a set under a lock, and a
/// count that lets every other free skip it.
#[derive(Default)]
pub(crate) struct ExactBlocks {
    count: AtomicUsize,
    addrs: Mutex<HashSet<u64>>,
}

impl ExactBlocks {
    /// The block `ptr` holds `aligned_size(bytes)` bytes, not its class's.
    #[cold]
    pub(crate) fn insert(&self, ptr: u64) {
        if self.addrs.lock().insert(ptr) {
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    /// The bytes the live block `ptr`, allocated as `bytes`, holds.
    #[inline(always)]
    pub(crate) fn size_of(&self, ptr: u64, bytes: usize) -> usize {
        if !classed(bytes) {
            return aligned_size(bytes);
        }
        let size = class_of(bytes);
        if size == aligned_size(bytes) || self.count.load(Ordering::Acquire) == 0 {
            return size;
        }
        self.lookup(ptr, bytes, size)
    }

    /// The bytes a live block allocated as `bytes` holds when that needs no lookup and its free
    /// has nothing to forget (the quick paths): `None` for a classed size while blocks of exact
    /// size are live.
    #[inline(always)]
    pub(crate) fn plain_size(&self, bytes: usize) -> Option<usize> {
        if !classed(bytes) {
            Some(aligned_size(bytes))
        } else if self.count.load(Ordering::Acquire) == 0 {
            Some(class_of(bytes))
        } else {
            None
        }
    }

    #[cold]
    fn lookup(&self, ptr: u64, bytes: usize, size: usize) -> usize {
        if self.addrs.lock().contains(&ptr) {
            aligned_size(bytes)
        } else {
            size
        }
    }

    /// The block `ptr` of `size` bytes ([`ExactBlocks::size_of`]), allocated as `bytes`, is
    /// freed: forgets it if it is one of these (only they, among classed sizes, hold exactly
    /// `aligned_size(bytes)`; a size that is its own class is looked up only while some are
    /// live), without working the class out again.
    #[inline(always)]
    pub(crate) fn freed(&self, ptr: u64, bytes: usize, size: usize) {
        if classed(bytes)
            && size == aligned_size(bytes)
            && self.count.load(Ordering::Acquire) > 0
            && self.addrs.lock().remove(&ptr)
        {
            self.count.fetch_sub(1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmm_cuda::ALIGNMENT;

    #[test]
    fn classes_round_up_by_at_most_a_step() {
        for bytes in (1..=CLASSED_MAX + 8192).step_by(37) {
            let size = block_size(bytes);
            assert!(
                size >= bytes && size.is_multiple_of(ALIGNMENT),
                "{bytes} -> {size}"
            );
            assert!(
                size - bytes < ALIGNMENT.max(bytes / CLASSES),
                "{bytes} -> {size}"
            );
            assert_eq!(block_size(size), size, "a block size is its own class");
            if !classed(bytes) {
                assert_eq!(size, aligned_size(bytes));
            }
        }
        assert_eq!(block_size(EXACT_MAX + 1), EXACT_MAX + EXACT_MAX / CLASSES);
        // Between 512 KiB and 1 MiB the classes are 16 KiB apart.
        assert_eq!(
            block_size(1_000_000),
            1_000_000_usize.next_multiple_of(16 << 10)
        );
        assert_eq!(
            exact_fallback(1_000_000, block_size(1_000_000)),
            Some(1_000_192)
        );
        assert_eq!(exact_fallback(1000, block_size(1000)), None);
    }

    #[test]
    fn exact_blocks_give_back_what_they_hold() {
        let exact = ExactBlocks::default();
        let bytes = 1_000_000;
        assert_eq!(exact.size_of(0x1000, bytes), block_size(bytes));
        exact.insert(0x1000);
        assert_eq!(exact.size_of(0x1000, bytes), aligned_size(bytes));
        assert_eq!(
            exact.size_of(0x9000, bytes),
            block_size(bytes),
            "another block"
        );
        assert_eq!(
            exact.size_of(0x1000, 1000),
            1024,
            "no class below EXACT_MAX"
        );
        exact.freed(0x1000, bytes, aligned_size(bytes));
        assert_eq!(exact.size_of(0x1000, bytes), block_size(bytes), "forgotten");
        assert_eq!(exact.count.load(Ordering::Relaxed), 0);
    }
}
