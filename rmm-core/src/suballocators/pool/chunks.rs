//! The upstream allocations ("chunks") a pool holds, and the boundaries between touching ones.

use crate::suballocators::free_list::{touching_points, ChunkBoundaries};
use rmm_cuda::Stream;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One upstream allocation, with the stream it was made on (it is given back on that stream).
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub(crate) size: usize,
    pub(crate) stream: Stream,
}

/// Chunks by start address. Every change republishes the boundaries the free lists respect.
#[derive(Debug)]
pub(crate) struct Chunks {
    map: BTreeMap<u64, Chunk>,
    boundaries: Arc<ChunkBoundaries>,
    published: Vec<u64>,
}

impl Chunks {
    pub(crate) fn new(boundaries: Arc<ChunkBoundaries>) -> Self {
        Chunks {
            map: BTreeMap::new(),
            boundaries,
            published: Vec::new(),
        }
    }

    /// Records a chunk; its boundaries are published before this returns, so its memory may then
    /// enter the free lists.
    pub(crate) fn insert(&mut self, addr: u64, chunk: Chunk) {
        self.map.insert(addr, chunk);
        self.republish();
    }

    pub(crate) fn remove(&mut self, addr: u64) -> Option<Chunk> {
        let chunk = self.map.remove(&addr);
        self.republish();
        chunk
    }

    fn republish(&mut self) {
        let points = touching_points(self.map.iter().map(|(&a, c)| (a, c.size)));
        if points != self.published {
            self.boundaries.set(points.clone());
            self.published = points;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Chunk)> {
        self.map.iter().map(|(&a, c)| (a, c))
    }

    pub(crate) fn take_all(&mut self) -> BTreeMap<u64, Chunk> {
        let all = std::mem::take(&mut self.map);
        self.republish();
        all
    }
}
