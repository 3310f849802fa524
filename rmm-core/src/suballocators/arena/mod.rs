//! The arena (RMM's `arena_memory_resource`): one global arena taken from the upstream once, and
//! per-stream arenas (per-thread ones for the per-thread default stream) that take portions of
//! it and serve small requests without touching the global lock.
//!
//! - A request looks in its stream's arena first (best fit, coalescing: the free list of the pool,
//!   [`crate::suballocators::free_list`]); then takes a portion from the global arena, or, for
//!   a request of a superblock or more, exactly the request. A portion is a superblock in a small
//!   arena and 1/64 of a large one, at most 256 MiB: with 1 MiB portions a stream serving random
//!   sizes up to 64 KiB ran out of room every few hundred requests and coalesced its recently
//!   freed blocks each time (RMM's `random_allocations` at 64 KiB, simulated device: 30-32 ns an
//!   event; 64 MiB portions: 17-19, about the pool's); at sizes up to 1 MiB, 64 MiB portions
//!   still cost 516 instructions an allocate + free pair (cutting and merging quick blocks),
//!   256 MiB ones 335, the pool's count (whose portions are 1/16 of it, up to 1 GiB).
//! - Freed memory goes to the arena of the stream it is freed on and is reused there at once; it
//!   reaches other streams only through defragmentation, which waits on the host for the streams
//!   of all arenas and returns all their free memory to the global arena, where it coalesces.
//!   Unlike RMM, large blocks are freed without a host synchronisation.
//! - When both fail, the arena defragments and retries once before the out-of-memory error, which
//!   says what the global and the per-stream arenas hold; with `dump_on_failure` the whole state
//!   is also written to a file.

mod dump;

use crate::error::{human_bytes, MemoryError, OutOfMemory, Result};
use crate::resource::{aligned_size, check_stream, MemoryKind, MemoryResource, SharedResource};
use crate::suballocators::free_list::{
    block_size, exact_fallback, CoalescingFreeList, ExactBlocks, FreeStore, QUICK_MAX,
};
use crate::suballocators::stream_ordered::{Entry, StreamList, StreamLists};
use parking_lot::Mutex;
use rmm_cuda::{Device, Stream, ALIGNMENT};
use std::fmt;
use std::path::PathBuf;

/// Sizes and diagnostics of an [`ArenaResource`].
///
/// ```
/// use rmm_core::ArenaOptions;
/// let options = ArenaOptions {
///     arena_size: Some(256 << 20),
///     ..Default::default()
/// };
/// assert!(options.superblock_size >= 1 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ArenaOptions {
    /// Bytes of the global arena. `None`: half of the device's free memory (as in RMM).
    pub arena_size: Option<usize>,
    /// Requests of this size or more are served by the global arena directly; smaller ones by
    /// the stream's arena, which takes at least this much from the global one at a time (more
    /// in a large arena: 1/64 of it, up to 256 MiB). RMM's minimum superblock is 1 MiB.
    pub superblock_size: usize,
    /// On failure, write the arena's state to this file (RMM writes `rmm_arena_memory_dump.log`).
    pub dump_on_failure: Option<PathBuf>,
}

impl Default for ArenaOptions {
    fn default() -> Self {
        ArenaOptions {
            arena_size: None,
            superblock_size: 1 << 20,
            dump_on_failure: None,
        }
    }
}

/// An arena allocator over the upstream `U`.
///
/// ```
/// use rmm_core::{ArenaOptions, ArenaResource, CudaResource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let options = ArenaOptions { arena_size: Some(256 << 20), ..Default::default() };
/// let arena = ArenaResource::new(CudaResource::new(&device), options)?;
/// let stream = device.new_stream()?;
/// let ptr = arena.allocate(4096, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { arena.deallocate(ptr, 4096, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ArenaResource<U: MemoryResource = SharedResource> {
    upstream: U,
    device: Device,
    base: u64,
    size: usize,
    stream: Stream,
    superblock: usize,
    /// Bytes a stream's arena takes from the global one at a time ([`portion_size`]).
    portion: usize,
    global: Mutex<CoalescingFreeList>,
    arenas: StreamLists<CoalescingFreeList>,
    dump_path: Option<PathBuf>,
    /// Serialises defragmentation (one at a time is enough for everyone waiting).
    defrag: Mutex<()>,
    /// Live blocks of their exact size where their class found no room.
    exact: ExactBlocks,
}

impl<U: MemoryResource> fmt::Debug for ArenaResource<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaResource")
            .field("upstream", &self.upstream.name())
            .field("size", &self.size)
            .field("superblock", &self.superblock)
            .finish()
    }
}

