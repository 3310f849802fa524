//! The arena's state as text: what a failure dump and [`super::ArenaResource::state_report`] show.

use crate::error::human_bytes;
use crate::suballocators::free_list::{CoalescingFreeList, FreeStore};
use crate::suballocators::stream_ordered::ListSummary;
use std::fmt::Write;

/// Free blocks of the global arena listed at most (largest first).
const LISTED_BLOCKS: usize = 32;

/// Fragmentation as RMM reports it: the share of free memory outside the largest free block.
fn fragmentation(free: usize, largest: usize) -> f64 {
    if free == 0 {
        0.0
    } else {
        100.0 * (1.0 - largest as f64 / free as f64)
    }
}

pub(super) fn report(
    base: u64,
    size: usize,
    superblock: usize,
    portion: usize,
    global: &mut CoalescingFreeList,
    arenas: &[ListSummary],
) -> String {
    let mut out = String::new();
    let arena_free: usize = arenas.iter().map(|a| a.free_bytes).sum();
    let _ = writeln!(
        out,
        "arena [{base:#x}, {:#x}): {}, superblocks of {}, portions of {}",
        base + size as u64,
        human_bytes(size),
        human_bytes(superblock),
        human_bytes(portion)
    );
    let _ = writeln!(
        out,
        "in use: {}; free: {} in the global arena, {} in {} per-stream arenas",
        human_bytes(size - global.free_bytes() - arena_free),
        human_bytes(global.free_bytes()),
        human_bytes(arena_free),
        arenas.len()
    );
    let _ = writeln!(
        out,
        "global arena: {} free blocks, largest {}, fragmentation {:.2}%",
        global.len(),
        human_bytes(global.largest()),
        fragmentation(global.free_bytes(), global.largest())
    );
    let mut blocks: Vec<(u64, usize)> = global.blocks().collect();
    blocks.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (addr, len) in blocks.iter().take(LISTED_BLOCKS) {
        let _ = writeln!(
            out,
            "  free [{addr:#x}, {:#x}) {}",
            addr + *len as u64,
            human_bytes(*len)
        );
    }
    if blocks.len() > LISTED_BLOCKS {
        let _ = writeln!(out, "  ... {} smaller blocks", blocks.len() - LISTED_BLOCKS);
    }
    for a in arenas {
        let _ = writeln!(
            out,
            "arena of {:?}: {} free in {} blocks, largest {}, fragmentation {:.2}%",
            a.stream,
            human_bytes(a.free_bytes),
            a.blocks,
            human_bytes(a.largest),
            fragmentation(a.free_bytes, a.largest)
        );
    }
    out
}
