//! A concurrent map from stream keys to per-stream state, tuned for "find mine" on every
//! allocation: the first 64 entries live in a fixed array that readers scan without any lock or
//! shared write (so threads on different streams never contend), later ones in a locked map.
//!
//! Entries can be removed (the state of a stream that is gone): a removed array entry becomes
//! *vacant*, its value stays where it is (readers may hold references to it for as long as the
//! map lives) and is handed to the next key inserted, through a `reuse` callback that
//! re-initialises it.
//! Removed overflow entries leave the map. The owner guarantees that nobody looks up a key while
//! it is removed (here: the key of a stream nobody holds a handle to any more); a reader of
//! another key never dereferences a value whose key it did not match.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

const FAST: usize = 64;

/// The key of a vacant array entry (no stream has it: per-thread keys carry the thread index in
/// their low bits, far below this).
const VACANT: u64 = u64::MAX;

pub(crate) struct Slots<T> {
    keys: [AtomicU64; FAST],
    values: [OnceLock<Arc<T>>; FAST],
    /// Array entries ever used (occupied or vacant); written only under `write`.
    len: AtomicUsize,
    overflow: Mutex<HashMap<u64, Arc<T>>>,
    /// Serialises inserts and removals.
    write: Mutex<()>,
}

/// A found entry: borrowed from the array, or shared from the overflow map.
pub(crate) enum Entry<'a, T> {
    Slot(&'a Arc<T>),
    Overflow(Arc<T>),
}

impl<T> Deref for Entry<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            Entry::Slot(v) => v,
            Entry::Overflow(v) => v,
        }
    }
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            keys: std::array::from_fn(|_| AtomicU64::new(VACANT)),
            values: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            overflow: Mutex::new(HashMap::new()),
            write: Mutex::new(()),
        }
    }
}

/// Exclusive right to insert and remove entries, held while it lives.
pub(crate) struct Writer<'a, T> {
    slots: &'a Slots<T>,
    _guard: MutexGuard<'a, ()>,
}

impl<T> Slots<T> {
    #[inline(always)]
    fn find(&self, key: u64) -> Option<Entry<'_, T>> {
        if let Some(value) = self.find_in_array(key) {
            return Some(Entry::Slot(value));
        }
        if self.len.load(Ordering::Acquire) == FAST {
            return self.find_overflow(key);
        }
        None
    }

    /// The value of `key` in the array part: no lock, no call.
    #[inline(always)]
    fn find_in_array(&self, key: u64) -> Option<&Arc<T>> {
        // Acquire: the value of an entry is in place before its key is published (Release).
        let n = self.len.load(Ordering::Acquire).min(FAST);
        let i = self.keys[..n]
            .iter()
            .position(|k| k.load(Ordering::Acquire) == key)?;
        self.values[i].get()
    }

    /// The value of `key` if it is in the array part: no lock, no call (the quick paths).
    #[inline(always)]
    pub(crate) fn get_in_array(&self, key: u64) -> Option<&T> {
        self.find_in_array(key).map(|v| &**v)
    }

    #[cold]
    fn find_overflow(&self, key: u64) -> Option<Entry<'_, T>> {
        self.overflow.lock().get(&key).cloned().map(Entry::Overflow)
    }

    /// The entry of `key`, if there is one (no lock on the array part).
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<Entry<'_, T>> {
        debug_assert_ne!(key, VACANT);
        self.find(key)
    }

    /// The right to insert and remove entries (one holder at a time).
    #[cold]
    pub(crate) fn writer(&self) -> Writer<'_, T> {
        Writer {
            slots: self,
            _guard: self.write.lock(),
        }
    }

    /// Every entry in use, in array order first. An entry may be removed (and its value reused
    /// for another key) right after this returns: the caller must not assume more than that each
    /// value was in use a moment ago.
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        let n = self.len.load(Ordering::Acquire);
        let mut out: Vec<Arc<T>> = (0..n)
            .filter(|&i| self.keys[i].load(Ordering::Acquire) != VACANT)
            .filter_map(|i| self.values[i].get().cloned())
            .collect();
        if n == FAST {
            out.extend(self.overflow.lock().values().cloned());
        }
        out
    }

    /// Entries in use.
    pub(crate) fn count(&self) -> usize {
        let n = self.len.load(Ordering::Acquire);
        let in_array = (0..n)
            .filter(|&i| self.keys[i].load(Ordering::Acquire) != VACANT)
            .count();
        let in_map = if n == FAST {
            self.overflow.lock().len()
        } else {
            0
        };
        in_array + in_map
    }
}

