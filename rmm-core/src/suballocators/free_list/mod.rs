//! Free-block stores of the sub-allocators: the coalescing best-fit list (pool, arena) and the
//! fixed-size block stack (fixed-size resource), behind one small trait so the stream-ordered
//! machinery (`super::stream_ordered`) serves both.

mod addr_map;
mod bitmap;
mod boundaries;
mod coalescing;
mod fixed;
mod pending;
mod quick;
mod size_class;

pub(crate) use boundaries::{touching_points, ChunkBoundaries};
pub(crate) use coalescing::CoalescingFreeList;
pub(crate) use fixed::FixedBlocks;
pub(crate) use size_class::{block_size, exact_fallback, ExactBlocks};

/// A set of free blocks. Sizes are multiples of 256 bytes and non-zero.
pub(crate) trait FreeStore: Send + 'static {
    /// Takes a block of at least `size` bytes, of which the caller owns exactly `size`.
    fn take(&mut self, size: usize) -> Option<u64>;
    /// Puts back a block of `size` bytes that a caller freed.
    fn give(&mut self, addr: u64, size: usize);
    /// Puts back a block moved here from elsewhere (fresh memory, another stream's list): as
    /// [`FreeStore::give`], except that a store keeping its own recent frees apart (the quick
    /// bins of [`CoalescingFreeList`]) merges such a block at once.
    fn give_moved(&mut self, addr: u64, size: usize) {
        self.give(addr, size);
    }
    /// Moves every block into `out` as (address, size), leaving the store empty.
    fn drain_into(&mut self, out: &mut Vec<(u64, usize)>);
    /// Bytes held.
    fn free_bytes(&self) -> usize;
    /// Size of the largest block (0 when empty); a store that defers coalescing does it first.
    fn largest(&mut self) -> usize;
    /// Number of blocks.
    fn block_count(&self) -> usize;
}
