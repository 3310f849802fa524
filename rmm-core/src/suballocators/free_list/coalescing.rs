//! The coalescing best-fit free list shared by the pool and the arena.
//!
//! Free blocks are indexed three ways, so that linking, unlinking and merging are O(1) and a search
//! looks through two size classes at most:
//! - by start and by end address (hash maps): a freed block finds the free blocks touching it on
//!   either side in O(1) and merges with them (RMM scans an address-sorted list for this);
//! - by size: blocks up to 4 MiB sit in exact-size bins (one per 256-byte step) found through a
//!   three-level bitmap, so "the smallest block that fits" costs a few word operations; larger blocks
//!   sit in size classes, 16 per power of two (TLSF's second level), each an unsorted list, with a
//!   bitmap of the classes in use: linking and unlinking a large block is O(1) (an ordered tree
//!   made every split and merge of large blocks cost several O(log n) updates), and the search
//!   looks through the request's class and, if none there fits, the next class in use.
//!
//! Two fronts keep frees apart for a while: the quick bins (`super::quick`) for a stream that
//! frees and allocates the same sizes, and a pending batch (`super::pending`) for a stream that
//! only frees (its blocks allocated on another stream).
//!
//! The fit is exact best fit: the smallest free block that is large enough. Among blocks of that
//! size a bin hands out the one freed last (its memory is the most likely to be in use by work
//! already ordered on the stream, and the choice costs nothing); among large blocks of one size
//! the lowest address.

use super::addr_map::AddrMap;
use super::bitmap::{bin_of, BinBitmap, BINS};
use super::boundaries::ChunkBoundaries;
use super::pending::{merge_runs, sort_by_address};
use super::quick::{QuickBins, QUICK_MAX};
use super::{push_within_capacity, FreeStore};
use rmm_cuda::ALIGNMENT;
use std::sync::Arc;

const NIL: u32 = u32::MAX;
/// Largest size held in the exact-size bins.
const SMALL_MAX: usize = BINS * ALIGNMENT;
/// log2 of `SMALL_MAX`: the first power of two of the large classes.
const LARGE_FIRST_LOG2: u32 = SMALL_MAX.trailing_zeros();
/// Classes per power of two among large blocks (sizes within 1/16 of each other share one).
const LARGE_SUB_LOG2: u32 = 4;
const LARGE_CLASSES: usize = ((usize::BITS - LARGE_FIRST_LOG2) as usize) << LARGE_SUB_LOG2;
const LARGE_WORDS: usize = LARGE_CLASSES.div_ceil(64);

/// The class of a large size (> `SMALL_MAX`): its power of two, then its next 4 bits.
#[inline]
fn large_class(size: usize) -> usize {
    let log2 = usize::BITS - 1 - size.leading_zeros();
    let sub = (size >> (log2 - LARGE_SUB_LOG2)) & ((1 << LARGE_SUB_LOG2) - 1);
    (((log2 - LARGE_FIRST_LOG2) as usize) << LARGE_SUB_LOG2) | sub
}

const _: () = assert!(
    LARGE_WORDS < 64,
    "one summary word covers the large classes' words"
);

/// The large size classes in use, and the first block of each class's list.
struct LargeClasses {
    heads: Box<[u32]>,
    used: [u64; LARGE_WORDS],
    /// Bit `w`: `used[w]` is non-zero. A request served by `top` while no large class is in
    /// use (the common case of a pool carving its portion) then looks at one word, not all
    /// eleven: 55 instructions a take at workload A's 1 MiB before, by callgrind.
    summary: u64,
}

impl LargeClasses {
    fn new() -> Self {
        LargeClasses {
            heads: vec![NIL; LARGE_CLASSES].into_boxed_slice(),
            used: [0; LARGE_WORDS],
            summary: 0,
        }
    }

    /// The first class in use at or above `class`.
    #[inline]
    fn first_from(&self, class: usize) -> Option<usize> {
        let word = class / 64;
        let bits = self.used.get(word)? & (u64::MAX << (class % 64));
        if bits != 0 {
            return Some(word * 64 + bits.trailing_zeros() as usize);
        }
        // The next word in use, by the summary.
        let later = self.summary & (u64::MAX << (word + 1));
        if later == 0 {
            return None;
        }
        let w = later.trailing_zeros() as usize;
        Some(w * 64 + self.used[w].trailing_zeros() as usize)
    }

    fn set(&mut self, class: usize) {
        self.used[class / 64] |= 1 << (class % 64);
        self.summary |= 1 << (class / 64);
    }

    fn clear_class(&mut self, class: usize) {
        let w = class / 64;
        self.used[w] &= !(1 << (class % 64));
        if self.used[w] == 0 {
            self.summary &= !(1 << w);
        }
    }

    /// The highest class in use.
    fn last(&self) -> Option<usize> {
        (self.summary != 0).then(|| {
            let w = 63 - self.summary.leading_zeros() as usize;
            w * 64 + 63 - self.used[w].leading_zeros() as usize
        })
    }

    fn clear(&mut self) {
        for (w, bits) in self.used.iter_mut().enumerate() {
            let mut b = *bits;
            while b != 0 {
                self.heads[w * 64 + b.trailing_zeros() as usize] = NIL;
                b &= b - 1;
            }
            *bits = 0;
        }
        self.summary = 0;
    }
}

