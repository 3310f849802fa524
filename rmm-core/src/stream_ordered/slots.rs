//! A concurrent map from stream keys to per-stream state, tuned for "find mine" on every
//! allocation: the first 64 entries live in a fixed array that readers scan without any lock or
//! shared write (so threads on different streams never contend), later ones in a locked map.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

const FAST: usize = 64;

pub(crate) struct Slots<T> {
    keys: [AtomicU64; FAST],
    values: [OnceLock<Arc<T>>; FAST],
    /// Entries published in the array; written only under `insert`.
    len: AtomicUsize,
    overflow: Mutex<HashMap<u64, Arc<T>>>,
    insert: Mutex<()>,
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
            keys: std::array::from_fn(|_| AtomicU64::new(0)),
            values: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            overflow: Mutex::new(HashMap::new()),
            insert: Mutex::new(()),
        }
    }
}

impl<T> Slots<T> {
    #[inline(always)]
    fn find(&self, key: u64) -> Option<Entry<'_, T>> {
        // Acquire: keys and values below `len` were written before it was published.
        let n = self.len.load(Ordering::Acquire);
        for i in 0..n {
            if self.keys[i].load(Ordering::Relaxed) == key {
                return self.values[i].get().map(Entry::Slot);
            }
        }
        if n == FAST {
            return self.find_overflow(key);
        }
        None
    }

    #[cold]
    fn find_overflow(&self, key: u64) -> Option<Entry<'_, T>> {
        self.overflow.lock().get(&key).cloned().map(Entry::Overflow)
    }

    /// The entry of `key`, made by `make` if there is none yet.
    #[inline]
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: u64,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Entry<'_, T>, E> {
        if let Some(found) = self.find(key) {
            return Ok(found);
        }
        self.insert_slow(key, make)
    }

    #[cold]
    fn insert_slow<E>(
        &self,
        key: u64,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Entry<'_, T>, E> {
        let _guard = self.insert.lock();
        if let Some(found) = self.find(key) {
            return Ok(found);
        }
        let value = Arc::new(make()?);
        let n = self.len.load(Ordering::Relaxed);
        if n < FAST {
            let _ = self.values[n].set(value);
            self.keys[n].store(key, Ordering::Relaxed);
            self.len.store(n + 1, Ordering::Release);
            Ok(Entry::Slot(self.values[n].get().expect("just set")))
        } else {
            self.overflow.lock().insert(key, value.clone());
            Ok(Entry::Overflow(value))
        }
    }

    /// Every entry, in insertion order for the array part.
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        let n = self.len.load(Ordering::Acquire);
        let mut out: Vec<Arc<T>> = self.values[..n]
            .iter()
            .filter_map(|v| v.get().cloned())
            .collect();
        if n == FAST {
            out.extend(self.overflow.lock().values().cloned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_beyond_the_fast_array() {
        let s: Slots<u64> = Slots::default();
        for k in 0..100u64 {
            let v = s.get_or_try_insert::<()>(k, || Ok(k * 10)).unwrap();
            assert_eq!(*v, k * 10);
        }
        for k in 0..100u64 {
            let v = s
                .get_or_try_insert::<()>(k, || panic!("{k} already present"))
                .unwrap();
            assert_eq!(*v, k * 10);
        }
        assert_eq!(s.all().len(), 100);
        assert_eq!(
            s.get_or_try_insert(500, || Err("refused")).err(),
            Some("refused")
        );
    }
}
