//! Recently freed blocks kept apart by size, not yet coalesced: the front of a stream's
//! [`super::CoalescingFreeList`] (glibc's tcache and dlmalloc's fast bins are the model).
//!
//! A program that frees and allocates blocks of a few sizes over and over (RMM's
//! `random_allocations` at 1 KiB: four sizes) pays for coalescing on every free and for
//! splitting on every allocation, to end with the same blocks. Here a freed block of at most
//! [`QUICK_MAX`] bytes goes onto its size's stack (at most [`QUICK_CAP`] blocks), and an
//! allocation of that size pops it: a few instructions, no address map touched. Up to
//! [`EXACT_MAX`] a stack holds one exact size, above it one size class (`super::size_class`),
//! so that random sizes find a block again. A request that
//! finds no block of its size, here or in the coalescing part, is cut from the smallest larger
//! block held here ([`QuickBins::pop_at_least`]). Only when none is held does the list flush the
//! stacks into its coalescing part (every block merged with its free neighbours), before it says
//! it has no block, so a quick block never makes an allocation fail or grow the pool. It also
//! flushes them before any request larger than `QUICK_MAX`, so that blocks kept apart never
//! cut the large free blocks such requests need (the pipeline's allocation logs fragment no more
//! than without them). After such a request the next
//! [`PAUSE`] small frees skip the stacks: where sizes mix, blocks would only go round through
//! them. The stacks hold at most `QUICK_CAP` blocks of each size and [`QUICK_BYTES`] over all,
//! and only while the list serves small requests: a stream that only frees (its blocks stolen
//! by another) keeps its frees in a batch instead, merged as a whole (`super::pending`).

use super::bitmap::BinBitmap;
use super::size_class::{block_size, class_index, class_size, CLASSED_MAX, CLASS_COUNT, EXACT_MAX};
use rmm_cuda::ALIGNMENT;

/// Largest block kept here: the largest of the size classes.
pub(crate) const QUICK_MAX: usize = CLASSED_MAX;
const EXACT_BINS: usize = EXACT_MAX / ALIGNMENT;
const QUICK_BINS: usize = EXACT_BINS + CLASS_COUNT;

/// The stack of a block of `size` bytes (at most [`QUICK_MAX`], a [`block_size`]).
#[inline(always)]
fn quick_bin(size: usize) -> usize {
    if size <= EXACT_MAX {
        return size / ALIGNMENT - 1;
    }
    EXACT_BINS + class_index(size)
}

/// The size of the blocks of stack `b`.
#[inline(always)]
fn bin_size(b: usize) -> usize {
    if b < EXACT_BINS {
        return (b + 1) * ALIGNMENT;
    }
    class_size(b - EXACT_BINS)
}

/// True for the sizes the stacks keep: a [`block_size`] of at most [`QUICK_MAX`] (a block cut
/// to another size, by a stream taking a portion's rest for instance, is coalesced).
#[inline(always)]
fn kept_size(size: usize) -> bool {
    size <= EXACT_MAX || (size <= QUICK_MAX && block_size(size) == size)
}

/// Blocks of one size kept at most. RMM's `random_allocations` at 1 KiB (four sizes, a few
/// dozen blocks live) overflowed stacks of 16 on 2% of its frees, each then coalesced and cut
/// again (15 instructions a pair on average); with 32, 0.5%: pool and arena 5% faster there,
/// the larger cells unchanged. The stacks are zeroed memory whose pages become resident only
/// as sizes are used (`QuickBins::addrs`).
pub(crate) const QUICK_CAP: usize = 32;
/// Bytes kept at most over all sizes: still the pool's free memory, flushed before any larger
/// request, any request that finds no block and any growth. With stacks up to 64 KiB, 16 MiB
/// cost the 64 KiB workload a third of the gain, 64 MiB a tenth; with the size classes up to
/// 4 MiB, 64 MiB kept too few blocks of 1 to 4 MiB (pool, 4 MiB workload, simulated device,
/// this CPU pinned: about 45 ns an event), 256 MiB 32-47 ns, 512 MiB 21-31 ns.
pub(crate) const QUICK_BYTES: usize = 512 << 20;