/// Puts node `i` at the front of the list that starts at `head`; true when the list was empty.
#[inline(always)]
fn push_front(nodes: &mut [Node], head: &mut u32, i: u32) -> bool {
    let old = *head;
    nodes[i as usize].prev = NIL;
    nodes[i as usize].next = old;
    if old != NIL {
        nodes[old as usize].prev = i;
    }
    *head = i;
    old == NIL
}

/// Takes node `i` out of the list that starts at `head`; true when the list is empty then.
#[inline(always)]
fn remove_from(nodes: &mut [Node], head: &mut u32, i: u32) -> bool {
    let Node { prev, next, .. } = nodes[i as usize];
    if prev == NIL {
        *head = next;
    } else {
        nodes[prev as usize].next = next;
    }
    if next != NIL {
        nodes[next as usize].prev = prev;
    }
    *head == NIL
}

#[derive(Debug, Clone, Copy)]
struct Node {
    addr: u64,
    size: usize,
    /// Neighbours in the size bin or large class.
    prev: u32,
    next: u32,
}

/// Free blocks of 256-byte-multiple sizes, coalesced on insertion.
pub(crate) struct CoalescingFreeList {
    nodes: Vec<Node>,
    vacant: Vec<u32>,
    by_start: AddrMap,
    by_end: AddrMap,
    heads: Box<[u32]>,
    bitmap: BinBitmap,
    /// Blocks above `SMALL_MAX`, except `top`, by size class.
    large: LargeClasses,
    /// One large block kept outside `large` (dlmalloc's "top chunk"): typically the rest of the
    /// portion being carved up, which then shrinks without any tree update.
    top: u32,
    /// The key `top` is filed under in `by_start`: its start when it became top, left behind as
    /// requests carve its front (each carve would otherwise remove and insert a key: 45
    /// instructions of a request that a stream only carving, its frees made on another stream,
    /// makes every time). [`CoalescingFreeList::settle_top`] files it under its start again
    /// before anything else reads or changes `by_start`.
    top_key: u64,
    free_bytes: usize,
    /// Chunk boundaries of the owning resource, and this list's copy of them.
    boundaries: Option<Arc<ChunkBoundaries>>,
    barrier_copy: Vec<u64>,
    barrier_generation: u64,
    /// Small blocks freed lately, not yet coalesced ([`CoalescingFreeList::with_quick_bins`]);
    /// their bytes are in `free_bytes`.
    quick: Option<QuickBins>,
    /// Blocks freed while the quick bins keep none (a stream that only frees, its blocks taken by
    /// another stream), not yet coalesced: sorted and merged [`PENDING_CAP`] at a time
    /// ([`CoalescingFreeList::settle_pending`]), or as soon as anything reads the coalesced part.
    /// Their bytes are in `free_bytes`.
    pending: Vec<(u64, usize)>,
    /// Working space of the pending frees' sort.
    pending_scratch: Vec<(u64, usize)>,
    /// The list served a request since it was last emptied: its frees are then coalesced (or
    /// kept by the quick bins) at once, never left pending.
    served: bool,
}

/// Frees kept in `pending` at most: sorted and merged together, most of a batch's blocks meet
/// their neighbours there, so only the merged runs pay for the address maps.
const PENDING_CAP: usize = 1024;