impl<'a, T> Writer<'a, T> {
    /// The entry of `key`, made if there is none: in a vacant array entry (whose value `reuse`
    /// re-initialises for `key`), else in a new one made by `make`.
    pub(crate) fn get_or_try_insert<E>(
        &mut self,
        key: u64,
        reuse: impl FnOnce(&T),
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Entry<'a, T>, E> {
        let slots = self.slots;
        if let Some(found) = slots.find(key) {
            return Ok(found);
        }
        let n = slots.len.load(Ordering::Relaxed);
        if let Some(i) = (0..n).find(|&i| slots.keys[i].load(Ordering::Relaxed) == VACANT) {
            let value = slots.values[i].get().expect("a used entry has a value");
            reuse(value);
            slots.keys[i].store(key, Ordering::Release);
            return Ok(Entry::Slot(value));
        }
        let value = Arc::new(make()?);
        if n < FAST {
            let _ = slots.values[n].set(value);
            slots.keys[n].store(key, Ordering::Release);
            slots.len.store(n + 1, Ordering::Release);
            Ok(Entry::Slot(slots.values[n].get().expect("just set")))
        } else {
            slots.overflow.lock().insert(key, value.clone());
            Ok(Entry::Overflow(value))
        }
    }

    /// Removes every entry for which `retire` answers true (called once per entry in use, without
    /// the overflow map's lock held). A removed array value stays in place for reuse.
    pub(crate) fn retire_where(&mut self, mut retire: impl FnMut(&T) -> bool) {
        let slots = self.slots;
        let n = slots.len.load(Ordering::Relaxed);
        for i in 0..n {
            if slots.keys[i].load(Ordering::Relaxed) == VACANT {
                continue;
            }
            let value = slots.values[i].get().expect("a used entry has a value");
            if retire(value) {
                slots.keys[i].store(VACANT, Ordering::Release);
            }
        }
        if n == FAST {
            let entries: Vec<(u64, Arc<T>)> = slots
                .overflow
                .lock()
                .iter()
                .map(|(&k, v)| (k, v.clone()))
                .collect();
            for (key, value) in entries {
                if retire(&value) {
                    slots.overflow.lock().remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn insert(s: &Slots<AtomicU64>, k: u64) -> u64 {
        s.writer()
            .get_or_try_insert::<()>(
                k,
                |v| v.store(k * 10, Ordering::Relaxed),
                || Ok(AtomicU64::new(k * 10)),
            )
            .unwrap()
            .load(Ordering::Relaxed)
    }

    #[test]
    fn finds_what_was_inserted_beyond_the_fast_array() {
        let s: Slots<AtomicU64> = Slots::default();
        for k in 0..100u64 {
            assert_eq!(insert(&s, k), k * 10);
        }
        for k in 0..100u64 {
            let v = s.get(k).expect("present");
            assert_eq!(v.load(Ordering::Relaxed), k * 10);
        }
        assert_eq!(s.all().len(), 100);
        assert_eq!(s.count(), 100);
        assert_eq!(
            s.writer()
                .get_or_try_insert(500, |_| {}, || Err("refused"))
                .err(),
            Some("refused")
        );
    }

    #[test]
    fn removed_entries_leave_room_that_new_keys_reuse() {
        let s: Slots<AtomicU64> = Slots::default();
        for k in 0..70u64 {
            insert(&s, k);
        }
        // Remove the odd keys (35 of them: 32 in the array, 3 in the overflow map).
        s.writer()
            .retire_where(|v| v.load(Ordering::Relaxed) / 10 % 2 == 1);
        assert_eq!(s.count(), 35);
        assert!(s.get(1).is_none() && s.get(69).is_none());
        assert_eq!(s.get(68).unwrap().load(Ordering::Relaxed), 680);
        // New keys take the vacant array entries (re-initialised by `reuse`), not the map.
        for k in 1000..1032u64 {
            assert_eq!(insert(&s, k), k * 10);
            assert!(matches!(s.get(k), Some(Entry::Slot(_))), "{k} in the array");
        }
        assert_eq!(s.count(), 67);
        assert_eq!(s.all().len(), 67);
    }
}
