//! The pool: coalescing best-fit sub-allocation of memory taken from an upstream in large chunks
//! (RMM's `pool_memory_resource`, faster and easier to diagnose).
//!
//! Where the memory is:
//! - each stream's free list (`crate::suballocators::stream_ordered`): blocks freed on that
//!   stream, reused at once by it, by other streams after an event wait;
//! - the reservoir: memory no work has touched yet (new chunks, and everything after
//!   [`PoolResource::release`] synchronised). A stream takes a *portion* of it at a time (1/16 of
//!   the pool within 1 MiB .. 1 GiB, at least what it asked), so streams rarely come back for more.
//!
//! An allocation looks in its stream's list (the only step on the common path: one uncontended
//! lock, a bitmap search, two hash-map updates; for a small size freed there lately, a pop from
//! its quick bin, see `free_list::quick`); then carves a portion from the reservoir; then
//! steals the list of another stream that has a large enough block (one event record and wait);
//! when none has, takes every list and the reservoir's fragments so they coalesce. Then, one thread
//! at a time and while no blocks are on their way between lists, it gathers every free block of
//! the pool; only when no block fits anywhere does it grow the pool from the upstream, taking its
//! block from the new chunk before any other stream can. When the upstream refuses, it gathers once
//! more, then fails with an [`OutOfMemory`] that says what the pool holds.
//!
//! Free blocks are found by address through hash maps of their starts and ends (O(1) coalescing)
//! rather than kept in an address-sorted list: the same merges as RMM's address-ordered list,
//! without its linear scans.

mod chunks;
mod growth;
mod live;

use crate::error::{human_bytes, MemoryError, OutOfMemory, Result};
use crate::resource::{aligned_size, check_stream, MemoryKind, MemoryResource, SharedResource};
use crate::suballocators::free_list::{
    block_size, exact_fallback, ChunkBoundaries, CoalescingFreeList, ExactBlocks, FreeStore,
    QUICK_MAX,
};
use crate::suballocators::stream_ordered::{Entry, StreamList, StreamLists};
use chunks::{Chunk, Chunks};
use live::LiveBlocks;
use parking_lot::Mutex;
use rmm_cuda::{Device, Stream, ALIGNMENT};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Sizes of a [`PoolResource`].
///
/// ```
/// use rmm_core::PoolOptions;
/// let options = PoolOptions::sized(1 << 30, Some(8 << 30)); // 1 GiB now, at most 8 GiB
/// assert_eq!(options.initial_pool_size, Some(1 << 30));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Bytes taken from the upstream at construction. `None`: half of the device's free memory
    /// (the default of RMM's `reinitialize`).
    pub initial_pool_size: Option<usize>,
    /// The pool never holds more than this. `None`: no maximum.
    pub maximum_pool_size: Option<usize>,
    /// The checked mode: keep a map of live blocks so that a double free, a pointer this pool did
    /// not hand out, or a free with another block size (256-byte steps; size classes from 256 KiB
    /// to 4 MiB, `free_list::size_class`) is refused with
    /// [`MemoryError::InvalidDeallocation`] and changes nothing, instead of corrupting the free
    /// lists. Without it the pool trusts [`MemoryResource::deallocate`]'s contract, as RMM does.
    ///
    /// It works the same in every build. Its cost is one uncontended lock (the map is split into
    /// 64 shards by address) and one hash-map update per allocation and per free: about 10 to
    /// 20 ns per event on the random-allocation trace, on top of the pool's 25 to 45 ns (1.2x to
    /// 1.7x, one and two threads, simulated device; `tests/validation_cost.rs` measures it). That
    /// is why it is on by default only in debug builds of this crate: turn it on in release where
    /// a misbehaving caller is suspected, or put a [`crate::TrackingAdaptor`] in front of any
    /// resource, which checks the same.
    ///
    /// ```
    /// use rmm_core::{CudaResource, Device, MemoryError, MemoryResource, PoolOptions, PoolResource};
    /// let device = Device::simulated(1 << 30);
    /// let options = PoolOptions { validate_deallocations: true, ..PoolOptions::sized(1 << 20, None) };
    /// let pool = PoolResource::new(CudaResource::new(&device), options)?;
    /// let stream = device.new_stream()?;
    /// let p = pool.allocate(1000, &stream)?;
    /// // SAFETY: allocated above with this size. In the checked mode the pool checks the first two
    /// // conditions of `deallocate`'s contract itself, so the second call is sound as well.
    /// unsafe { pool.deallocate(p, 1000, &stream)? };
    /// let twice = unsafe { pool.deallocate(p, 1000, &stream) };
    /// assert!(matches!(twice, Err(MemoryError::InvalidDeallocation(_))));
    /// assert_eq!(pool.free_bytes(), pool.pool_size(), "nothing was corrupted");
    /// # Ok::<(), MemoryError>(())
    /// ```
    pub validate_deallocations: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            initial_pool_size: None,
            maximum_pool_size: None,
            validate_deallocations: cfg!(debug_assertions),
        }
    }
}

