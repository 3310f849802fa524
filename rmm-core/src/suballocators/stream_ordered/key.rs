//! Which per-stream state a stream maps to.

use crate::thread_index::thread_index;
use rmm_cuda::{Stream, StreamId};

/// Keys of per-thread default streams carry this bit (real stream handles are user-space
/// pointers, far below it).
const PER_THREAD: u64 = 1 << 63;

/// The key of `stream`'s state. The per-thread default stream has one handle value but is a
/// different stream on every thread, so its key includes the calling thread (RMM's per-thread
/// arenas and per-thread events come from the same fact).
#[inline]
pub(crate) fn stream_key(stream: &Stream) -> u64 {
    let id = stream.id();
    if id == StreamId::PER_THREAD_DEFAULT {
        PER_THREAD | thread_index()
    } else {
        id.0
    }
}

/// True for keys of per-thread default streams.
#[inline]
pub(crate) fn is_per_thread(key: u64) -> bool {
    key & PER_THREAD != 0
}