impl<U: MemoryResource> ArenaResource<U> {
    /// An arena over `upstream`; the global arena is allocated at once.
    pub fn new(upstream: U, options: ArenaOptions) -> Result<Self> {
        let device = upstream.device().clone();
        let superblock = aligned_size(options.superblock_size.max(ALIGNMENT));
        let size = match options.arena_size {
            Some(s) => s,
            None => device.memory_info()?.free / 2,
        } / ALIGNMENT
            * ALIGNMENT;
        if size < superblock {
            return Err(MemoryError::InvalidArgument(format!(
                "arena size {} is smaller than its superblock size {}",
                human_bytes(size),
                human_bytes(superblock)
            )));
        }
        let stream = device.default_stream();
        let base = upstream.allocate(size, &stream).map_err(|e| match e {
            MemoryError::OutOfMemory(oom) => OutOfMemory::new("arena", size)
                .maximum(size)
                .detail(format!(
                    "the upstream {} refused the global arena: {oom}",
                    upstream.name()
                ))
                .into(),
            other => other,
        })?;
        let mut global = CoalescingFreeList::new();
        global.give(base, size);
        Ok(ArenaResource {
            upstream,
            device,
            base,
            size,
            stream,
            superblock,
            portion: portion_size(size, superblock),
            global: Mutex::new(global),
            arenas: StreamLists::new(|| CoalescingFreeList::new().with_quick_bins()),
            dump_path: options.dump_on_failure,
            defrag: Mutex::new(()),
            exact: ExactBlocks::default(),
        })
    }

    /// Bytes of the global arena (all the arena ever holds).
    pub fn arena_size(&self) -> usize {
        self.size
    }

    /// The superblock size.
    pub fn superblock_size(&self) -> usize {
        self.superblock
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    /// Free bytes in the global arena only.
    pub fn global_free_bytes(&self) -> usize {
        self.global.lock().free_bytes()
    }

    /// Free bytes in the global and every per-stream arena.
    pub fn free_bytes(&self) -> usize {
        self.global_free_bytes() + self.arenas.free_bytes()
    }

    /// The largest free block anywhere in the arena.
    pub fn largest_free_block(&self) -> usize {
        self.global.lock().largest().max(self.arenas.largest())
    }

    /// Returns the free memory of every per-stream arena to the global arena (waiting on the host
    /// for their streams first), where it coalesces and becomes available to every stream.
    pub fn defragment(&self) -> Result<()> {
        let _one = self.defrag.lock();
        let mut blocks = Vec::new();
        let drained = self.arenas.drain_synchronized(&mut blocks);
        let mut global = self.global.lock();
        // What was waited for is free of its streams' work even when a later wait failed.
        for (addr, size) in blocks {
            global.give(addr, size);
        }
        drained
    }

    /// A readable report of the arena's state (what `dump_on_failure` writes).
    pub fn state_report(&self) -> String {
        let mut global = self.global.lock();
        dump::report(
            self.base,
            self.size,
            self.superblock,
            self.portion,
            &mut global,
            &self.arenas.summaries(),
        )
    }

    /// Streams whose arenas are kept. The arena of a stream that no handle refers to any more is
    /// retired when another stream is first used (or at [`ArenaResource::defragment`]); its free
    /// memory reaches the global arena at the next defragmentation.
    pub fn stream_count(&self) -> usize {
        self.arenas.stream_count()
    }

    #[inline]
    fn arena(&self, stream: &Stream) -> Result<Entry<'_, StreamList<CoalescingFreeList>>> {
        self.arenas.get(stream)
    }

    /// `size` bytes from the global arena: exactly that for large requests, else cut from a
    /// portion whose rest goes to `arena`.
    fn take_from_global(&self, size: usize, arena: &StreamList<CoalescingFreeList>) -> Option<u64> {
        if size >= self.superblock {
            return self.global.lock().take(size);
        }
        let (addr, len) = self.global.lock().take_between(size, self.portion)?;
        if len > size {
            arena.give_fresh(addr + size as u64, len - size);
        }
        Some(addr)
    }

    /// Every allocation the quick path ([`MemoryResource::allocate`]) did not serve.
    #[inline(never)]
    fn allocate_general(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        check_stream(self, stream)?;
        if bytes > self.size {
            return Err(OutOfMemory::new("arena", bytes)
                .held(self.size)
                .maximum(self.size)
                .detail("larger than the whole arena")
                .into());
        }
        let size = block_size(bytes);
        let arena = self.arena(stream)?;
        match arena.take(size) {
            Some(p) => Ok(p),
            None => self.allocate_slow(bytes, size, &arena),
        }
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
        if !self.holds(ptr, size) {
            return Err(MemoryError::InvalidDeallocation(format!(
                "{ptr:#x} ({bytes} bytes) is outside this arena"
            )));
        }
        self.exact.freed(ptr, bytes, size);
        self.arena(stream)?.give(ptr, size)
    }

