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
//!
//! A thief takes the block it needs while it holds the victim's lock, so no other thief can take
//! it from under it. Blocks on their way between lists (a steal, a carve from an owner's
//! reservoir) are in no list for a moment; such moves hold [`StreamLists::moving`] shared, and
//! [`StreamLists::gather_and_take`], the last resort before an owner grows or reports out of
//! memory, holds it exclusively, so that it sees every free block.

mod key;
mod lock;
mod slots;

pub(crate) use key::{stream_key, thread_index};
pub(crate) use slots::Entry;

use crate::error::Result;
use crate::free_list::FreeStore;
use key::is_per_thread;
use lock::ListLock;
use parking_lot::{RwLock, RwLockReadGuard};
use rmm_cuda::{Event, Stream};
use slots::Slots;
use std::sync::Arc;

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

    /// Several blocks of fresh memory at once (see [`StreamList::give_fresh`]), then a block of
    /// `size` bytes taken in the same critical section (so no thief takes them in between).
    pub(crate) fn give_fresh_many_and_take(
        &self,
        blocks: &[(u64, usize)],
        size: usize,
    ) -> Option<u64> {
        let mut st = self.state.lock();
        for &(a, s) in blocks {
            st.free.give(a, s);
        }
        st.free.take(size)
    }

    /// Blocks this stream has already been ordered after (see [`StreamLists::steal`]); then, when
    /// `size` is given, a block of that many bytes taken in the same critical section (so that the
    /// blocks just gathered, coalesced with this list's own, are not stolen before the take).
    fn give_ordered_and_take(
        &self,
        blocks: &[(u64, usize)],
        size: Option<usize>,
    ) -> Result<Option<u64>> {
        let mut st = self.state.lock();
        for &(a, s) in blocks {
            st.free.give(a, s);
        }
        if self.per_thread() && !blocks.is_empty() {
            // A later thief waits on this event only: it must cover the wait just made too.
            let ev = st.event(&self.stream)?;
            self.stream.record(ev)?;
        }
        Ok(size.and_then(|size| st.free.take(size)))
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
    /// Held shared by every move that takes free blocks out of one place (a list, the owner's
    /// reservoir) before it puts them into another, so that they are in no list meanwhile;
    /// exclusively by [`StreamLists::gather_and_take`], which must find every free block.
    /// Allocations and frees on a stream's own list never touch it.
    moving: RwLock<()>,
}

impl<F> Default for StreamLists<F> {
    fn default() -> Self {
        StreamLists {
            slots: Slots::default(),
            moving: RwLock::new(()),
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

    /// Held while free blocks are out of every list on their way to another one (the owner's
    /// carves from its reservoir take it; steals take it themselves). Never held twice by one
    /// thread, and never while waiting for the owner's growth lock.
    pub(crate) fn moving(&self) -> RwLockReadGuard<'_, ()> {
        self.moving.read()
    }

    /// The other streams' lists, starting after `me`'s (so that thieves spread over the lists
    /// rather than all trying the first one, and in a ring of streams handing blocks on, each
    /// first takes back what it handed to the next).
    fn others(&self, me: &StreamList<F>) -> Vec<Arc<StreamList<F>>> {
        let mut all = self.slots.all();
        if let Some(at) = all.iter().position(|l| l.key == me.key) {
            all.rotate_left(at + 1);
            all.pop();
        }
        all
    }

    /// Takes a block of `size` bytes from other streams' free blocks, after ordering `me`'s
    /// stream behind the work that freed them (one event record and wait per list taken, no host
    /// synchronisation). First the list of one stream that holds a block of `size` bytes: the
    /// block is taken under that list's lock and the rest of the list moves to `me`. When no
    /// single list has one and `merge_all` is set, every list moves to `me`, where fragments of
    /// several streams may coalesce, and the block is taken in the same critical section.
    /// `None` when nothing fitted: other threads may have been moving blocks at that moment,
    /// which only [`StreamLists::gather_and_take`] rules out.
    pub(crate) fn steal(
        &self,
        me: &StreamList<F>,
        size: usize,
        merge_all: bool,
    ) -> Result<Option<u64>> {
        let _moving = self.moving();
        let others = self.others(me);
        let mut moved = Vec::new();
        for victim in &others {
            let mut st = victim.state.lock();
            if st.free.largest() >= size {
                victim.order_before(&mut st, &me.stream)?;
                let ptr = st.free.take(size);
                st.free.drain_into(&mut moved);
                drop(st);
                if let Err(e) = me.give_ordered_and_take(&moved, None) {
                    if let Some(p) = ptr {
                        // Ordered for `me` already: keep it there rather than lose it.
                        me.give_fresh(p, size);
                    }
                    return Err(e);
                }
                if ptr.is_some() {
                    return Ok(ptr);
                }
                // (`largest` promised a fit; should a store not keep that promise, the blocks
                // are in `me` now and the search goes on.)
                moved.clear();
            }
        }
        if !merge_all {
            return Ok(None);
        }
        Self::drain_others(&others, me, &mut moved)?;
        if moved.is_empty() {
            return Ok(None);
        }
        me.give_ordered_and_take(&moved, Some(size))
    }

    /// The last resort before the owner grows or reports that it is out of memory: while no other
    /// move is under way, gathers every free block into `me`'s list, the other streams' (ordered
    /// as for a steal) and what `extra` adds (the owner's reservoir, memory no work has used),
    /// so that they coalesce there, then takes `size` bytes from it. `None` means that no block
    /// of `size` bytes was free anywhere (the frees made while this runs aside). Each list is
    /// taken in turn, so owners keep allocating and freeing meanwhile.
    pub(crate) fn gather_and_take(
        &self,
        me: &StreamList<F>,
        size: usize,
        extra: impl FnOnce(&mut Vec<(u64, usize)>),
    ) -> Result<Option<u64>> {
        let _all = self.moving.write();
        let mut moved = Vec::new();
        Self::drain_others(&self.others(me), me, &mut moved)?;
        extra(&mut moved);
        me.give_ordered_and_take(&moved, Some(size))
    }

    /// Moves every block of `others` into `moved`, ordering `me`'s stream after each list taken.
    /// Should ordering fail, what was taken so far goes to `me` before the error returns.
    fn drain_others(
        others: &[Arc<StreamList<F>>],
        me: &StreamList<F>,
        moved: &mut Vec<(u64, usize)>,
    ) -> Result<()> {
        for victim in others {
            let mut st = victim.state.lock();
            if st.free.block_count() > 0 {
                if let Err(e) = victim.order_before(&mut st, &me.stream) {
                    drop(st);
                    me.give_ordered_and_take(moved, None)?;
                    return Err(e);
                }
                st.free.drain_into(moved);
            }
        }
        Ok(())
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