/// Stacks of free block addresses, one per exact size up to [`EXACT_MAX`] and one per size class
/// above it, to [`QUICK_MAX`].
pub(crate) struct QuickBins {
    /// `QUICK_BINS` stacks of `QUICK_CAP` addresses, stack `b` from `b * QUICK_CAP`. One flat
    /// run of `u64`s, so that `vec!` takes it zeroed from the allocator and only the pages of
    /// the sizes used become resident (`vec!` of arrays of more than 16 writes every element:
    /// 303 KB resident a stream).
    addrs: Box<[u64]>,
    lens: [u8; QUICK_BINS],
    /// The stacks that hold a block (the coalescing part's bitmap type, only its first
    /// `QUICK_BINS` bins used): [`QuickBins::pop_at_least`] and [`QuickBins::largest`].
    held: BinBitmap,
    /// Bytes held, at most [`QUICK_BYTES`] (0 exactly when no block is: sizes are not 0).
    bytes: usize,
    /// Small frees still to go to the coalescing part after a larger request
    /// ([`QuickBins::pause`]).
    paused: u32,
    /// The list served a small request since it was last emptied ([`QuickBins::pop`]): frees
    /// are kept here only then, so a stream that frees but never allocates (its blocks taken by
    /// another stream) keeps them coalesced.
    armed: bool,
}

impl Default for QuickBins {
    fn default() -> Self {
        QuickBins {
            addrs: vec![0u64; QUICK_CAP * QUICK_BINS].into_boxed_slice(),
            lens: [0; QUICK_BINS],
            held: BinBitmap::new(),
            bytes: 0,
            paused: 0,
            armed: false,
        }
    }
}

/// Small frees that skip the stacks after each larger request.
pub(super) const PAUSE: u32 = 64;

