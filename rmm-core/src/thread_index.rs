//! A small number for each thread, shared by the stream-ordered free lists (the key of a
//! per-thread default stream) and the logging and tracking adaptors (the thread of a record).

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_THREAD: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD_INDEX: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A small number unique to the calling thread (for keys, logs and allocation records).
#[inline]
pub(crate) fn thread_index() -> u64 {
    THREAD_INDEX.with(|i| *i)
}
