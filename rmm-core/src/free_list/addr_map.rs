//! Hash maps keyed by device addresses. Addresses are 256-byte aligned and close together, so the
//! standard SipHash is wasted work: one multiply spreads them well enough, and it is several
//! times cheaper on the allocators' hot paths.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hashing of a `u64` key.
#[derive(Default, Clone, Copy)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    #[inline]
    fn write_u64(&mut self, key: u64) {
        // Drop the always-zero alignment bits, then multiply by 2^64 / golden ratio.
        let h = (key >> 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The table picks buckets from the low bits and tags from the top ones: fold high into low.
        self.0 = h ^ (h >> 32);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(self.0 ^ u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map from addresses to `V`.
pub(crate) type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;
