//! A hash table from device addresses to node indices, for the free lists' hot paths.
//!
//! Open addressing with linear probing and backward-shift deletion (no tombstones), Fibonacci
//! hashing of the address without its always-zero alignment bits, at most half full. A lookup is
//! a multiply, a shift and usually one or two probes: several times fewer instructions than a
//! general-purpose map with a general hasher, which matters at ~3 lookups per allocation.

/// Address 0 is never a block boundary (no allocation starts or ends at the null address), so
/// it marks an empty slot.
const EMPTY: u64 = 0;
const MIN_CAPACITY: usize = 16;

#[derive(Clone)]
pub(crate) struct AddrMap {
    keys: Box<[u64]>,
    values: Box<[u32]>,
    len: usize,
    /// 64 - log2(capacity): the hash keeps the top bits of the product.
    shift: u32,
}

impl Default for AddrMap {
    fn default() -> Self {
        Self::with_capacity(MIN_CAPACITY)
    }
}

impl AddrMap {
    fn with_capacity(capacity: usize) -> Self {
        debug_assert!(capacity.is_power_of_two());
        AddrMap {
            keys: vec![EMPTY; capacity].into_boxed_slice(),
            values: vec![0; capacity].into_boxed_slice(),
            len: 0,
            shift: 64 - capacity.trailing_zeros(),
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.keys.len() - 1
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        ((key >> 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `key`, if present.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        debug_assert!(key != EMPTY);
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.keys[i];
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        self.find(key).map(|i| self.values[i])
    }

    /// Sets `key` to `value` (replacing any value it had).
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, value: u32) {
        debug_assert!(key != EMPTY);
        if (self.len + 1) * 4 > self.keys.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let k = self.keys[i];
            if k == key {
                self.values[i] = value;
                return;
            }
            if k == EMPTY {
                self.keys[i] = key;
                self.values[i] = value;
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Removes `key`; returns its value.
    #[inline]
    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        let mut hole = self.find(key)?;
        let value = self.values[hole];
        self.len -= 1;
        // Backward shift: pull later entries of the probe run into the hole when the hole lies
        // between their home slot and their slot, so lookups never stop early at a gap.
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let k = self.keys[i];
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            // Distance from home to i and to the hole, along the probe direction.
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                self.keys[hole] = k;
                self.values[hole] = self.values[i];
                hole = i;
            }
        }
        self.keys[hole] = EMPTY;
        Some(value)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.keys.fill(EMPTY);
            self.len = 0;
        }
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = u32> + '_ {
        self.keys
            .iter()
            .zip(self.values.iter())
            .filter(|(&k, _)| k != EMPTY)
            .map(|(_, &v)| v)
    }

    #[cold]
    fn grow(&mut self) {
        let mut bigger = Self::with_capacity(self.keys.len() * 2);
        for (&k, &v) in self.keys.iter().zip(self.values.iter()) {
            if k != EMPTY {
                bigger.insert(k, v);
            }
        }
        *self = bigger;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_map_under_random_inserts_and_removes() {
        let mut ours = AddrMap::default();
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut rng = crate::testing::SplitMix64::new(7);
        for step in 0..200_000u32 {
            // Few distinct keys, many collisions and long probe runs.
            let key = 0x7f00_0000_0000 + (rng.below(3000) << 8);
            match rng.below(3) {
                0 | 1 => {
                    ours.insert(key, step);
                    model.insert(key, step);
                }
                _ => assert_eq!(ours.remove(key), model.remove(&key)),
            }
            if step % 1000 == 0 {
                assert_eq!(ours.len(), model.len());
                for (&k, &v) in &model {
                    assert_eq!(ours.get(k), Some(v));
                }
            }
        }
        let mut vals: Vec<u32> = ours.values().collect();
        let mut want: Vec<u32> = model.values().copied().collect();
        vals.sort_unstable();
        want.sort_unstable();
        assert_eq!(vals, want);
        ours.clear();
        assert_eq!((ours.len(), ours.get(0x7f00_0000_0100)), (0, None));
    }
}
