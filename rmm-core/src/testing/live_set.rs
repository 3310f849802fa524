//! The live blocks of a test run, checked for overlap on every insert.

use std::collections::BTreeMap;

/// Live blocks by start address (value: end address).
#[derive(Default)]
pub(crate) struct LiveSet {
    blocks: BTreeMap<u64, u64>,
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
        Ok(())
    }

    pub(crate) fn remove(&mut self, ptr: u64, bytes: usize) {
        if bytes > 0 {
            self.blocks.remove(&ptr);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }
}