impl std::fmt::Debug for CoalescingFreeList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoalescingFreeList")
            .field("blocks", &self.len())
            .field("free_bytes", &self.free_bytes)
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl CoalescingFreeList {
    /// An empty list whose blocks may coalesce anywhere (one upstream allocation).
    pub(crate) fn new() -> Self {
        CoalescingFreeList {
            nodes: Vec::new(),
            vacant: Vec::new(),
            by_start: AddrMap::default(),
            by_end: AddrMap::default(),
            heads: vec![NIL; BINS].into_boxed_slice(),
            bitmap: BinBitmap::new(),
            large: LargeClasses::new(),
            top: NIL,
            top_key: 0,
            free_bytes: 0,
            boundaries: None,
            barrier_copy: Vec::new(),
            barrier_generation: u64::MAX,
            quick: None,
            pending: Vec::new(),
            pending_scratch: Vec::new(),
            served: false,
        }
    }

    /// This list with a front of quick bins (`super::quick`): small blocks freed here are kept
    /// by exact size, uncoalesced, until a request finds no block in the coalesced part. For
    /// the lists of streams, where a program frees and allocates the same sizes again and again.
    pub(crate) fn with_quick_bins(self) -> Self {
        CoalescingFreeList {
            quick: Some(QuickBins::default()),
            ..self
        }
    }

    /// An empty list that never merges across the boundaries of `boundaries`.
    pub(crate) fn with_boundaries(boundaries: Arc<ChunkBoundaries>) -> Self {
        CoalescingFreeList {
            boundaries: Some(boundaries),
            ..Self::new()
        }
    }

    /// Number of free blocks.
    pub(crate) fn len(&self) -> usize {
        self.by_start.len() + self.quick.as_ref().map_or(0, QuickBins::len) + self.pending.len()
    }

    /// The free blocks, in no particular order.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        let quick = self.quick.iter().flat_map(QuickBins::blocks);
        self.coalesced_blocks()
            .chain(quick)
            .chain(self.pending.iter().copied())
    }

    /// The blocks of the coalesced part (not the quick bins'), in no particular order.
    fn coalesced_blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.by_start
            .values()
            .map(|i| (self.nodes[i as usize].addr, self.nodes[i as usize].size))
    }

    /// The free block that ends at `end`, as (address, size).
    pub(crate) fn block_ending_at(&self, end: u64) -> Option<(u64, usize)> {
        self.by_end
            .get(end)
            .map(|i| (self.nodes[i as usize].addr, self.nodes[i as usize].size))
            .or_else(|| {
                let mut apart = self
                    .quick
                    .iter()
                    .flat_map(QuickBins::blocks)
                    .chain(self.pending.iter().copied());
                apart.find(|&(a, s)| a + s as u64 == end)
            })
    }

    /// Removes the free block `[addr, addr + size)` if exactly that block is free here.
    pub(crate) fn remove_exact(&mut self, addr: u64, size: usize) -> bool {
        self.settle_pending();
        if self.quick.as_mut().is_some_and(|q| q.remove(addr, size)) {
            self.free_bytes -= size;
            return true;
        }
        self.settle_top();
        match self.by_start.get(addr) {
            Some(i) if self.nodes[i as usize].size == size => {
                self.unlink(i);
                self.by_start.remove(addr);
                self.by_end.remove(addr + size as u64);
                self.release_node(i);
                self.free_bytes -= size;
                true
            }
            _ => false,
        }
    }

    /// A block of `min` bytes at least and `preferred` bytes at most: `preferred` cut from the best
    /// fitting block when one is that large, else the whole largest block. Returns (address, size).
    pub(crate) fn take_between(&mut self, min: usize, preferred: usize) -> Option<(u64, usize)> {
        let largest = self.largest();
        if largest < min {
            return None;
        }
        let want = preferred.max(min).min(largest);
        self.take(want).map(|addr| (addr, want))
    }

    fn alloc_node(&mut self, addr: u64, size: usize) -> u32 {
        let node = Node {
            addr,
            size,
            prev: NIL,
            next: NIL,
        };
        match self.vacant.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    #[inline]
    fn release_node(&mut self, i: u32) {
        self.vacant.push(i);
    }

    /// Files node `i` under its size.
    #[inline(always)]
    fn link(&mut self, i: u32) {
        let size = self.nodes[i as usize].size;
        if size <= SMALL_MAX {
            let bin = bin_of(size);
            if push_front(&mut self.nodes, &mut self.heads[bin], i) {
                self.bitmap.set(bin);
            }
        } else if self.top == NIL {
            self.top = i;
            self.top_key = self.nodes[i as usize].addr;
        } else {
            let class = large_class(size);
            if push_front(&mut self.nodes, &mut self.large.heads[class], i) {
                self.large.set(class);
            }
        }
    }

    /// The smallest (then lowest) block of class `class` of at least `size` bytes.
    #[inline]
    fn best_in_class(&self, class: usize, size: usize) -> Option<u32> {
        let mut best: Option<(usize, u64, u32)> = None;
        let mut i = self.large.heads[class];
        while i != NIL {
            let n = &self.nodes[i as usize];
            if n.size >= size && best.is_none_or(|(s, a, _)| (n.size, n.addr) < (s, a)) {
                best = Some((n.size, n.addr, i));
            }
            i = n.next;
        }
        best.map(|(_, _, i)| i)
    }

    /// Takes node `i` out of its size index.
    #[inline(always)]
    fn unlink(&mut self, i: u32) {
        let size = self.nodes[i as usize].size;
        if size <= SMALL_MAX {
            let bin = bin_of(size);
            if remove_from(&mut self.nodes, &mut self.heads[bin], i) {
                self.bitmap.clear(bin);
            }
        } else if self.top == i {
            self.top = NIL;
        } else {
            let class = large_class(size);
            if remove_from(&mut self.nodes, &mut self.large.heads[class], i) {
                self.large.clear_class(class);
            }
        }
    }

    /// The smallest block of at least `size` bytes.
    #[inline]
    fn best_fit(&self, size: usize) -> Option<u32> {
        if self.by_start.len() == 1 && self.top != NIL && self.nodes[self.top as usize].size >= size
        {
            // The top block is the only one (a stream whose blocks are freed on another stream
            // only carves its portion): no search (61 instructions a request).
            return Some(self.top);
        }
        if size <= SMALL_MAX {
            if let Some(bin) = self.bitmap.first_from(bin_of(size)) {
                // Binned blocks are all smaller than any large one, `top` included.
                return Some(self.heads[bin]);
            }
        }
        let top = (self.top != NIL && self.nodes[self.top as usize].size >= size)
            .then(|| (self.nodes[self.top as usize].size, self.top));
        // Every block of a higher class is larger than any of the request's class: the best fit
        // is in the request's class if one there is large enough, else in the next class used.
        let first = if size > SMALL_MAX {
            large_class(size)
        } else {
            0
        };
        let tree = self.large.first_from(first).and_then(|class| {
            let found = self.best_in_class(class, size).or_else(|| {
                let next = self.large.first_from(class + 1)?;
                self.best_in_class(next, size)
            })?;
            Some((self.nodes[found as usize].size, found))
        });
        match (tree, top) {
            (Some(t), Some(c)) => Some(if t.0 <= c.0 { t.1 } else { c.1 }),
            (t, c) => t.or(c).map(|(_, i)| i),
        }
    }

    /// True when blocks must not merge at `addr`.
    #[inline]
    fn is_barrier(&self, addr: u64) -> bool {
        !self.barrier_copy.is_empty() && self.barrier_copy.contains(&addr)
    }

    #[inline]
    fn refresh_barriers(&mut self) {
        if let Some(b) = &self.boundaries {
            if b.generation() != self.barrier_generation {
                self.barrier_generation = b.copy_into(&mut self.barrier_copy);
            }
        }
    }
}