impl PoolOptions {
    /// A pool of `initial` bytes that may grow up to `maximum`.
    pub fn sized(initial: usize, maximum: Option<usize>) -> Self {
        PoolOptions {
            initial_pool_size: Some(initial),
            maximum_pool_size: maximum,
            ..Default::default()
        }
    }
}

/// A pool sub-allocator over the upstream `U` (any [`MemoryResource`], e.g. [`SharedResource`] or
/// a concrete resource for static dispatch).
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource};
/// let device = Device::simulated(1 << 30);
/// let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(64 << 20, None))?;
/// let stream = device.new_stream()?;
/// let ptr = pool.allocate(1 << 20, &stream)?;
/// assert_eq!(pool.pool_size(), 64 << 20);
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { pool.deallocate(ptr, 1 << 20, &stream)? };
/// assert_eq!(pool.free_bytes(), 64 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PoolResource<U: MemoryResource = SharedResource> {
    upstream: U,
    device: Device,
    maximum: Option<usize>,
    lists: StreamLists<CoalescingFreeList>,
    reservoir: Mutex<CoalescingFreeList>,
    chunks: Mutex<Chunks>,
    pool_size: AtomicUsize,
    /// Serialises growth and release, so the maximum holds and growth is not repeated by
    /// threads that failed at the same moment.
    growth: Mutex<()>,
    /// The checked mode's live blocks ([`PoolOptions::validate_deallocations`]).
    live: Option<LiveBlocks>,
    /// Live blocks of their exact size where their class found no room.
    exact: ExactBlocks,
    /// The upstream's growth unit when it grows one address range
    /// ([`MemoryResource::contiguous_growth_unit`]): the pool is then *expandable*.
    contiguous: Option<usize>,
}

impl<U: MemoryResource> fmt::Debug for PoolResource<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolResource")
            .field("upstream", &self.upstream.name())
            .field("pool_size", &self.pool_size())
            .field("maximum", &self.maximum)
            .finish()
    }
}

/// Why [`PoolResource::grow`] added nothing.
enum Refused {
    /// The maximum pool size, or the upstream's memory: what the out-of-memory error says.
    OutOfMemory(String),
    /// Any other error of the upstream, passed on as it is.
    Upstream(MemoryError),
}

/// Smallest and largest portion a stream takes from the reservoir at once.
const MIN_PORTION: usize = 1 << 20;
const MAX_PORTION: usize = 1 << 30;

