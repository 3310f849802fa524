//! The lock of a stream's free list. Contention on it is rare by design (threads on different
//! streams use different lists), so it is a test-and-set lock whose release is a plain store: one
//! atomic read-modify-write per critical section instead of a general mutex's two. A waiter spins
//! briefly, then yields its core, so a holder preempted on an oversubscribed machine can finish.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct ListLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time.
unsafe impl<T: Send> Send for ListLock<T> {}
// SAFETY: as above; `&ListLock` only gives `&mut T` through a guard, one holder at a time.
unsafe impl<T: Send> Sync for ListLock<T> {}

pub(crate) struct ListGuard<'a, T> {
    lock: &'a ListLock<T>,
}

impl<T> ListLock<T> {
    pub(crate) fn new(value: T) -> Self {
        ListLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> ListGuard<'_, T> {
        if self.locked.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
        ListGuard { lock: self }
    }

    /// The lock if it is free now, without waiting (the quick paths, which must call nothing).
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<ListGuard<'_, T>> {
        if self.locked.swap(true, Ordering::Acquire) {
            None
        } else {
            Some(ListGuard { lock: self })
        }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < 100 {
                    std::hint::spin_loop();
                    spins += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }
}

impl<T> Deref for ListGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ListGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and the guard is borrowed mutably, so the reference is unique.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ListGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_other_threads() {
        let lock = Arc::new(ListLock::new(0u64));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*lock.lock(), 80_000);
    }
}