impl CoalescingFreeList {
    /// True when the quick bins hold a block.
    #[inline(always)]
    fn holds_quick(&self) -> bool {
        self.quick.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// `size` bytes from the front of the smallest larger block the quick bins hold, the rest
    /// given back coalescing ([`super::quick::QuickBins::pop_at_least`]).
    #[inline(never)]
    fn cut_quick(&mut self, size: usize) -> Option<u64> {
        if size > QUICK_MAX {
            return None;
        }
        let (addr, held) = self.quick.as_mut()?.pop_at_least(size)?;
        self.free_bytes -= held;
        self.give_coalescing(addr + size as u64, held - size);
        Some(addr)
    }

    /// Coalesces the quick bins' blocks into the list.
    #[cold]
    #[inline(never)]
    fn flush_quick(&mut self) {
        let Some(mut quick) = self.quick.take() else {
            return;
        };
        for (addr, size) in quick.blocks() {
            self.free_bytes -= size;
            self.give_coalescing(addr, size);
        }
        quick.clear();
        self.quick = Some(quick);
    }

    /// Coalesces the pending frees (see `pending`): sorted by address, each run of touching
    /// blocks merged first, then each run given to the list.
    #[inline(always)]
    fn settle_pending(&mut self) {
        if !self.pending.is_empty() {
            self.merge_pending();
        }
    }

    #[cold]
    #[inline(never)]
    fn merge_pending(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        sort_by_address(&mut pending, &mut self.pending_scratch);
        self.refresh_barriers();
        merge_runs(&mut pending, |a| !self.is_barrier(a));
        for &(addr, size) in &pending {
            self.free_bytes -= size;
            self.give_coalescing(addr, size);
        }
        pending.clear();
        self.pending = pending;
    }

    /// Files `top` in `by_start` under its start again (see `top_key`).
    #[inline(always)]
    fn settle_top(&mut self) {
        if self.top != NIL {
            let start = self.nodes[self.top as usize].addr;
            if self.top_key != start {
                self.by_start.remove(self.top_key);
                self.by_start.insert(start, self.top);
                self.top_key = start;
            }
        }
    }

    /// Takes `size` bytes from the front of node `i`'s block (at least that large).
    #[inline(always)]
    fn take_from(&mut self, i: u32, size: usize) -> u64 {
        if i == self.top {
            let node = &mut self.nodes[i as usize];
            if node.size - size > SMALL_MAX {
                // Still the top block: only its start moves (its `by_start` key stays behind).
                let addr = node.addr;
                node.addr += size as u64;
                node.size -= size;
                self.free_bytes -= size;
                return addr;
            }
            self.settle_top();
        }
        self.unlink(i);
        let Node {
            addr, size: have, ..
        } = self.nodes[i as usize];
        self.by_start.remove(addr);
        if have > size {
            // Hand out the front; the rest keeps its end (and its `by_end` entry).
            let rest = addr + size as u64;
            self.nodes[i as usize].addr = rest;
            self.nodes[i as usize].size = have - size;
            self.by_start.insert(rest, i);
            self.link(i);
        } else {
            self.by_end.remove(addr + size as u64);
            self.release_node(i);
        }
        self.free_bytes -= size;
        addr
    }

    /// [`CoalescingFreeList::give_coalescing`] out of line: the callers of `give`, whose frees
    /// mostly end on a quick stack, then inline that path whole (with `take` and the stream
    /// list's `take` and `give` inlined too, pool and arena at 1 KiB: about 15 instructions a
    /// pair of calls' prologues and epilogues saved).
    #[inline(never)]
    fn give_coalescing_outlined(&mut self, addr: u64, size: usize) {
        self.give_coalescing(addr, size);
    }

    /// Puts back a block, merged with the free blocks touching it.
    #[inline(always)]
    fn give_coalescing(&mut self, addr: u64, size: usize) {
        self.refresh_barriers();
        self.settle_top();
        let end = addr + size as u64;
        let before = if self.is_barrier(addr) {
            None
        } else {
            self.by_end.get(addr)
        };
        let after = if self.is_barrier(end) {
            None
        } else {
            self.by_start.get(end)
        };
        match (before, after) {
            (Some(p), Some(n)) => {
                self.unlink(p);
                self.unlink(n);
                let n_node = self.nodes[n as usize];
                let n_end = n_node.addr + n_node.size as u64;
                self.by_end.remove(addr);
                self.by_start.remove(end);
                self.by_end.insert(n_end, p);
                self.nodes[p as usize].size += size + n_node.size;
                self.release_node(n);
                self.link(p);
            }
            (Some(p), None) => {
                self.unlink(p);
                self.by_end.remove(addr);
                self.by_end.insert(end, p);
                self.nodes[p as usize].size += size;
                self.link(p);
            }
            (None, Some(n)) => {
                self.unlink(n);
                self.by_start.remove(end);
                self.by_start.insert(addr, n);
                self.nodes[n as usize].addr = addr;
                self.nodes[n as usize].size += size;
                self.link(n);
            }
            (None, None) => {
                let i = self.alloc_node(addr, size);
                self.by_start.insert(addr, i);
                self.by_end.insert(end, i);
                self.link(i);
            }
        }
        self.free_bytes += size;
    }

    /// A request the quick bins did not serve: a larger one first merges them back, then the
    /// best fit of the coalesced part; failing that a larger quick block cut to size, else the
    /// quick blocks merged. Kept out of `take`, so that the quick bins' path inlines small.
    #[inline(never)]
    fn take_coalesced(&mut self, size: usize) -> Option<u64> {
        self.settle_pending();
        if size > QUICK_MAX {
            if let Some(q) = &mut self.quick {
                q.pause();
                if !q.is_empty() {
                    // A larger request first merges the small blocks back (glibc consolidates
                    // its fast bins so): kept apart, they would cut the large blocks it needs.
                    self.flush_quick();
                }
            }
        }
        let i = match self.best_fit(size) {
            Some(i) => i,
            // A larger quick block cut to size (the rest coalesced), else the quick blocks
            // coalesced may make one that fits.
            None if self.holds_quick() => {
                if let Some(addr) = self.cut_quick(size) {
                    return Some(addr);
                }
                self.flush_quick();
                self.best_fit(size)?
            }
            None => return None,
        };
        Some(self.take_from(i, size))
    }

    /// The largest block of the coalesced part.
    fn coalesced_largest(&self) -> usize {
        let top = if self.top == NIL {
            0
        } else {
            self.nodes[self.top as usize].size
        };
        let tree = self.large.last().map_or(0, |class| {
            let mut largest = 0;
            let mut i = self.large.heads[class];
            while i != NIL {
                largest = largest.max(self.nodes[i as usize].size);
                i = self.nodes[i as usize].next;
            }
            largest
        });
        if top > 0 || tree > 0 {
            return top.max(tree);
        }
        self.bitmap.last().map_or(0, |bin| (bin + 1) * ALIGNMENT)
    }
}

impl FreeStore for CoalescingFreeList {
    #[inline(always)]
    fn take(&mut self, size: usize) -> Option<u64> {
        debug_assert!(size > 0 && size % ALIGNMENT == 0);
        self.served = true;
        if size <= QUICK_MAX {
            if let Some(addr) = self.quick.as_mut().and_then(|q| q.pop(size)) {
                self.free_bytes -= size;
                return Some(addr);
            }
        }
        self.take_coalesced(size)
    }