impl QuickBins {
    /// Keeps the block `[addr, addr + size)` when its size is kept here and its stack has room.
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64, size: usize) -> bool {
        if !kept_size(size) {
            return false;
        }
        if !self.armed {
            return false;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        let b = quick_bin(size);
        debug_assert!(b < QUICK_BINS);
        // SAFETY: `quick_bin` of a kept size is below QUICK_BINS (the unit tests walk every one).
        let len = unsafe { self.lens.get_unchecked_mut(b) };
        let n = *len as usize;
        if n == QUICK_CAP || self.bytes + size > QUICK_BYTES {
            return false;
        }
        *len = n as u8 + 1;
        // SAFETY: b as above and n < QUICK_CAP just checked: within the QUICK_BINS stacks.
        unsafe { *self.addrs.get_unchecked_mut(b * QUICK_CAP + n) = addr };
        if n == 0 {
            // (Its bit is set already otherwise: three words' read-modify-write saved.)
            self.held.set(b);
        }
        self.bytes += size;
        true
    }

    /// The block of exactly `size` bytes freed last, if any. Arms the stacks.
    #[inline(always)]
    pub(crate) fn pop(&mut self, size: usize) -> Option<u64> {
        if !kept_size(size) {
            return None;
        }
        self.armed = true;
        let b = quick_bin(size);
        debug_assert!(b < QUICK_BINS);
        // SAFETY: `quick_bin` of a kept size is below QUICK_BINS.
        let n = unsafe { *self.lens.get_unchecked(b) } as usize;
        if n == 0 {
            return None;
        }
        self.shrink(b, size);
        // SAFETY: b as above; 0 < n <= QUICK_CAP, the stack's length.
        Some(unsafe { *self.addrs.get_unchecked(b * QUICK_CAP + n - 1) })
    }

    /// The last block freed of the smallest size held above `size` (at most [`QUICK_MAX`]), as
    /// (address, size): a request that finds no block of its own size in the list cuts it from
    /// such a block instead of flushing every stack (the arena's streams, which then held a few
    /// 1 MiB superblocks, missed often and flushed thousands of blocks each time).
    pub(crate) fn pop_at_least(&mut self, size: usize) -> Option<(u64, usize)> {
        let b = self.held.first_from(quick_bin(block_size(size)) + 1)?;
        let (n, size) = (self.lens[b] as usize, bin_size(b));
        self.shrink(b, size);
        Some((self.stack(b)[n - 1], size))
    }

    /// A request larger than [`QUICK_MAX`] came: the next small frees go to the coalescing part
    /// (where such requests find them merged), so that a program mixing sizes pays for no
    /// flushes.
    #[inline]
    pub(crate) fn pause(&mut self) {
        self.paused = PAUSE;
    }

    /// True when no block is held.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// True while small frees skip the stacks after a larger request ([`QuickBins::pause`]):
    /// each such free that reaches [`QuickBins::push`] counts one off.
    #[inline(always)]
    pub(crate) fn pausing(&self) -> bool {
        self.paused > 0
    }

    /// Number of blocks held (a sum over the stacks: for statistics).
    pub(crate) fn len(&self) -> usize {
        self.lens.iter().map(|&n| n as usize).sum()
    }

    /// Size of the largest block held (0 when empty).
    pub(crate) fn largest(&self) -> usize {
        self.held.last().map_or(0, bin_size)
    }

    /// The blocks held, as (address, size).
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.lens.iter().enumerate().flat_map(move |(b, &n)| {
            self.stack(b)[..n as usize]
                .iter()
                .map(move |&a| (a, bin_size(b)))
        })
    }

    /// Takes out the block `[addr, addr + size)` if it is held.
    pub(crate) fn remove(&mut self, addr: u64, size: usize) -> bool {
        if !kept_size(size) {
            return false;
        }
        let b = quick_bin(size);
        let n = self.lens[b] as usize;
        let Some(k) = self.stack(b)[..n].iter().position(|&a| a == addr) else {
            return false;
        };
        self.stack_mut(b).copy_within(k + 1..n, k);
        self.shrink(b, size);
        true
    }

    /// Stack `b`'s room (its first `lens[b]` entries are the blocks).
    #[inline]
    fn stack(&self, b: usize) -> &[u64] {
        &self.addrs[b * QUICK_CAP..(b + 1) * QUICK_CAP]
    }

    /// Stack `b`'s room, to change.
    #[inline]
    fn stack_mut(&mut self, b: usize) -> &mut [u64] {
        &mut self.addrs[b * QUICK_CAP..(b + 1) * QUICK_CAP]
    }

    /// Bin `b` (not empty) of blocks of `size` bytes holds one block fewer: its last.
    #[inline(always)]
    fn shrink(&mut self, b: usize, size: usize) {
        self.lens[b] -= 1;
        if self.lens[b] == 0 {
            self.held.clear(b);
        }
        self.bytes -= size;
    }

    /// Forgets every block held.
    pub(crate) fn clear(&mut self) {
        self.lens = [0; QUICK_BINS];
        while let Some(b) = self.held.first_from(0) {
            self.held.clear(b);
        }
        self.bytes = 0;
    }

    /// Keeps no frees until the next small request (the list was emptied: stolen, gathered).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stacks_hold_at_most_quick_bytes() {
        let mut q = QuickBins::default();
        assert_eq!(q.pop(QUICK_MAX), None); // arms the stacks
        let (mut kept, mut addr) = (0usize, 0u64);
        'fill: for size in (0..QUICK_BINS).rev().map(bin_size) {
            for _ in 0..QUICK_CAP {
                addr += size as u64;
                if !q.push(addr, size) {
                    break 'fill;
                }
                kept += size;
            }
        }
        assert!(
            kept <= QUICK_BYTES && kept + QUICK_MAX > QUICK_BYTES,
            "{kept}"
        );
        assert_eq!(q.blocks().map(|(_, s)| s).sum::<usize>(), kept);
        // A block taken out makes room for one of its size again.
        let top = q.pop(QUICK_MAX).expect("the largest size is held");
        assert!(q.push(top, QUICK_MAX));
        q.clear();
        assert!(q.push(1, QUICK_MAX), "emptied: room again");
    }

    #[test]
    fn a_stack_per_exact_size_then_per_class() {
        let mut last_bin = 0;
        for bytes in (1..=QUICK_MAX + 8192).step_by(37) {
            let size = block_size(bytes);
            if size <= QUICK_MAX {
                let b = quick_bin(size);
                assert!(b < QUICK_BINS && b >= last_bin, "{size}: stack {b}");
                assert_eq!(bin_size(b), size, "stack {b}");
                assert!(kept_size(size));
                last_bin = b;
            } else {
                assert!(!kept_size(size));
            }
        }
        assert_eq!(last_bin, QUICK_BINS - 1);
        assert!(
            !kept_size(EXACT_MAX + 256),
            "not a class size: coalesced, never stacked"
        );
    }

    #[test]
    fn stacks_by_size_last_in_first_out_bounded() {
        let mut q = QuickBins::default();
        assert!(
            !q.push(0x1000, 256),
            "kept only once the list served a small request"
        );
        assert_eq!(q.pop(256), None);
        assert!(q.push(0x1000, 256));
        assert!(q.push(0x2000, 256));
        assert!(q.push(0x3000, 1024));
        assert!(!q.push(0x9000, QUICK_MAX + 256), "too large to keep");
        assert_eq!((q.len(), q.largest()), (3, 1024));
        assert_eq!(q.pop(512), None);
        assert_eq!(q.pop(256), Some(0x2000));
        assert!(q.remove(0x1000, 256));
        assert!(!q.remove(0x1000, 256));
        assert_eq!(q.pop(256), None);
        for k in 0..QUICK_CAP as u64 {
            assert!(q.push(0x10_0000 + k * 4096, 4096));
        }
        assert!(!q.push(0x20_0000, 4096), "the stack is full");
        assert_eq!(q.largest(), 4096);
        let blocks: Vec<_> = q.blocks().collect();
        assert_eq!(blocks.len(), 1 + QUICK_CAP);
        assert_eq!(blocks[0], (0x3000, 1024));
        q.clear();
        assert_eq!((q.len(), q.largest(), q.blocks().count()), (0, 0, 0));
        q.pause();
        for _ in 0..PAUSE {
            assert!(!q.push(0x1000, 256), "paused after a larger request");
        }
        assert!(q.push(0x1000, 256));
    }

    #[test]
    fn pop_at_least_gives_the_smallest_larger_size_held() {
        let mut q = QuickBins::default();
        assert_eq!(q.pop(256), None); // arms the stacks
        assert_eq!(q.pop_at_least(256), None, "nothing held");
        assert!(q.push(0x1000, 1024));
        assert!(q.push(0x2000, 1024));
        assert!(q.push(0x8000, 40 * 1024)); // past the first word of the bitmap
        assert!(q.push(0x3000, QUICK_MAX));
        assert_eq!(
            q.pop_at_least(1024),
            Some((0x8000, 40 * 1024)),
            "strictly larger"
        );
        assert_eq!(
            q.pop_at_least(256),
            Some((0x2000, 1024)),
            "the last freed first"
        );
        assert_eq!(q.pop_at_least(256), Some((0x1000, 1024)));
        assert_eq!(q.pop_at_least(512), Some((0x3000, QUICK_MAX)));
        assert_eq!(q.pop_at_least(256), None, "all taken");
        assert_eq!(
            q.pop_at_least(QUICK_MAX),
            None,
            "none is larger than the largest kept"
        );
        assert_eq!((q.len(), q.blocks().count()), (0, 0));
        assert!(q.push(0x4000, 2048));
        q.clear();
        assert_eq!(q.pop_at_least(256), None, "cleared");
    }
}
