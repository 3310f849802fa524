//! Stream-ordered free lists: the machinery the pool, the arena and the fixed-size resource share.
//!
//! Each stream has its own free list behind its own lock, so threads working on different streams
//! never contend. A block freed on stream S goes into S's list and is reused at once by later
//! allocations on S (the stream's order makes that safe). Another stream T reuses it only after
//! *stealing*: T makes its stream wait (on the device) for an event recorded on S at that moment,
//! then takes S's whole list, so one record/wait pair covers every block S freed so far. Nothing is
//! recorded on the free path (RMM records an event on every free), except for per-thread default
//! streams: their handle means a different stream on every thread, so no other thread can record
//! on them later, and their owner records as it frees.

mod key;
mod lock;
mod slots;

pub(crate) use key::{stream_key, thread_index};
pub(crate) use slots::Entry;

use crate::error::Result;
use crate::free_list::FreeStore;
use key::is_per_thread;
use lock::ListLock;
use rmm_cuda::{Event, Stream};
use slots::Slots;

/// The free list of one stream. Aligned to two cache lines so that the lists of different
/// streams, used by different threads, never share one.
#[repr(align(128))]
pub(crate) struct StreamList<F> {
    key: u64,
    stream: Stream,
    state: ListLock<ListState<F>>,
}

pub(crate) struct ListState<F> {
    pub(crate) free: F,
    /// Marks this stream's frees for the streams that steal them (made on first need).
    event: Option<Event>,
}

impl<F> ListState<F> {
    fn event(&mut self, stream: &Stream) -> Result<&Event> {
        if self.event.is_none() {
            self.event = Some(stream.device().new_event()?);
        }
        Ok(self.event.as_ref().expect("just made"))
    }
}

impl<F: FreeStore> StreamList<F> {
    /// The stream whose frees this list holds.
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    fn per_thread(&self) -> bool {
        is_per_thread(self.key)
    }

    /// A block of `size` bytes from this stream's own free blocks.
    #[inline]
    pub(crate) fn take(&self, size: usize) -> Option<u64> {
        self.state.lock().free.take(size)
    }

    /// A block freed by work on this stream.
    #[inline]
    pub(crate) fn give(&self, addr: u64, size: usize) -> Result<()> {
        let mut st = self.state.lock();
        st.free.give(addr, size);
        if self.per_thread() {
            let ev = st.event(&self.stream)?;
            self.stream.record(ev)?;
        }
        Ok(())
    }

    /// Memory no work has used yet (fresh from upstream or from a reservoir that only holds such
    /// memory): usable by this stream without any ordering.
    pub(crate) fn give_fresh(&self, addr: u64, size: usize) {
        self.state.lock().free.give(addr, size);
    }

    /// Several blocks of fresh memory at once (see [`StreamList::give_fresh`]).
    pub(crate) fn give_fresh_many(&self, blocks: &[(u64, usize)]) {
        let mut st = self.state.lock();
        for &(a, s) in blocks {
            st.free.give(a, s);
        }
    }

    /// Blocks this stream has already been ordered after (see [`StreamLists::steal_into`]).
    fn give_ordered(&self, blocks: &[(u64, usize)]) -> Result<()> {
        let mut st = self.state.lock();
        for &(a, s) in blocks {
            st.free.give(a, s);
        }
        if self.per_thread() {
            // A later thief waits on this event only: it must cover the wait just made too.
            let ev = st.event(&self.stream)?;
            self.stream.record(ev)?;
        }
        Ok(())
    }

    /// Makes later work on `thief` wait for everything freed into this list so far. The caller
    /// holds this list's lock (`st`), so no other thief re-records the event in between.
    fn order_before(&self, st: &mut ListState<F>, thief: &Stream) -> Result<()> {
        let ev = st.event(&self.stream)?;
        if !self.per_thread() {
            self.stream.record(ev)?;
        }
        thief.wait(ev)?;
        Ok(())
    }

