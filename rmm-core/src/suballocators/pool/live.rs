//! The pool's checked mode ([`crate::PoolOptions::validate_deallocations`]): the live blocks by
//! address, so that a double free, a foreign pointer or a wrong size is an error instead of a
//! corrupted free list.
//!
//! The map is split into shards by a hash of the address, each behind its own lock and on its own
//! cache lines, so threads allocating and freeing different blocks rarely meet: the cost is one
//! uncontended lock and one hash-map update per allocation and per free.

use crate::error::{human_bytes, MemoryError, Result};
use parking_lot::Mutex;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const SHARDS: usize = 64;

/// Multiplicative hashing of an address without its always-zero alignment bits (the keys are
/// 256-aligned device addresses, never attacker-chosen).
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    #[inline]
    fn write_u64(&mut self, addr: u64) {
        // Another multiplier than the shard's: within a shard, whose addresses share the top
        // bits of that product, the map's own hash bits still vary.
        self.0 = (addr >> 8).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
}

type Shard = Mutex<HashMap<u64, usize, BuildHasherDefault<AddrHasher>>>;

/// One shard, alone on two cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Padded(Shard);

/// The live blocks of a pool, by address (value: the aligned size).
pub(crate) struct LiveBlocks {
    shards: Box<[Padded]>,
}

impl LiveBlocks {
    pub(crate) fn new() -> Self {
        LiveBlocks {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    #[inline]
    fn shard(&self, addr: u64) -> &Shard {
        // The top bits of the product: the low ones of the address repeat with its alignment.
        let i = ((addr >> 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
        &self.shards[i % SHARDS].0
    }

    /// Records a block just handed out.
    #[inline]
    pub(crate) fn insert(&self, addr: u64, size: usize) {
        let previous = self.shard(addr).lock().insert(addr, size);
        debug_assert!(
            previous.is_none(),
            "the pool handed out {addr:#x}, which is live"
        );
    }

    /// Forgets a block being freed as `bytes` (aligned: `size`), or says why it cannot be freed:
    /// it is not live (freed twice, never allocated here) or was allocated with another size.
    #[inline]
    pub(crate) fn remove(&self, addr: u64, bytes: usize, size: usize) -> Result<()> {
        match self.shard(addr).lock().entry(addr) {
            Entry::Occupied(block) if *block.get() == size => {
                block.remove();
                Ok(())
            }
            Entry::Occupied(block) => Err(MemoryError::InvalidDeallocation(format!(
                "{addr:#x} was allocated as {} and is freed as {bytes} bytes",
                human_bytes(*block.get())
            ))),
            Entry::Vacant(_) => Err(MemoryError::InvalidDeallocation(format!(
                "{addr:#x} is not a live allocation of this pool (freed twice, or from another resource)"
            ))),
        }
    }

    /// Number of live blocks.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_double_frees_foreign_pointers_and_wrong_sizes() {
        let live = LiveBlocks::new();
        for i in 0..1000u64 {
            live.insert(0x7000_0000 + i * 256, 256);
        }
        assert_eq!(live.len(), 1000);
        assert!(live.remove(0x7000_0000, 256, 256).is_ok());
        let twice = live.remove(0x7000_0000, 256, 256).unwrap_err();
        assert!(
            twice.to_string().contains("not a live allocation"),
            "{twice}"
        );
        let foreign = live.remove(0x1234_5600, 256, 256).unwrap_err();
        assert!(matches!(foreign, MemoryError::InvalidDeallocation(_)));
        let wrong = live.remove(0x7000_0100, 1000, 1024).unwrap_err();
        assert!(wrong.to_string().contains("allocated as 256 B"), "{wrong}");
        // A refused free changes nothing.
        assert!(live.remove(0x7000_0100, 256, 256).is_ok());
        assert_eq!(live.len(), 998);
    }
}