impl<U: MemoryResource> PoolResource<U> {
    /// A pool over `upstream`, taking the initial size from it at once (on the device's default
    /// stream).
    pub fn new(upstream: U, options: PoolOptions) -> Result<Self> {
        let device = upstream.device().clone();
        let maximum = options.maximum_pool_size.map(|m| m / ALIGNMENT * ALIGNMENT);
        let initial = match options.initial_pool_size {
            Some(bytes) => aligned_size(bytes),
            None => {
                let half = device.memory_info()?.free / 2;
                let half = half / ALIGNMENT * ALIGNMENT;
                maximum.map_or(half, |m| half.min(m))
            }
        };
        if let Some(max) = maximum {
            if initial > max {
                return Err(MemoryError::InvalidArgument(format!(
                    "initial pool size {} exceeds the maximum pool size {}",
                    human_bytes(initial),
                    human_bytes(max)
                )));
            }
        }
        let boundaries = Arc::new(ChunkBoundaries::default());
        let contiguous = upstream.contiguous_growth_unit();
        // Over one growing range, blocks coalesce across chunks: no boundaries.
        let list = {
            let boundaries = boundaries.clone();
            move || match contiguous {
                Some(_) => CoalescingFreeList::new(),
                None => CoalescingFreeList::with_boundaries(boundaries.clone()),
            }
        };
        let initial = match contiguous {
            Some(unit) => initial.div_ceil(unit) * unit,
            None => initial,
        };
        let pool = PoolResource {
            upstream,
            device,
            maximum,
            reservoir: Mutex::new(list()),
            // Streams' lists keep small frees apart a while (quick bins); the reservoir does not.
            lists: StreamLists::new(move || list().with_quick_bins()),
            chunks: Mutex::new(Chunks::new(boundaries)),
            pool_size: AtomicUsize::new(0),
            growth: Mutex::new(()),
            live: options.validate_deallocations.then(LiveBlocks::new),
            exact: ExactBlocks::default(),
            contiguous,
        };
        if initial > 0 {
            let stream = pool.device.default_stream();
            let ptr = pool
                .upstream
                .allocate(initial, &stream)
                .map_err(|e| match e {
                    MemoryError::OutOfMemory(oom) => MemoryError::OutOfMemory(
                        OutOfMemory::new("pool", initial)
                            .maximum(maximum.unwrap_or(initial))
                            .detail(format!(
                                "the upstream {} refused the initial pool: {oom}",
                                pool.upstream.name()
                            )),
                    ),
                    other => other,
                })?;
            pool.add_chunk(ptr, initial, stream);
        }
        Ok(pool)
    }