    #[inline(always)]
    fn give(&mut self, addr: u64, size: usize) {
        debug_assert!(size > 0 && size % ALIGNMENT == 0);
        if let Some(q) = &mut self.quick {
            if q.push(addr, size) {
                self.free_bytes += size;
                return;
            }
            if !self.served {
                self.pending.push((addr, size));
                self.free_bytes += size;
                if self.pending.len() == PENDING_CAP {
                    self.merge_pending();
                }
                return;
            }
        }
        self.give_coalescing_outlined(addr, size);
    }

    /// Onto a quick stack, or into the pending batch while it has room short of its merge. Not
    /// while the stacks pause: `give` counts such a free off the pause, once (a failed push
    /// here would count it, and `give` again after it).
    #[inline(always)]
    fn give_quick(&mut self, addr: u64, size: usize) -> bool {
        let Some(q) = self.quick.as_mut().filter(|q| !q.pausing()) else {
            return false;
        };
        let kept = q.push(addr, size)
            || (!self.served
                && self.pending.len() + 1 < PENDING_CAP
                && push_within_capacity(&mut self.pending, (addr, size)));
        if kept {
            self.free_bytes += size;
        }
        kept
    }

    #[inline]
    fn give_moved(&mut self, addr: u64, size: usize) {
        debug_assert!(size > 0 && size % ALIGNMENT == 0);
        self.give_coalescing(addr, size);
    }

    fn drain_into(&mut self, out: &mut Vec<(u64, usize)>) {
        let first = out.len();
        out.extend(self.coalesced_blocks());
        // Empty only the bins in use: cheaper than wiping all of them when a list is stolen.
        for &(_, size) in &out[first..] {
            if size <= SMALL_MAX {
                self.heads[bin_of(size)] = NIL;
                self.bitmap.clear(bin_of(size));
            }
        }
        if let Some(q) = self.quick.as_ref().filter(|q| !q.is_empty()) {
            out.extend(q.blocks());
        }
        out.append(&mut self.pending);
        self.nodes.clear();
        self.vacant.clear();
        self.by_start.clear();
        self.by_end.clear();
        self.large.clear();
        self.top = NIL;
        self.free_bytes = 0;
        if let Some(q) = &mut self.quick {
            q.clear();
            q.disarm();
        }
        self.served = false;
    }

    #[inline]
    fn free_bytes(&self) -> usize {
        self.free_bytes
    }

    fn largest(&mut self) -> usize {
        self.settle_pending();
        let quick = self.quick.as_ref().map_or(0, QuickBins::largest);
        self.coalesced_largest().max(quick)
    }

