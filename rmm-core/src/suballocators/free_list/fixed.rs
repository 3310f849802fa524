//! The free store of the fixed-size resource: a stack of equal blocks, O(1) both ways.

use super::{push_within_capacity, FreeStore};

/// Free blocks of one size. The most recently freed block is handed out first.
#[derive(Debug)]
pub(crate) struct FixedBlocks {
    block_size: usize,
    blocks: Vec<u64>,
}

impl FixedBlocks {
    pub(crate) fn new(block_size: usize) -> Self {
        FixedBlocks {
            block_size,
            blocks: Vec::new(),
        }
    }

    /// Takes up to `n` blocks off the top.
    pub(crate) fn take_many(&mut self, n: usize, out: &mut Vec<u64>) {
        let keep = self.blocks.len().saturating_sub(n);
        out.extend(self.blocks.drain(keep..));
    }
}

impl FreeStore for FixedBlocks {
    /// Any request the resource lets through fits a block (it checks `size <= block_size`).
    #[inline]
    fn take(&mut self, size: usize) -> Option<u64> {
        debug_assert!(size <= self.block_size);
        self.blocks.pop()
    }

    #[inline]
    fn give(&mut self, addr: u64, _size: usize) {
        self.blocks.push(addr);
    }

    #[inline(always)]
    fn give_quick(&mut self, addr: u64, _size: usize) -> bool {
        push_within_capacity(&mut self.blocks, addr)
    }

    fn drain_into(&mut self, out: &mut Vec<(u64, usize)>) {
        let size = self.block_size;
        out.extend(self.blocks.drain(..).map(|a| (a, size)));
    }

    fn free_bytes(&self) -> usize {
        self.blocks.len() * self.block_size
    }

    fn largest(&mut self) -> usize {
        if self.blocks.is_empty() {
            0
        } else {
            self.block_size
        }
    }

    fn block_count(&self) -> usize {
        self.blocks.len()
    }
}
