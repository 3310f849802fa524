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
pub(crate) use quick::QUICK_MAX;
pub(crate) use size_class::{block_size, exact_fallback, ExactBlocks};

/// Pushes `value` when `v` has room for it without growing (Vec's own `push` may call the
/// allocator: the quick paths call nothing); false when full.
#[inline(always)]
fn push_within_capacity<T>(v: &mut Vec<T>, value: T) -> bool {
    let Some(slot) = v.spare_capacity_mut().first_mut() else {
        return false;
    };
    slot.write(value);
    // SAFETY: the element at `len` was just initialised, within the capacity.
    unsafe { v.set_len(v.len() + 1) };
    true
}

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
    /// Keeps a freed block where that takes no call (a quick stack, a batch with room, a stack
    /// of fixed blocks with room: a resource's free then needs no out-of-line code); false:
    /// nothing was done, [`FreeStore::give`] must take it.
    #[inline(always)]
    fn give_quick(&mut self, _addr: u64, _size: usize) -> bool {
        false
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

#[cfg(test)]
mod tests {
    use super::push_within_capacity;

    #[test]
    fn pushes_only_within_the_capacity() {
        let mut v = Vec::with_capacity(2);
        assert!(push_within_capacity(&mut v, 1u64));
        assert!(push_within_capacity(&mut v, 2));
        let cap = v.capacity();
        while v.len() < cap {
            assert!(push_within_capacity(&mut v, 3));
        }
        assert!(!push_within_capacity(&mut v, 4), "full: nothing pushed");
        assert_eq!((v.len(), v.capacity(), &v[..2]), (cap, cap, &[1, 2][..]));
        assert!(!push_within_capacity(&mut Vec::<u64>::new(), 5));
    }
}
