//! Helpers shared by the sub-allocator tests: random allocate/free traces over several streams,
//! run against any resource while checking the invariants every resource must keep.

#![allow(dead_code)]

use proptest::prelude::*;
use rmm_core::{MemoryError, MemoryResource};
use rmm_cuda::{Stream, ALIGNMENT};
use std::collections::BTreeMap;

/// One step of a random trace.
#[derive(Debug, Clone, Copy)]
pub enum Step {
    /// Allocate `bytes` on stream `stream`.
    Alloc { bytes: usize, stream: usize },
    /// Free live block number `pick % live` on stream `stream` (not always the one it was
    /// allocated on: frees on other streams are legal and exercise cross-stream reuse).
    Free { pick: usize, stream: usize },
}

/// Sizes spread over the ranges allocators treat differently: sub-256, small bins, large blocks.
pub fn sizes(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..=256,
        4 => 257usize..=(64 << 10).min(max),
        2 => 1usize..=max,
    ]
}

pub fn steps(max_size: usize, streams: usize, len: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => (sizes(max_size), 0..streams).prop_map(|(bytes, stream)| Step::Alloc { bytes, stream }),
        2 => (any::<usize>(), 0..streams).prop_map(|(pick, stream)| Step::Free { pick, stream }),
    ];
    prop::collection::vec(step, 1..len)
}

/// A live block.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    pub ptr: u64,
    pub bytes: usize,
    pub stream: usize,
}

/// Live blocks by address; refuses overlaps.
#[derive(Default, Debug)]
pub struct Live {
    by_addr: BTreeMap<u64, Block>,
    order: Vec<u64>,
}

impl Live {
    pub fn insert(&mut self, b: Block) -> Result<(), String> {
        if b.ptr % ALIGNMENT as u64 != 0 {
            return Err(format!("{:#x} is not {ALIGNMENT}-byte aligned", b.ptr));
        }
        if b.bytes == 0 {
            return Ok(());
        }
        let end = b.ptr + b.bytes as u64;
        if let Some((_, prev)) = self.by_addr.range(..end).next_back() {
            if prev.ptr + prev.bytes as u64 > b.ptr {
                return Err(format!(
                    "[{:#x}, {end:#x}) overlaps live [{:#x}, {:#x})",
                    b.ptr,
                    prev.ptr,
                    prev.ptr + prev.bytes as u64
                ));
            }
        }
        self.by_addr.insert(b.ptr, b);
        self.order.push(b.ptr);
        Ok(())
    }

    pub fn remove_pick(&mut self, pick: usize) -> Option<Block> {
        if self.order.is_empty() {
            return None;
        }
        let ptr = self.order.swap_remove(pick % self.order.len());
        self.by_addr.remove(&ptr)
    }

    /// Forgets the block at `ptr` (its owner is about to free it).
    pub fn remove_ptr(&mut self, ptr: u64) -> Option<Block> {
        let b = self.by_addr.remove(&ptr)?;
        if let Some(i) = self.order.iter().position(|&p| p == ptr) {
            self.order.swap_remove(i);
        }
        Some(b)
    }

    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.by_addr.values()
    }

    pub fn bytes(&self) -> usize {
        self.by_addr.values().map(|b| b.bytes).sum()
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn drain(&mut self) -> Vec<Block> {
        self.order.clear();
        std::mem::take(&mut self.by_addr).into_values().collect()
    }
}

/// Runs `steps`; out-of-memory errors are allowed (and counted) only when `oom_ok`. After every
/// step `check(live)` must hold. Returns the live blocks left and the number of refusals.
pub fn run(
    r: &dyn MemoryResource,
    streams: &[Stream],
    steps: &[Step],
    oom_ok: bool,
    mut check: impl FnMut(&Live) -> Result<(), String>,
) -> Result<(Live, usize), String> {
    let mut live = Live::default();
    let mut refusals = 0;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Alloc { bytes, stream } => match r.allocate(bytes, &streams[stream]) {
                Ok(ptr) => {
                    if bytes > 0 && ptr == 0 {
                        return Err(format!("step {i}: null pointer for {bytes} bytes"));
                    }
                    live.insert(Block { ptr, bytes, stream })
                        .map_err(|e| format!("step {i}: {e}"))?;
                }
                Err(MemoryError::OutOfMemory(oom)) if oom_ok => {
                    if oom.requested != bytes {
                        return Err(format!(
                            "step {i}: OOM reports {} bytes, not {bytes}",
                            oom.requested
                        ));
                    }
                    refusals += 1;
                }
                Err(e) => return Err(format!("step {i}: allocate({bytes}): {e}")),
            },
            Step::Free { pick, stream } => {
                if let Some(b) = live.remove_pick(pick) {
                    // SAFETY: a live block of `r` of this size.
                    unsafe { r.deallocate(b.ptr, b.bytes, &streams[stream]) }
                        .map_err(|e| format!("step {i}: deallocate: {e}"))?;
                }
            }
        }
        check(&live).map_err(|e| format!("after step {i}: {e}"))?;
    }
    Ok((live, refusals))
}

/// Frees every block left, each on the stream it was allocated on.
pub fn free_all(r: &dyn MemoryResource, streams: &[Stream], live: &mut Live) -> Result<(), String> {
    for b in live.drain() {
        // SAFETY: a live block of `r` of this size.
        unsafe { r.deallocate(b.ptr, b.bytes, &streams[b.stream]) }
            .map_err(|e| format!("deallocate: {e}"))?;
    }
    Ok(())
}