    /// Waits on the host until the work that freed this list's blocks is done.
    fn synchronize(&self, st: &mut ListState<F>) -> Result<()> {
        if self.per_thread() {
            // Only the owning thread can name its per-thread stream; the event it recorded at
            // its last free covers everything in the list.
            if let Some(ev) = &st.event {
                ev.synchronize()?;
            }
            Ok(())
        } else {
            Ok(self.stream.synchronize()?)
        }
    }
}

/// Summary of one stream's free list, for statistics and failure dumps.
#[derive(Debug, Clone)]
pub(crate) struct ListSummary {
    pub(crate) stream: Stream,
    pub(crate) free_bytes: usize,
    pub(crate) largest: usize,
    pub(crate) blocks: usize,
}

/// The free lists of every stream a resource has seen.
pub(crate) struct StreamLists<F> {
    slots: Slots<StreamList<F>>,
}

impl<F> Default for StreamLists<F> {
    fn default() -> Self {
        StreamLists {
            slots: Slots::default(),
        }
    }
}

impl<F: FreeStore> StreamLists<F> {
    /// The list of `stream`, made with `make` on first use.
    #[inline]
    pub(crate) fn get(
        &self,
        stream: &Stream,
        make: impl FnOnce() -> F,
    ) -> Result<Entry<'_, StreamList<F>>> {
        let key = stream_key(stream);
        self.slots.get_or_try_insert(key, || {
            Ok(StreamList {
                key,
                stream: stream.clone(),
                state: ListLock::new(ListState {
                    free: make(),
                    event: None,
                }),
            })
        })
    }

    /// Moves other streams' free blocks into `me` after ordering `me`'s stream behind the work
    /// that freed them (one event record and wait per list taken, no host synchronisation).
    /// First the list of one stream that holds a block of `size` bytes; when no single list does
    /// and `merge_all` is set, every list (so fragments of several streams can coalesce in `me`).
    /// Returns whether anything moved.
    pub(crate) fn steal_into(
        &self,
        me: &StreamList<F>,
        size: usize,
        merge_all: bool,
    ) -> Result<bool> {
        let others: Vec<_> = self
            .slots
            .all()
            .into_iter()
            .filter(|l| l.key != me.key)
            .collect();
        let mut moved = Vec::new();
        for victim in &others {
            let mut st = victim.state.lock();
            if st.free.largest() >= size {
                victim.order_before(&mut st, &me.stream)?;
                st.free.drain_into(&mut moved);
                break;
            }
        }
        if moved.is_empty() && merge_all {
            for victim in &others {
                let mut st = victim.state.lock();
                if st.free.block_count() > 0 {
                    victim.order_before(&mut st, &me.stream)?;
                    st.free.drain_into(&mut moved);
                }
            }
        }
        if moved.is_empty() {
            return Ok(false);
        }
        me.give_ordered(&moved)?;
        Ok(true)
    }

    /// Empties every list into `out`, waiting on the host first for the streams that freed the
    /// blocks, so they may go to any stream (or back upstream) without further ordering.
    pub(crate) fn drain_synchronized(&self, out: &mut Vec<(u64, usize)>) -> Result<()> {
        for list in self.slots.all() {
            let mut st = list.state.lock();
            if st.free.block_count() > 0 {
                list.synchronize(&mut st)?;
                st.free.drain_into(out);
            }
        }
        Ok(())
    }

    /// Free bytes over all lists.
    pub(crate) fn free_bytes(&self) -> usize {
        self.slots
            .all()
            .iter()
            .map(|l| l.state.lock().free.free_bytes())
            .sum()
    }

    /// The largest single free block over all lists.
    pub(crate) fn largest(&self) -> usize {
        self.slots
            .all()
            .iter()
            .map(|l| l.state.lock().free.largest())
            .max()
            .unwrap_or(0)
    }

    /// One summary per list.
    pub(crate) fn summaries(&self) -> Vec<ListSummary> {
        self.slots
            .all()
            .iter()
            .map(|l| {
                let st = l.state.lock();
                ListSummary {
                    stream: l.stream.clone(),
                    free_bytes: st.free.free_bytes(),
                    largest: st.free.largest(),
                    blocks: st.free.block_count(),
                }
            })
            .collect()
    }
}
