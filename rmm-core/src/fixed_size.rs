//! Fixed-size blocks (RMM's `fixed_size_memory_resource`): every allocation gets one block of
//! `block_size` bytes from a stack, O(1) both ways. Blocks come from the upstream in chunks of
//! `blocks_to_preallocate` blocks; stream ordering is that of [`crate::stream_ordered`].

use crate::error::{human_bytes, MemoryError, OutOfMemory, Result};
use crate::free_list::{FixedBlocks, FreeStore};
use crate::resource::{aligned_size, check_stream, MemoryKind, MemoryResource, SharedResource};
use crate::stream_ordered::{Entry, StreamList, StreamLists};
use parking_lot::Mutex;
use rmm_cuda::{Device, Stream};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks a stream takes from the reservoir at once.
const BATCH: usize = 64;

/// A fixed-size block allocator over the upstream `U`.
pub struct FixedSizeResource<U: MemoryResource = SharedResource> {
    upstream: U,
    device: Device,
    block_size: usize,
    blocks_per_chunk: usize,
    lists: StreamLists<FixedBlocks>,
    /// Blocks no work has used yet.
    reservoir: Mutex<FixedBlocks>,
    chunks: Mutex<Vec<(u64, usize, Stream)>>,
    held: AtomicUsize,
    growth: Mutex<()>,
}

impl<U: MemoryResource> fmt::Debug for FixedSizeResource<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedSizeResource")
            .field("upstream", &self.upstream.name())
            .field("block_size", &self.block_size)
            .field("held", &self.held_bytes())
            .finish()
    }
}

impl<U: MemoryResource> FixedSizeResource<U> {
    /// Blocks of `block_size` bytes (rounded up to 256), taken from `upstream`
    /// `blocks_to_preallocate` at a time, the first chunk at once. RMM's defaults are 1 MiB and 128.
    pub fn new(upstream: U, block_size: usize, blocks_to_preallocate: usize) -> Result<Self> {
        if block_size == 0 {
            return Err(MemoryError::InvalidArgument(
                "a fixed-size resource needs a non-zero block size".into(),
            ));
        }
        let device = upstream.device().clone();
        let r = FixedSizeResource {
            block_size: aligned_size(block_size),
            blocks_per_chunk: blocks_to_preallocate.max(1),
            lists: StreamLists::default(),
            reservoir: Mutex::new(FixedBlocks::new(aligned_size(block_size))),
            chunks: Mutex::new(Vec::new()),
            held: AtomicUsize::new(0),
            growth: Mutex::new(()),
            upstream,
            device,
        };
        if blocks_to_preallocate > 0 {
            r.grow(r.block_size, &r.device.default_stream())?;
        }
        Ok(r)
    }

    /// The size of every block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    /// Bytes held from the upstream.
    pub fn held_bytes(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Bytes in free blocks.
    pub fn free_bytes(&self) -> usize {
        self.reservoir.lock().free_bytes() + self.lists.free_bytes()
    }

    fn list(&self, stream: &Stream) -> Result<Entry<'_, StreamList<FixedBlocks>>> {
        self.lists.get(stream, || FixedBlocks::new(self.block_size))
    }

    /// One block from the reservoir, and up to a batch more into `list`.
    fn take_from_reservoir(&self, list: &StreamList<FixedBlocks>) -> Option<u64> {
        let mut batch = Vec::new();
        self.reservoir.lock().take_many(BATCH, &mut batch);
        let first = batch.pop()?;
        for b in batch {
            list.give_fresh(b, self.block_size);
        }
        Some(first)
    }

    /// Takes a chunk from the upstream into the reservoir: `blocks_per_chunk` blocks, fewer (down
    /// to one) when the upstream refuses.
    fn grow(&self, bytes: usize, stream: &Stream) -> Result<()> {
        let mut blocks = self.blocks_per_chunk;
        loop {
            let size = blocks * self.block_size;
            match self.upstream.allocate(size, stream) {
                Ok(ptr) => {
                    self.chunks.lock().push((ptr, size, stream.clone()));
                    self.held.fetch_add(size, Ordering::Relaxed);
                    let mut reservoir = self.reservoir.lock();
                    // Pushed from the top down, so the lowest addresses are handed out first.
                    for i in (0..blocks).rev() {
                        reservoir.give(ptr + (i * self.block_size) as u64, self.block_size);
                    }
                    return Ok(());
                }
                Err(MemoryError::OutOfMemory(_)) if blocks > 1 => blocks /= 2,
                Err(MemoryError::OutOfMemory(refusal)) => {
                    return Err(self.out_of_memory(
                        bytes,
                        format!(
                            "the upstream {} refused a block of {} ({refusal})",
                            self.upstream.name(),
                            human_bytes(self.block_size)
                        ),
                    ))
                }
                Err(other) => return Err(other),
            }
        }
    }

    fn out_of_memory(&self, bytes: usize, detail: String) -> MemoryError {
        let free = self.free_bytes();
        OutOfMemory::new("fixed_size", bytes)
            .held(self.held_bytes())
            .free(free)
            .largest_free_block(if free > 0 { self.block_size } else { 0 })
            .maximum(self.block_size)
            .detail(detail)
            .into()
    }

    #[cold]
    fn allocate_slow(&self, bytes: usize, list: &StreamList<FixedBlocks>) -> Result<u64> {
        if let Some(p) = self.take_from_reservoir(list) {
            return Ok(p);
        }
        if self.lists.steal_into(list, self.block_size, false)? {
            if let Some(p) = list.take(self.block_size) {
                return Ok(p);
            }
        }
        let _growth = self.growth.lock();
        if let Some(p) = self.take_from_reservoir(list) {
            return Ok(p);
        }
        self.grow(bytes, list.stream())?;
        self.take_from_reservoir(list).ok_or_else(|| {
            self.out_of_memory(bytes, "the blocks just added went to another stream".into())
        })
    }
}

impl<U: MemoryResource> MemoryResource for FixedSizeResource<U> {
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        if bytes > self.block_size {
            return Err(self.out_of_memory(
                bytes,
                format!(
                    "larger than the block size {}: a fixed-size resource serves blocks of one size",
                    human_bytes(self.block_size)
                ),
            ));
        }
        check_stream(self, stream)?;
        let list = self.list(stream)?;
        match list.take(self.block_size) {
            Some(p) => Ok(p),
            None => self.allocate_slow(bytes, &list),
        }
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        if bytes > self.block_size {
            return Err(MemoryError::InvalidDeallocation(format!(
                "{bytes} bytes at {ptr:#x} cannot come from a resource of {} blocks",
                human_bytes(self.block_size)
            )));
        }
        check_stream(self, stream)?;
        self.list(stream)?.give(ptr, self.block_size)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn kind(&self) -> MemoryKind {
        self.upstream.kind()
    }

    fn name(&self) -> String {
        format!(
            "fixed_size({}, {})",
            human_bytes(self.block_size),
            self.upstream.name()
        )
    }
}

impl<U: MemoryResource> Drop for FixedSizeResource<U> {
    fn drop(&mut self) {
        if let Err(e) = self.lists.drain_synchronized(&mut Vec::new()) {
            eprintln!("rmm-core: fixed_size drop: synchronising before release failed: {e}");
        }
        for (ptr, size, stream) in std::mem::take(&mut *self.chunks.lock()) {
            // SAFETY: each chunk came from this upstream with this size; the resource is going away.
            if let Err(e) = unsafe { self.upstream.deallocate(ptr, size, &stream) } {
                eprintln!("rmm-core: fixed_size drop: returning a chunk failed: {e}");
            }
        }
    }
}
