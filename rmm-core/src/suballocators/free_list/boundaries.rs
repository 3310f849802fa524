//! Addresses where two upstream chunks touch. Free blocks must never coalesce across them: a block
//! spanning two upstream allocations is not one allocation for the driver (copies and frees of
//! it would fail), and the chunks could no longer be released one by one.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The boundary set of one resource, shared by all its free lists. Lists keep a copy and refresh
/// it when the generation changes, so the free path reads one atomic instead of taking a lock.
#[derive(Debug, Default)]
pub(crate) struct ChunkBoundaries {
    generation: AtomicU64,
    addrs: Mutex<Vec<u64>>,
}

impl ChunkBoundaries {
    /// Replaces the set. A boundary must be published before memory on either side of it can
    /// reach a free list: lists only learn of it on their next refresh.
    pub(crate) fn set(&self, addrs: Vec<u64>) {
        let mut guard = self.addrs.lock();
        *guard = addrs;
        self.generation.fetch_add(1, Ordering::Release);
    }

    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Copies the set into `into`; returns the generation the copy belongs to.
    pub(crate) fn copy_into(&self, into: &mut Vec<u64>) -> u64 {
        let guard = self.addrs.lock();
        into.clone_from(&guard);
        self.generation.load(Ordering::Relaxed)
    }
}

/// Boundaries of a set of chunks given as `(start, size)`: every start that is another chunk's end.
pub(crate) fn touching_points(chunks: impl IntoIterator<Item = (u64, usize)>) -> Vec<u64> {
    let mut spans: Vec<(u64, u64)> = chunks.into_iter().map(|(s, n)| (s, s + n as u64)).collect();
    spans.sort_unstable();
    spans
        .windows(2)
        .filter(|w| w[0].1 == w[1].0)
        .map(|w| w[1].0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_points_are_shared_ends() {
        let pts = touching_points([
            (0x3000, 0x1000),
            (0x1000, 0x1000),
            (0x2000, 0x1000),
            (0x9000, 16),
        ]);
        assert_eq!(pts, vec![0x2000, 0x3000]);
        assert!(touching_points([(0x1000, 0x100)]).is_empty());
    }
}