    /// `[ptr, ptr + size)` lies in the global arena.
    #[inline(always)]
    fn holds(&self, ptr: u64, size: usize) -> bool {
        ptr >= self.base && ptr + size as u64 <= self.base + self.size as u64
    }

    #[cold]
    fn allocate_slow(
        &self,
        bytes: usize,
        size: usize,
        arena: &StreamList<CoalescingFreeList>,
    ) -> Result<u64> {
        if let Some(p) = self.take_from_global(size, arena) {
            return Ok(p);
        }
        self.defragment()?;
        if let Some(p) = arena
            .take(size)
            .or_else(|| self.take_from_global(size, arena))
        {
            return Ok(p);
        }
        // The exact size, where smaller than the class, rather than failing.
        if let Some(exact) = exact_fallback(bytes, size) {
            if let Some(p) = arena
                .take(exact)
                .or_else(|| self.take_from_global(exact, arena))
            {
                self.exact.insert(p);
                return Ok(p);
            }
        }
        let mut detail = "no room in the arena after defragmentation".to_string();
        if let Some(path) = &self.dump_path {
            let report = format!(
                "out of memory allocating {}\n{}",
                human_bytes(bytes),
                self.state_report()
            );
            match std::fs::write(path, report) {
                Ok(()) => detail.push_str(&format!("; state written to {}", path.display())),
                Err(e) => detail.push_str(&format!(
                    "; writing the state to {} failed: {e}",
                    path.display()
                )),
            }
        }
        Err(OutOfMemory::new("arena", bytes)
            .held(self.size)
            .free(self.free_bytes())
            .largest_free_block(self.largest_free_block())
            .maximum(self.size)
            .detail(detail)
            .into())
    }
}

/// Largest portion a stream's arena takes from the global one at a time.
const MAX_PORTION: usize = 256 << 20;

/// Bytes a stream's arena takes from a global arena of `size` bytes at a time: a superblock, or
/// 1/64 of the arena where that is more (at most [`MAX_PORTION`]), so that streams of a large
/// arena seldom come back to its lock while a small one is shared out as finely as RMM's.
fn portion_size(size: usize, superblock: usize) -> usize {
    (size / 64).min(MAX_PORTION).max(superblock) / ALIGNMENT * ALIGNMENT
}

impl<U: MemoryResource> MemoryResource for ArenaResource<U> {
    /// The quick path: a block from the stream's own list, found without a lock on the streams'
    /// map and the list's lock taken only when free ([`StreamLists::take_quick`]); anything
    /// else goes the general way.
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes.wrapping_sub(1) < QUICK_MAX && *stream.device() == self.device {
            if let Some(p) = self.arenas.take_quick(stream, block_size(bytes)) {
                return Ok(p);
            }
        }
        self.allocate_general(bytes, stream)
    }

    /// The quick path: the block onto the stream's quick stack (or its pending batch), calling
    /// nothing ([`StreamLists::give_quick`]); anything else goes the general way.
    #[inline]
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes.wrapping_sub(1) < QUICK_MAX && *stream.device() == self.device {
            if let Some(size) = self.exact.plain_size(bytes) {
                if self.holds(ptr, size) && self.arenas.give_quick(stream, ptr, size) {
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
        format!("arena({})", self.upstream.name())
    }
}

impl<U: MemoryResource> Drop for ArenaResource<U> {
    fn drop(&mut self) {
        if let Err(e) = self.arenas.drain_synchronized(&mut Vec::new()) {
            eprintln!("rmm-core: arena drop: synchronising before release failed: {e}");
        }
        // SAFETY: the global arena came from this upstream with this size; the arena is going away.
        if let Err(e) = unsafe { self.upstream.deallocate(self.base, self.size, &self.stream) } {
            eprintln!("rmm-core: arena drop: returning the global arena failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_portion_is_a_superblock_or_a_64th_of_the_arena_up_to_256_mib() {
        const MIB: usize = 1 << 20;
        assert_eq!(portion_size(48 * MIB, MIB), MIB);
        assert_eq!(portion_size(1 << 30, MIB), 16 * MIB);
        assert_eq!(portion_size(16 << 30, MIB), 256 * MIB);
        assert_eq!(portion_size(80 << 30, MIB), 256 * MIB, "at most 256 MiB");
        assert_eq!(
            portion_size(80 << 30, 512 * MIB),
            512 * MIB,
            "never below a superblock"
        );
        assert_eq!(portion_size(1_000_000_000, MIB) % ALIGNMENT, 0);
    }
}
