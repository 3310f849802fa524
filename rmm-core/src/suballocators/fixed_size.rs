//! Fixed-size blocks (RMM's `fixed_size_memory_resource`): every allocation gets one block of
//! `block_size` bytes from a stack, O(1) both ways. Blocks come from the upstream in chunks of
//! `blocks_to_preallocate` blocks; stream ordering is that of
//! [`crate::suballocators::stream_ordered`].

use crate::error::{human_bytes, MemoryError, OutOfMemory, Result};
use crate::resource::{aligned_size, check_stream, MemoryKind, MemoryResource, SharedResource};
use crate::suballocators::free_list::{FixedBlocks, FreeStore};
use crate::suballocators::stream_ordered::{Entry, StreamList, StreamLists};
use parking_lot::Mutex;
use rmm_cuda::{Device, Stream};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks a stream takes from the reservoir at once.
const BATCH: usize = 64;

/// Why [`FixedSizeResource::grow`] added nothing.
enum Refused {
    /// The upstream's memory: what the out-of-memory error says.
    OutOfMemory(String),
    /// Any other error of the upstream, passed on as it is.
    Upstream(MemoryError),
}

/// A fixed-size block allocator over the upstream `U`.
///
/// ```
/// use rmm_core::{CudaResource, Device, FixedSizeResource, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// // Blocks of 64 KiB, 16 taken from the upstream at a time.
/// let fixed = FixedSizeResource::new(CudaResource::new(&device), 64 << 10, 16)?;
/// let stream = device.new_stream()?;
/// let ptr = fixed.allocate(1000, &stream)?; // any request up to the block size
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { fixed.deallocate(ptr, 1000, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
            lists: {
                let block_size = aligned_size(block_size);
                StreamLists::new(move || FixedBlocks::new(block_size))
            },
            reservoir: Mutex::new(FixedBlocks::new(aligned_size(block_size))),
            chunks: Mutex::new(Vec::new()),
            held: AtomicUsize::new(0),
            growth: Mutex::new(()),
            upstream,
            device,
        };
        if blocks_to_preallocate > 0 {
            let block_size = r.block_size;
            r.grow(false, &r.device.default_stream())
                .map_err(|refused| match refused {
                    Refused::Upstream(e) => e,
                    Refused::OutOfMemory(detail) => r.out_of_memory(block_size, detail),
                })?;
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

    /// Streams whose free lists the resource keeps (those of streams no handle refers to any more
    /// are retired as in [`crate::PoolResource::stream_count`]).
    pub fn stream_count(&self) -> usize {
        self.lists.stream_count()
    }

    fn list(&self, stream: &Stream) -> Result<Entry<'_, StreamList<FixedBlocks>>> {
        self.lists.get(stream)
    }

    /// One block from the reservoir, and up to a batch more into `list`.
    fn take_from_reservoir(&self, list: &StreamList<FixedBlocks>) -> Option<u64> {
        // The batch is in no list until it reaches `list`.
        let _moving = self.lists.moving();
        let mut batch = Vec::new();
        self.reservoir.lock().take_many(BATCH, &mut batch);
        let first = batch.pop()?;
        if !batch.is_empty() {
            let blocks: Vec<_> = batch.into_iter().map(|b| (b, self.block_size)).collect();
            list.give_fresh_many(&blocks);
        }
        Some(first)
    }

    /// Takes a chunk from the upstream: `blocks_per_chunk` blocks, fewer (down to one) when the
    /// upstream refuses. Returns its first block when `take_one` is set (so that no other stream
    /// can take the new blocks first), and puts the others into the reservoir.
    fn grow(&self, take_one: bool, stream: &Stream) -> std::result::Result<Option<u64>, Refused> {
        let mut blocks = self.blocks_per_chunk;
        loop {
            let size = blocks * self.block_size;
            match self.upstream.allocate(size, stream) {
                Ok(ptr) => {
                    self.chunks.lock().push((ptr, size, stream.clone()));
                    self.held.fetch_add(size, Ordering::Relaxed);
                    let first = usize::from(take_one);
                    let mut reservoir = self.reservoir.lock();
                    // Pushed from the top down, so the lowest addresses are handed out first.
                    for i in (first..blocks).rev() {
                        reservoir.give(ptr + (i * self.block_size) as u64, self.block_size);
                    }
                    return Ok(take_one.then_some(ptr));
                }
                Err(MemoryError::OutOfMemory(_)) if blocks > 1 => blocks /= 2,
                Err(MemoryError::OutOfMemory(refusal)) => {
                    return Err(Refused::OutOfMemory(format!(
                        "the upstream {} refused a block of {} ({refusal})",
                        self.upstream.name(),
                        human_bytes(self.block_size)
                    )))
                }
                Err(other) => return Err(Refused::Upstream(other)),
            }
        }
    }

    /// Every free block (every stream's list, the reservoir) gathered into `list`, then one of
    /// them: `None` only when no block is free anywhere. The caller holds `growth`.
    fn gather(&self, list: &StreamList<FixedBlocks>, stream: &Stream) -> Result<Option<u64>> {
        self.lists
            .gather_and_take(list, stream, self.block_size, |out| {
                let size = self.block_size;
                let mut blocks = Vec::new();
                self.reservoir.lock().take_many(usize::MAX, &mut blocks);
                out.extend(blocks.into_iter().map(|b| (b, size)));
            })
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

    /// The stream's list was empty. In order: a batch from the reservoir; another stream's list
    /// (stolen); then, holding `growth`, every free block gathered (no move between lists under
    /// way, so none is missed); only then a new chunk; when the upstream refuses, every free block
    /// once more (some may have been freed meanwhile) before out-of-memory.
    /// Every allocation the quick path ([`MemoryResource::allocate`]) did not serve.
    #[inline(never)]
    fn allocate_general(&self, bytes: usize, stream: &Stream) -> Result<u64> {
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
            None => self.allocate_slow(bytes, &list, stream),
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
        if bytes > self.block_size {
            return Err(MemoryError::InvalidDeallocation(format!(
                "{bytes} bytes at {ptr:#x} cannot come from a resource of {} blocks",
                human_bytes(self.block_size)
            )));
        }
        check_stream(self, stream)?;
        self.list(stream)?.give(ptr, self.block_size)
    }

    #[cold]
    fn allocate_slow(
        &self,
        bytes: usize,
        list: &StreamList<FixedBlocks>,
        stream: &Stream,
    ) -> Result<u64> {
        if let Some(p) = self.take_from_reservoir(list) {
            return Ok(p);
        }
        if let Some(p) = self.lists.steal(list, stream, self.block_size, false)? {
            return Ok(p);
        }
        let _growth = self.growth.lock();
        if let Some(p) = self.take_from_reservoir(list) {
            return Ok(p);
        }
        if let Some(p) = self.gather(list, stream)? {
            return Ok(p);
        }
        let refusal = match self.grow(true, stream) {
            Ok(p) => return Ok(p.expect("grow(true) returns a block")),
            Err(Refused::Upstream(e)) => return Err(e),
            Err(Refused::OutOfMemory(detail)) => detail,
        };
        if let Some(p) = self.gather(list, stream)? {
            return Ok(p);
        }
        Err(self.out_of_memory(bytes, refusal))
    }
}

impl<U: MemoryResource> MemoryResource for FixedSizeResource<U> {
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        // The quick path (`StreamLists::take_quick`); anything else goes the general way.
        if bytes.wrapping_sub(1) < self.block_size && *stream.device() == self.device {
            if let Some(p) = self.lists.take_quick(stream, self.block_size) {
                return Ok(p);
            }
        }
        self.allocate_general(bytes, stream)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        // The quick path: onto the stream's stack while it has room, calling nothing.
        if bytes.wrapping_sub(1) < self.block_size
            && *stream.device() == self.device
            && self.lists.give_quick(stream, ptr, self.block_size)
        {
            return Ok(());
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