    /// Whether the pool grows one address range in place ([`PoolResource::expandable`]).
    pub fn is_expandable(&self) -> bool {
        self.contiguous.is_some()
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    /// Bytes held from the upstream.
    pub fn pool_size(&self) -> usize {
        self.pool_size.load(Ordering::Relaxed)
    }

    /// The maximum pool size, if any.
    pub fn maximum_pool_size(&self) -> Option<usize> {
        self.maximum
    }

    /// Bytes free in the pool (in every stream's list and in the reservoir).
    pub fn free_bytes(&self) -> usize {
        self.reservoir.lock().free_bytes() + self.lists.free_bytes()
    }

    /// The largest block that one allocation could get without growing the pool.
    pub fn largest_free_block(&self) -> usize {
        self.reservoir.lock().largest().max(self.lists.largest())
    }

    /// The upstream allocations held, as (address, size), by address.
    pub fn chunks(&self) -> Vec<(u64, usize)> {
        self.chunks
            .lock()
            .iter()
            .map(|(a, c)| (a, c.size))
            .collect()
    }

    /// Gives every chunk whose memory is entirely free back to the upstream; returns the bytes
    /// given back. Waits on the host for the streams that freed memory (release is maintenance,
    /// not a hot path), which also lets every stream reuse what stays in the pool; the wait holds
    /// no lock that allocations and frees on other streams (or on the same one) need.
    pub fn release(&self) -> Result<usize> {
        let _growth = self.growth.lock();
        let mut blocks = Vec::new();
        // No lock of the pool is held while it waits for the streams (only `growth`, which
        // allocations take only to grow): other threads keep allocating and freeing meanwhile.
        let drained = self.lists.drain_synchronized(&mut blocks);
        let mut reservoir = self.reservoir.lock();
        // What was waited for is free of its streams' work even when a later wait failed.
        for (addr, size) in blocks {
            reservoir.give(addr, size);
        }
        drained?;
        let mut chunks = self.chunks.lock();
        if self.contiguous.is_some() {
            return self.release_end(&mut chunks, &mut reservoir);
        }
        let whole: Vec<(u64, Chunk)> = chunks
            .iter()
            .map(|(a, c)| (a, c.clone()))
            .collect::<Vec<_>>()
            .into_iter()
            .filter(|(a, c)| reservoir.remove_exact(*a, c.size))
            .collect();
        let mut released = 0;
        let mut failure = None;
        for (addr, chunk) in whole {
            if failure.is_some() {
                reservoir.give(addr, chunk.size);
                continue;
            }
            // SAFETY: the chunk came from this upstream with this size, no block of it is live
            // (all of it was free) and the streams that used it were synchronised above.
            match unsafe { self.upstream.deallocate(addr, chunk.size, &chunk.stream) } {
                Ok(()) => {
                    chunks.remove(addr);
                    released += chunk.size;
                }
                Err(e) => {
                    reservoir.give(addr, chunk.size);
                    failure = Some(e);
                }
            }
        }
        self.pool_size.fetch_sub(released, Ordering::Relaxed);
        match failure {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }

    /// [`PoolResource::release`] of an expandable pool: the chunks covered by the free block at
    /// the end of the range go back to the upstream, last first (blocks may span chunks here, so
    /// whole free chunks are found from the end).
    fn release_end(
        &self,
        chunks: &mut Chunks,
        reservoir: &mut CoalescingFreeList,
    ) -> Result<usize> {
        let Some(top) = chunks.iter().last().map(|(a, c)| a + c.size as u64) else {
            return Ok(0);
        };
        let Some((start, size)) = reservoir.blocks().find(|&(a, s)| a + s as u64 == top) else {
            return Ok(0);
        };
        let free: Vec<(u64, Chunk)> = chunks
            .iter()
            .filter(|(a, _)| *a >= start)
            .map(|(a, c)| (a, c.clone()))
            .collect();
        let Some(cut) = free.first().map(|f| f.0) else {
            return Ok(0);
        };
        reservoir.remove_exact(start, size);
        if cut > start {
            reservoir.give(start, (cut - start) as usize);
        }
        let mut released = 0;
        for (addr, chunk) in free.into_iter().rev() {
            // SAFETY: the chunk came from this upstream with this size, is entirely free, is the
            // last one held, and the streams that used it were synchronised by `release`.
            match unsafe { self.upstream.deallocate(addr, chunk.size, &chunk.stream) } {
                Ok(()) => {
                    chunks.remove(addr);
                    released += chunk.size;
                }
                Err(e) => {
                    // This chunk and those before it stay free in the pool.
                    reservoir.give(cut, (addr + chunk.size as u64 - cut) as usize);
                    self.pool_size.fetch_sub(released, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        self.pool_size.fetch_sub(released, Ordering::Relaxed);
        Ok(released)
    }

    /// Streams whose free lists the pool keeps. The list of a stream that no handle refers to any
    /// more is retired when another stream is first used (or at [`PoolResource::release`]): its
    /// free blocks stay in the pool, usable by every stream, so a program that uses a stream per
    /// task does not accumulate lists.
    pub fn stream_count(&self) -> usize {
        self.lists.stream_count()
    }

    #[inline]
    fn list(&self, stream: &Stream) -> Result<Entry<'_, StreamList<CoalescingFreeList>>> {
        self.lists.get(stream)
    }

    fn portion(&self) -> usize {
        (self.pool_size() / 16).clamp(MIN_PORTION, MAX_PORTION) / ALIGNMENT * ALIGNMENT
    }

    /// Records a new chunk and puts it in the reservoir (boundaries first, see [`Chunks`]).
    fn add_chunk(&self, addr: u64, size: usize, stream: Stream) {
        self.record_chunk(addr, size, stream);
        self.reservoir.lock().give(addr, size);
    }

    /// Records a chunk (boundaries first, see [`Chunks`]) before its memory enters any list.
    fn record_chunk(&self, addr: u64, size: usize, stream: Stream) {
        self.chunks.lock().insert(addr, Chunk { size, stream });
        self.pool_size.fetch_add(size, Ordering::Relaxed);
    }

    /// `size` bytes cut from a reservoir portion; the rest of the portion goes to `list`.
    fn carve(&self, size: usize, list: &StreamList<CoalescingFreeList>) -> Option<u64> {
        // The rest of the portion is in no list until `give_fresh`.
        let _moving = self.lists.moving();
        let (addr, len) = self.reservoir.lock().take_between(size, self.portion())?;
        if len > size {
            list.give_fresh(addr + size as u64, len - size);
        }
        Some(addr)
    }

    /// Moves the whole reservoir into `list` (where it may coalesce with blocks stolen from
    /// other streams), then takes `size` bytes from the list.
    fn merge_reservoir(&self, size: usize, list: &StreamList<CoalescingFreeList>) -> Option<u64> {
        let _moving = self.lists.moving();
        let mut blocks = Vec::new();
        self.reservoir.lock().drain_into(&mut blocks);
        if blocks.is_empty() {
            return None;
        }
        list.give_fresh_many_and_take(&blocks, size)
    }

    /// Every free block of the pool (every stream's list, the reservoir) gathered into `list`,
    /// then `size` bytes from it: `None` only when no block of `size` bytes is free anywhere.
    /// The caller holds `growth`.
    fn gather(
        &self,
        size: usize,
        list: &StreamList<CoalescingFreeList>,
        stream: &Stream,
    ) -> Result<Option<u64>> {
        self.lists.gather_and_take(list, stream, size, |out| {
            self.reservoir.lock().drain_into(out)
        })
    }

    /// A stream's list had no block of `size` bytes. In order: a portion of the reservoir; a
    /// block stolen from other streams (all of them merged when no one list has one); the
    /// reservoir's fragments merged with the stream's list; then, holding `growth`, every free
    /// block of the pool gathered (no move between lists under way, so none is missed); only then
    /// a new chunk; when the upstream refuses, every free block once more (some may have been
    /// freed meanwhile) before out-of-memory.
    /// Every allocation the quick path ([`MemoryResource::allocate`]) did not serve.
    #[inline(never)]
    fn allocate_general(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        check_stream(self, stream)?;
        if bytes > isize::MAX as usize {
            return Err(self.out_of_memory(bytes, "larger than any device memory"));
        }
        let size = block_size(bytes);
        let list = self.list(stream)?;
        let ptr = match list.take(size) {
            Some(p) => p,
            None => self.allocate_slow(bytes, size, &list, stream)?,
        };
        if let Some(live) = &self.live {
            live.insert(ptr, self.exact.size_of(ptr, bytes));
        }
        Ok(ptr)
    }

    /// Every free the quick path ([`MemoryResource::deallocate`]) did not take.
    ///
    /// # Safety
    /// As [`MemoryResource::deallocate`].
    #[inline(never)]
    unsafe fn deallocate_general(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        check_stream(self, stream)?;
        let size = self.exact.size_of(ptr, bytes);
        if let Some(live) = &self.live {
            live.remove(ptr, bytes, size)?;
        }
        self.exact.freed(ptr, bytes, size);
        self.list(stream)?.give(ptr, size)
    }

    #[cold]
    fn allocate_slow(
        &self,
        bytes: usize,
        size: usize,
        list: &StreamList<CoalescingFreeList>,
        stream: &Stream,
    ) -> Result<u64> {
        if let Some(ptr) = self.carve(size, list) {
            return Ok(ptr);
        }
        if let Some(ptr) = self.lists.steal(list, stream, size, true)? {
            return Ok(ptr);
        }
        // Fragments left in the reservoir may complete what the other streams gave.
        if let Some(ptr) = self.merge_reservoir(size, list) {
            return Ok(ptr);
        }
        let _growth = self.growth.lock();
        // Another thread may have grown the pool while this one waited.
        if let Some(ptr) = self.carve(size, list) {
            return Ok(ptr);
        }
        if let Some(ptr) = self.gather(size, list, stream)? {
            return Ok(ptr);
        }
        if let Some(ptr) = self.take_exact(bytes, size, list) {
            return Ok(ptr);
        }
        let refusal = match self.grow(size, list, stream) {
            Ok(ptr) => return Ok(ptr),
            Err(Refused::Upstream(e)) => return Err(e),
            Err(Refused::OutOfMemory(detail)) => detail,
        };
        if let Some(ptr) = self.gather(size, list, stream)? {
            return Ok(ptr);
        }
        if let Some(ptr) = self.take_exact(bytes, size, list) {
            return Ok(ptr);
        }
        Err(self.out_of_memory(bytes, &refusal))
    }

    /// After every free block was gathered into `list` in vain for the class size `size`: the
    /// exact size of `bytes`, where smaller, rather than growing or failing.
    fn take_exact(
        &self,
        bytes: usize,
        size: usize,
        list: &StreamList<CoalescingFreeList>,
    ) -> Option<u64> {
        let ptr = list.take(exact_fallback(bytes, size)?)?;
        self.exact.insert(ptr);
        Some(ptr)
    }

    /// Adds a chunk of at least `size` bytes and takes `size` bytes from its start for the
    /// caller (the rest of a portion goes to `list`, the list of `stream`, the rest of the chunk
    /// to the reservoir), so that no other stream can take the new memory first. The caller holds
    /// `growth`.
    fn grow(
        &self,
        size: usize,
        list: &StreamList<CoalescingFreeList>,
        stream: &Stream,
    ) -> std::result::Result<u64, Refused> {
        if let Some(unit) = self.contiguous {
            return self.grow_in_place(size, unit, list, stream);
        }
        let mut attempt = match growth::first_attempt(size, self.pool_size(), self.maximum) {
            Ok(a) => a,
            Err(reached) => {
                return Err(Refused::OutOfMemory(format!(
                    "maximum pool size reached: the pool may grow by {} only",
                    human_bytes(reached.headroom)
                )))
            }
        };
        loop {
            match self.upstream.allocate(attempt, stream) {
                Ok(addr) => {
                    self.record_chunk(addr, attempt, stream.clone());
                    let portion = self.portion().max(size).min(attempt);
                    if portion > size {
                        list.give_fresh(addr + size as u64, portion - size);
                    }
                    if attempt > portion {
                        self.reservoir
                            .lock()
                            .give(addr + portion as u64, attempt - portion);
                    }
                    return Ok(addr);
                }
                Err(MemoryError::OutOfMemory(refusal)) => match growth::next_attempt(attempt, size)
                {
                    Some(next) => attempt = next,
                    None => {
                        return Err(Refused::OutOfMemory(format!(
                            "the upstream {} refused to grow the pool ({refusal})",
                            self.upstream.name()
                        )))
                    }
                },
                Err(other) => return Err(Refused::Upstream(other)),
            }
        }
    }

    /// [`PoolResource::grow`] of an expandable pool: the range grows by what the request needs
    /// (in growth units) right after the last chunk, and the new memory joins `list`, where it
    /// coalesces with a free block at the old end; the request is then served from the list.
    fn grow_in_place(
        &self,
        size: usize,
        unit: usize,
        list: &StreamList<CoalescingFreeList>,
        stream: &Stream,
    ) -> std::result::Result<u64, Refused> {
        // A free block at the end of the range (gathered into `list`) joins the new memory, so
        // the range grows only by what it lacks.
        let top = self
            .chunks
            .lock()
            .iter()
            .last()
            .map(|(a, c)| a + c.size as u64);
        let trailing = top
            .and_then(|t| list.inspect(|l| l.block_ending_at(t)))
            .map_or(0, |(_, len)| len);
        let attempt = size.saturating_sub(trailing).max(1).div_ceil(unit) * unit;
        if let Some(max) = self.maximum {
            let headroom = max.saturating_sub(self.pool_size());
            if attempt > headroom {
                return Err(Refused::OutOfMemory(format!(
                    "maximum pool size reached: the pool may grow by {} only",
                    human_bytes(headroom)
                )));
            }
        }
        match self.upstream.allocate(attempt, stream) {
            Ok(addr) => {
                self.record_chunk(addr, attempt, stream.clone());
                list.give_fresh(addr, attempt);
                list.take(size).ok_or_else(|| {
                    Refused::OutOfMemory("the grown range did not hold the request".into())
                })
            }
            Err(MemoryError::OutOfMemory(refusal)) => Err(Refused::OutOfMemory(format!(
                "the upstream {} refused to grow the pool ({refusal})",
                self.upstream.name()
            ))),
            Err(other) => Err(Refused::Upstream(other)),
        }
    }

    fn out_of_memory(&self, bytes: usize, detail: &str) -> MemoryError {
        let mut oom = OutOfMemory::new("pool", bytes)
            .held(self.pool_size())
            .free(self.free_bytes())
            .largest_free_block(self.largest_free_block())
            .detail(detail);
        if let Some(max) = self.maximum {
            oom = oom.maximum(max);
        }
        oom.into()
    }
}

impl PoolResource<crate::ExpandableResource> {
    /// An *expandable* pool (PyTorch's expandable segments, which RMM lacks): its upstream is one
    /// range of addresses reserved on `device` (its total memory), where physical memory is
    /// mapped in 32 MiB steps as the pool grows. New memory lands right after the old, so free
    /// blocks coalesce across growth steps (a request larger than any step is served once enough
    /// is free in total), growth takes only what the request lacks, and
    /// [`PoolResource::release`] unmaps the free end of the range while live blocks stay where
    /// they are.
    ///
    /// ```
    /// use rmm_core::{Device, MemoryResource, PoolOptions, PoolResource};
    /// let device = Device::simulated(1 << 30);
    /// let pool = PoolResource::expandable(&device, PoolOptions::sized(0, None))?;
    /// let s = device.new_stream()?;
    /// let a = pool.allocate(40 << 20, &s)?; // maps 64 MiB
    /// let b = pool.allocate(40 << 20, &s)?; // 24 MiB free at the end + 32 MiB more, one block
    /// assert_eq!(b, a + (40 << 20));
    /// assert_eq!(pool.pool_size(), 96 << 20);
    /// // SAFETY: allocated above with this size, unused.
    /// unsafe { pool.deallocate(b, 40 << 20, &s)? };
    /// assert_eq!(pool.release()?, 32 << 20); // the free end, in whole growth steps
    /// # unsafe { pool.deallocate(a, 40 << 20, &s)? };
    /// # Ok::<(), rmm_core::MemoryError>(())
    /// ```
    pub fn expandable(device: &Device, options: PoolOptions) -> Result<Self> {
        PoolResource::new(crate::ExpandableResource::new(device, None)?, options)
    }
}

impl<U: MemoryResource> MemoryResource for PoolResource<U> {
    /// The quick path: a block from the stream's own list, found without a lock on the streams'
    /// map and the list's lock taken only when free ([`StreamLists::take_quick`]); anything
    /// else (live-block checks included) goes the general way.
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes.wrapping_sub(1) < QUICK_MAX
            && *stream.device() == self.device
            && self.live.is_none()
        {
            if let Some(p) = self.lists.take_quick(stream, block_size(bytes)) {
                return Ok(p);
            }
        }
        self.allocate_general(bytes, stream)
    }

    /// The quick path: the block onto the stream's quick stack (or its pending batch), calling
    /// nothing ([`StreamLists::give_quick`]); anything else goes the general way.
    #[inline]
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes.wrapping_sub(1) < QUICK_MAX
            && *stream.device() == self.device
            && self.live.is_none()
        {
            if let Some(size) = self.exact.plain_size(bytes) {
                if self.lists.give_quick(stream, ptr, size) {
                    return Ok(());
                }
            }
        }
        // SAFETY: as this function's.
        unsafe { self.deallocate_general(ptr, bytes, stream) }
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn kind(&self) -> MemoryKind {
        self.upstream.kind()
    }

    fn name(&self) -> String {
        format!("pool({})", self.upstream.name())
    }
}

impl<U: MemoryResource> Drop for PoolResource<U> {
    fn drop(&mut self) {
        // Let the work that freed blocks finish, then give every chunk back. Blocks still live
        // (leaked by their owner) go back too, as in RMM: the pool owns its chunks.
        let mut blocks = Vec::new();
        if let Err(e) = self.lists.drain_synchronized(&mut blocks) {
            eprintln!("rmm-core: pool drop: synchronising before release failed: {e}");
        }
        // Last first: an expandable upstream gives memory back from its end only.
        for (addr, chunk) in self.chunks.lock().take_all().into_iter().rev() {
            // SAFETY: each chunk came from this upstream with this size; the pool is going away.
            if let Err(e) = unsafe { self.upstream.deallocate(addr, chunk.size, &chunk.stream) } {
                eprintln!("rmm-core: pool drop: returning a chunk to the upstream failed: {e}");
            }
        }
    }
}
