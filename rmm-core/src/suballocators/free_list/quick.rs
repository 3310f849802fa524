//! Recently freed small blocks kept apart by exact size, not yet coalesced: the front of a
//! stream's [`super::CoalescingFreeList`] (glibc's tcache and dlmalloc's fast bins are the
//! model).
//!
//! A program that frees and allocates blocks of a few sizes over and over (RMM's
//! `random_allocations` at 1 KiB: four sizes) pays for coalescing on every free and for
//! splitting on every allocation, to end with the same blocks. Here a freed block of at most
//! [`QUICK_MAX`] bytes goes onto its size's stack (at most [`QUICK_CAP`] blocks), and an
//! allocation of that size pops it: a few instructions, no address map touched. A request that
//! finds no block of its size, here or in the coalescing part, is cut from the smallest larger
//! block held here ([`QuickBins::pop_at_least`]). Only when none is held does the list flush the
//! stacks into its coalescing part (every block merged with its free neighbours), before it says
//! it has no block, so a quick block never makes an allocation fail or grow the pool. It also
//! flushes them before any request larger than `QUICK_MAX`, so that small blocks kept apart never
//! cut the large free blocks such requests need (the pipeline's allocation logs fragment no more
//! than without them). After such a request the next
//! [`PAUSE`] small frees skip the stacks: where sizes mix, blocks would only go round through
//! them. The stacks hold at most `QUICK_CAP` blocks of each size and [`QUICK_BYTES`] over all,
//! and only while the list serves small requests: a stream that only frees (its blocks stolen
//! by another) keeps them coalesced, as they move better so.

use super::bitmap::{bin_of, BinBitmap};
use rmm_cuda::ALIGNMENT;

/// Largest block kept here (bins of 256, 512, ... bytes). RMM's `random_allocations` draws
/// sizes up to 64 KiB from 256 sizes, and most of them come back: with 4 KiB here, a pair on
/// the pool's path took 37.5 ns an event on the simulated device (this CPU, pinned), with 64 KiB
/// 14.2-14.6 ns (the arena's 35.4 -> 27.5); the pipeline's logs fragment as before
/// (`fragments_at_most_half_as_much_as_the_pool_on_the_pipeline_logs`: the same figures).
pub(crate) const QUICK_MAX: usize = 65536;
const QUICK_BINS: usize = QUICK_MAX / ALIGNMENT;
/// Blocks of one size kept at most.
pub(crate) const QUICK_CAP: usize = 16;
/// Bytes kept at most over all sizes (16 blocks of each size up to 64 KiB would be 128.5 MiB):
/// still the pool's free memory, flushed before any larger request, any request that finds no
/// block and any growth. 16 MiB cost the 64 KiB workload a third of the gain, 64 MiB a tenth.
pub(crate) const QUICK_BYTES: usize = 64 << 20;

/// Stacks of free block addresses, one per size up to [`QUICK_MAX`].
pub(crate) struct QuickBins {
    addrs: Box<[[u64; QUICK_CAP]; QUICK_BINS]>,
    lens: [u8; QUICK_BINS],
    /// The stacks that hold a block (the coalescing part's bitmap type, only its first
    /// `QUICK_BINS` bins used): [`QuickBins::pop_at_least`] and [`QuickBins::largest`].
    held: BinBitmap,
    count: usize,
    /// Bytes held, at most [`QUICK_BYTES`].
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
            addrs: vec![[0u64; QUICK_CAP]; QUICK_BINS]
                .into_boxed_slice()
                .try_into()
                .expect("QUICK_BINS stacks"),
            lens: [0; QUICK_BINS],
            held: BinBitmap::new(),
            count: 0,
            bytes: 0,
            paused: 0,
            armed: false,
        }
    }
}

/// Small frees that skip the stacks after each larger request.
const PAUSE: u32 = 64;

impl QuickBins {
    /// Keeps the block `[addr, addr + size)` when its size is kept here and its stack has room.
    #[inline(always)]
    pub(crate) fn push(&mut self, addr: u64, size: usize) -> bool {
        if size > QUICK_MAX {
            return false;
        }
        if !self.armed {
            return false;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        let b = bin_of(size);
        let n = self.lens[b] as usize;
        if n == QUICK_CAP || self.bytes + size > QUICK_BYTES {
            return false;
        }
        self.addrs[b][n] = addr;
        self.lens[b] = n as u8 + 1;
        self.held.set(b);
        self.count += 1;
        self.bytes += size;
        true
    }

    /// The block of exactly `size` bytes freed last, if any. Arms the stacks.
    #[inline(always)]
    pub(crate) fn pop(&mut self, size: usize) -> Option<u64> {
        if size > QUICK_MAX {
            return None;
        }
        self.armed = true;
        let b = bin_of(size);
        let n = self.lens[b] as usize;
        if n == 0 {
            return None;
        }
        self.shrink(b);
        Some(self.addrs[b][n - 1])
    }

    /// The last block freed of the smallest size held above `size` (at most [`QUICK_MAX`]), as
    /// (address, size): a request that finds no block of its own size in the list cuts it from
    /// such a block instead of flushing every stack (the arena's streams, which hold a few
    /// superblocks, missed often and flushed thousands of blocks each time).
    pub(crate) fn pop_at_least(&mut self, size: usize) -> Option<(u64, usize)> {
        let b = self.held.first_from(bin_of(size) + 1)?;
        let n = self.lens[b] as usize;
        self.shrink(b);
        Some((self.addrs[b][n - 1], (b + 1) * ALIGNMENT))
    }

    /// A request larger than [`QUICK_MAX`] came: the next small frees go to the coalescing part
    /// (where such requests find them merged), so that a program mixing sizes pays for no
    /// flushes.
    #[inline]
    pub(crate) fn pause(&mut self) {
        self.paused = PAUSE;
    }

    /// Number of blocks held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Size of the largest block held (0 when empty).
    pub(crate) fn largest(&self) -> usize {
        self.held.last().map_or(0, |b| (b + 1) * ALIGNMENT)
    }

    /// The blocks held, as (address, size).
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.lens.iter().enumerate().flat_map(move |(b, &n)| {
            self.addrs[b][..n as usize]
                .iter()
                .map(move |&a| (a, (b + 1) * ALIGNMENT))
        })
    }

    /// Takes out the block `[addr, addr + size)` if it is held.
    pub(crate) fn remove(&mut self, addr: u64, size: usize) -> bool {
        if size > QUICK_MAX {
            return false;
        }
        let b = bin_of(size);
        let n = self.lens[b] as usize;
        let Some(k) = self.addrs[b][..n].iter().position(|&a| a == addr) else {
            return false;
        };
        self.addrs[b].copy_within(k + 1..n, k);
        self.shrink(b);
        true
    }

    /// Bin `b` (not empty) holds one block fewer: its last.
    #[inline(always)]
    fn shrink(&mut self, b: usize) {
        self.lens[b] -= 1;
        if self.lens[b] == 0 {
            self.held.clear(b);
        }
        self.count -= 1;
        self.bytes -= (b + 1) * ALIGNMENT;
    }

    /// Forgets every block held.
    pub(crate) fn clear(&mut self) {
        self.lens = [0; QUICK_BINS];
        while let Some(b) = self.held.first_from(0) {
            self.held.clear(b);
        }
        self.count = 0;
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
        'fill: for size in (ALIGNMENT..=QUICK_MAX).rev().step_by(ALIGNMENT) {
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