    fn block_count(&self) -> usize {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 1024;

    /// The maximal runs of consecutive units of a model's free set, as (first, end).
    fn free_runs(free: &std::collections::BTreeSet<u64>) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut it = free.iter().copied().peekable();
        std::iter::from_fn(move || {
            let s0 = it.next()?;
            let mut e = s0 + 1;
            while it.peek() == Some(&e) {
                it.next();
                e += 1;
            }
            Some((s0, e))
        })
    }

    fn sorted(list: &CoalescingFreeList) -> Vec<(u64, usize)> {
        let mut v: Vec<_> = list.blocks().collect();
        v.sort_unstable();
        v
    }

    /// The large classes' search through their summary word answers as a scan of every class.
    #[test]
    fn large_classes_find_what_a_scan_finds() {
        let mut c = LargeClasses::new();
        let mut set = vec![false; LARGE_CLASSES];
        let scan = |set: &[bool], from: usize| (from..LARGE_CLASSES).find(|&k| set[k]);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..4_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % LARGE_CLASSES as u64) as usize;
            if set[k] && step % 3 != 0 {
                set[k] = false;
                c.clear_class(k);
            } else if !set[k] {
                set[k] = true;
                c.set(k);
            }
            let from = ((x >> 20) % (LARGE_CLASSES as u64 + 1)) as usize;
            assert_eq!(c.first_from(from), scan(&set, from), "from {from}");
            assert_eq!(c.last(), (0..LARGE_CLASSES).rev().find(|&k| set[k]));
        }
        c.clear();
        assert_eq!((c.first_from(0), c.last()), (None, None));
    }

    #[test]
    fn best_fit_picks_the_smallest_block_that_fits() {
        let mut l = CoalescingFreeList::new();
        // Separated blocks of 1 KiB, 8 KiB, 2 KiB, 16 MiB.
        l.give(0x10_0000, K);
        l.give(0x20_0000, 8 * K);
        l.give(0x30_0000, 2 * K);
        l.give(0x4000_0000, 16 << 20);
        assert_eq!(l.largest(), 16 << 20);
        assert_eq!(l.take(1536), Some(0x30_0000)); // the 2 KiB block, split
        assert_eq!(sorted(&l)[2], (0x30_0000 + 1536, 512));
        assert_eq!(l.take(K), Some(0x10_0000)); // exact fit
        assert_eq!(l.take(5 << 20), Some(0x4000_0000)); // only the large block fits
        assert_eq!(l.take(12 << 20), None);
        assert_eq!(l.free_bytes(), 8 * K + 512 + (11 << 20));
    }

    #[test]
    fn freeing_coalesces_with_both_neighbours() {
        let mut l = CoalescingFreeList::new();
        l.give(0x1000, 256);
        l.give(0x1200, 256);
        assert_eq!(l.len(), 2);
        l.give(0x1100, 256); // bridges the two
        assert_eq!(sorted(&l), vec![(0x1000, 768)]);
        l.give(0x0f00, 256); // before
        l.give(0x1300, 256); // after
        assert_eq!(sorted(&l), vec![(0x0f00, 1280)]);
        assert_eq!(l.free_bytes(), 1280);
        assert_eq!(l.take(1280), Some(0x0f00));
        assert_eq!(l.len(), 0);
        assert_eq!(l.largest(), 0);
    }

    #[test]
    fn blocks_do_not_merge_across_chunk_boundaries() {
        let b = Arc::new(ChunkBoundaries::default());
        b.set(vec![0x2000]);
        let mut l = CoalescingFreeList::with_boundaries(b.clone());
        l.give(0x1000, 0x1000);
        l.give(0x2000, 0x1000);
        assert_eq!(sorted(&l), vec![(0x1000, 0x1000), (0x2000, 0x1000)]);
        // Once the boundary is gone, new frees merge again.
        b.set(Vec::new());
        let a = l.take(0x1000).unwrap();
        l.give(a, 0x1000);
        assert_eq!(sorted(&l), vec![(0x1000, 0x2000)]);
    }

    #[test]
    fn take_between_prefers_the_portion_and_settles_for_the_largest() {
        let mut l = CoalescingFreeList::new();
        l.give(0x10_0000, 64 * K);
        assert_eq!(l.take_between(K, 16 * K), Some((0x10_0000, 16 * K)));
        assert_eq!(
            l.take_between(K, 1 << 20),
            Some((0x10_0000 + 16 * K as u64, 48 * K))
        );
        assert_eq!(l.take_between(K, 16 * K), None);
    }

    /// A list that only receives frees (its stream's blocks allocated on another stream) keeps
    /// them pending and merges them a batch at a time; every read sees them, merged.
    #[test]
    fn frees_of_a_list_that_serves_nothing_are_merged_a_batch_at_a_time() {
        const UNITS: u64 = 3 * PENDING_CAP as u64 + 17;
        let base = 1u64 << 32;
        let mut order: Vec<u64> = (0..UNITS).collect();
        let mut rng = crate::testing::SplitMix64::new(11);
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut l = CoalescingFreeList::new().with_quick_bins();
        for (n, &u) in order.iter().enumerate() {
            l.give(base + u * 256, 256);
            assert_eq!(l.free_bytes(), (n + 1) * 256);
            assert!(l.pending.len() < PENDING_CAP, "merged when full");
        }
        assert!(!l.pending.is_empty(), "the last frees wait");
        let last = order[UNITS as usize - 1];
        assert_eq!(
            l.block_ending_at(base + (last + 1) * 256)
                .map(|b| b.1 >= 256),
            Some(true),
            "a pending block is found by its end"
        );
        let mut blocks: Vec<_> = l.blocks().collect();
        blocks.sort_unstable();
        assert_eq!(
            blocks.iter().map(|b| b.1).sum::<usize>(),
            UNITS as usize * 256
        );
        assert!(blocks.windows(2).all(|w| w[0].0 + w[0].1 as u64 <= w[1].0));
        assert_eq!(l.len(), blocks.len());
        // Reading the largest block merges what waits: one run over everything.
        assert_eq!(l.largest(), UNITS as usize * 256);
        assert_eq!(l.len(), 1);
        // Once the list serves a request, its frees no longer wait (here: a quick stack's).
        assert_eq!(l.take(512), Some(base));
        l.give(base, 512);
        assert!(l.pending.is_empty());
        assert_eq!(l.free_bytes(), UNITS as usize * 256);
        // Emptied (stolen), it keeps frees pending again, and a drain hands them on.
        let mut out = Vec::new();
        l.drain_into(&mut out);
        l.give(base + 0x10_0000, 256);
        l.give(base, 256);
        assert_eq!(l.pending.len(), 2);
        out.clear();
        l.drain_into(&mut out);
        out.sort_unstable();
        assert_eq!(out, [(base, 256), (base + 0x10_0000, 256)]);
        assert_eq!((l.len(), l.free_bytes()), (0, 0));
    }

    /// After a request larger than the stacks keep, the next `PAUSE` small frees skip them,
    /// whether a resource tried the quick way first or not.
    #[test]
    fn a_pause_counts_each_free_once_through_the_quick_way() {
        use super::super::quick::PAUSE;
        let base = 1u64 << 32;
        let mut l = CoalescingFreeList::new().with_quick_bins();
        l.give_moved(base, 256 << 20);
        assert!(l.take(256).is_some(), "a small request arms the stacks");
        let large = l.take(QUICK_MAX + 256).expect("room for a larger request");
        assert!(large > base);
        let small = (0..PAUSE as u64 + 1)
            .map(|_| l.take(256).expect("room"))
            .collect::<Vec<_>>();
        for &a in &small[..PAUSE as usize] {
            // A resource's quick path first, then its general one.
            assert!(!l.give_quick(a, 256), "paused: not the quick way");
            l.give(a, 256);
            assert!(l.quick.as_ref().is_some_and(|q| q.is_empty()));
        }
        assert!(
            l.give_quick(small[PAUSE as usize], 256),
            "the pause is over"
        );
        assert!(!l.quick.as_ref().is_some_and(|q| q.is_empty()));
    }

    #[test]
    fn remove_exact_and_drain() {
        let mut l = CoalescingFreeList::new();
        l.give(0x1000, 0x1000);
        l.give(0x8000, 0x800_0000);
        assert!(!l.remove_exact(0x1000, 0x800));
        assert!(l.remove_exact(0x1000, 0x1000));
        let mut out = Vec::new();
        l.drain_into(&mut out);
        assert_eq!(out, vec![(0x8000, 0x800_0000)]);
        assert_eq!((l.len(), l.free_bytes(), l.largest()), (0, 0, 0));
        l.give(0x1000, 256);
        assert_eq!(l.take(256), Some(0x1000));
    }

    /// Random takes and frees against a model of the free bytes: the blocks are always the
    /// model's maximal free runs (every neighbour merged, none left apart), each found by its
    /// end as by its start.
    #[test]
    fn blocks_are_the_free_runs_under_random_takes_and_frees() {
        // A region of 4,096 units of 256 bytes: every block in the exact-size bins.
        free_runs_under_random_takes_and_frees(256, 4096, 60_000);
        // 1,024 units of 64 KiB: a top block carved from its front (its key left behind) while
        // blocks are freed next to it and taken out exactly.
        free_runs_under_random_takes_and_frees(64 << 10, 1024, 20_000);
    }

    fn free_runs_under_random_takes_and_frees(unit: u64, units: u64, steps: usize) {
        use std::collections::BTreeSet;
        let base = 1u64 << 32;
        let mut rng = crate::testing::SplitMix64::new(11);
        let mut l = CoalescingFreeList::new();
        l.give(base, (units * unit) as usize);
        let mut free: BTreeSet<u64> = (0..units).collect();
        let mut live: Vec<(u64, usize)> = Vec::new();
        let runs_of = |free: &BTreeSet<u64>| -> Vec<(u64, usize)> {
            free_runs(free)
                .map(|(s0, e)| (base + s0 * unit, ((e - s0) * unit) as usize))
                .collect()
        };
        for step in 0..steps {
            if step % 97 == 0 {
                // A whole free run taken out by its address and size, then given back.
                let runs = runs_of(&free);
                if let Some(&(a, n)) = runs.get(rng.below(runs.len() as u64 + 1) as usize) {
                    assert!(l.remove_exact(a, n), "step {step}: run {a:#x} +{n}");
                    assert!(!l.remove_exact(a, n));
                    l.give(a, n);
                }
            }
            if rng.below(2) == 0 || live.is_empty() {
                let units = rng.below(if step % 7 == 0 { 600 } else { 24 }) + 1;
                let size = (units * unit) as usize;
                if let Some(a) = l.take(size) {
                    let first = (a - base) / unit;
                    for u in first..first + units {
                        assert!(free.remove(&u), "take({size}) gave {a:#x}, not free");
                    }
                    live.push((a, size));
                }
            } else {
                let (a, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                l.give(a, size);
                let first = (a - base) / unit;
                free.extend(first..first + size as u64 / unit);
            }
            let runs = runs_of(&free);
            assert_eq!(sorted(&l), runs, "step {step}");
            assert_eq!(l.len(), runs.len());
            assert_eq!(l.free_bytes(), free.len() * unit as usize);
            assert_eq!(l.largest(), runs.iter().map(|r| r.1).max().unwrap_or(0));
            for &(a, n) in &runs {
                assert_eq!(l.block_ending_at(a + n as u64), Some((a, n)));
            }
        }
    }

    /// With quick bins: random takes and frees of small and larger sizes never hand out a byte
    /// twice, keep the free bytes and block counts true, and fail only when no block fits even
    /// after the quick blocks are coalesced (then the blocks are the maximal free runs).
    #[test]
    fn quick_bins_lose_nothing_and_never_fail_a_request_that_fits() {
        use std::collections::BTreeSet;
        const UNITS: u64 = 2048;
        let base = 1u64 << 32;
        let mut rng = crate::testing::SplitMix64::new(5);
        let mut l = CoalescingFreeList::new().with_quick_bins();
        l.give(base, (UNITS * 256) as usize);
        let mut free: BTreeSet<u64> = (0..UNITS).collect();
        let mut live: Vec<(u64, usize)> = Vec::new();
        let mut failures = 0;
        for step in 0..40_000 {
            if rng.below(2) == 0 || live.is_empty() {
                let units = if step % 5 == 0 { 40 } else { 20 };
                let size = (rng.below(units) as usize + 1) * 256;
                match l.take(size) {
                    Some(a) => {
                        let first = (a - base) / 256;
                        for u in first..first + size as u64 / 256 {
                            assert!(free.remove(&u), "take({size}) gave {a:#x}, not free");
                        }
                        live.push((a, size));
                    }
                    None => {
                        failures += 1;
                        // Nothing held apart: the blocks are the free runs, none of them enough.
                        let runs = free_runs(&free).count();
                        let longest = free_runs(&free)
                            .map(|(s0, e)| (e - s0) as usize * 256)
                            .max()
                            .unwrap_or(0);
                        assert!(
                            longest < size,
                            "take({size}) failed with {longest} free in a run"
                        );
                        assert_eq!(l.len(), runs, "step {step}: quick blocks left after a miss");
                    }
                }
            } else {
                let (a, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                l.give(a, size);
                let first = (a - base) / 256;
                free.extend(first..first + size as u64 / 256);
            }
            assert_eq!(l.free_bytes(), free.len() * 256, "step {step}");
            let mut blocks: Vec<_> = l.blocks().collect();
            assert_eq!(blocks.len(), l.len());
            blocks.sort_unstable();
            let held: u64 = blocks.iter().map(|b| b.1 as u64 / 256).sum();
            assert_eq!(held as usize, free.len());
            assert!(blocks.windows(2).all(|w| w[0].0 + w[0].1 as u64 <= w[1].0));
            assert!(l.largest() >= blocks.iter().map(|b| b.1).max().unwrap_or(0));
        }
        assert!(
            failures > 0,
            "the region never filled: the test did not reach the flush"
        );
        let mut out = Vec::new();
        l.drain_into(&mut out);
        assert_eq!(out.iter().map(|b| b.1).sum::<usize>(), free.len() * 256);
        assert_eq!((l.len(), l.free_bytes(), l.largest()), (0, 0, 0));
    }

    #[test]
    fn large_blocks_are_exact_best_fit_against_a_model() {
        // Many large blocks of nearby sizes (several per size class), apart so that none merge;
        // every take must return the smallest fitting block, the lowest address among equals.
        let mut rng = crate::testing::SplitMix64::new(7);
        let mut l = CoalescingFreeList::new();
        let mut model: Vec<(usize, u64)> = Vec::new();
        let mut addr = 1u64 << 40;
        for _ in 0..600 {
            let size = SMALL_MAX + ((rng.next() % (48 << 20)) as usize / ALIGNMENT + 1) * ALIGNMENT;
            l.give(addr, size);
            model.push((size, addr));
            addr += size as u64 + (1 << 20);
        }
        for _ in 0..500 {
            let want = ((rng.next() % (56 << 20)) as usize / ALIGNMENT + 1) * ALIGNMENT;
            let expected = model.iter().filter(|b| b.0 >= want).min().copied();
            let got = l.take(want);
            match expected {
                None => assert_eq!(got, None, "take({want})"),
                Some((size, at)) => {
                    assert_eq!(got, Some(at), "take({want})");
                    model.retain(|&b| b != (size, at));
                    if size > want {
                        model.push((size - want, at + want as u64));
                    }
                }
            }
            assert_eq!(l.largest(), model.iter().map(|b| b.0).max().unwrap_or(0));
        }
    }
}
