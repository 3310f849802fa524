//! The live blocks of a test run, checked for overlap on every insert.

use std::collections::BTreeMap;

/// Live blocks by start address (value: end address), with the bytes live now and at most.
#[derive(Default)]
pub(crate) struct LiveSet {
    blocks: BTreeMap<u64, u64>,
    bytes: usize,
    peak_bytes: usize,
    peak_blocks: usize,
}

impl LiveSet {
    /// Adds a block; an overlap with a live block is an error naming both.
    pub(crate) fn insert(&mut self, ptr: u64, bytes: usize) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        let end = ptr + bytes as u64;
        if let Some((&s, &e)) = self.blocks.range(..end).next_back() {
            if e > ptr {
                return Err(format!(
                    "block [{ptr:#x}, {end:#x}) overlaps live block [{s:#x}, {e:#x})"
                ));
            }
        }
        self.blocks.insert(ptr, end);
        self.bytes += bytes;
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        self.peak_blocks = self.peak_blocks.max(self.blocks.len());
        Ok(())
    }

    pub(crate) fn remove(&mut self, ptr: u64, bytes: usize) {
        if bytes > 0 && self.blocks.remove(&ptr).is_some() {
            self.bytes -= bytes;
        }
    }

    /// The most bytes live at once so far (as requested, before alignment).
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// The most blocks live at once so far.
    pub(crate) fn peak_blocks(&self) -> usize {
        self.peak_blocks
    }

    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}
