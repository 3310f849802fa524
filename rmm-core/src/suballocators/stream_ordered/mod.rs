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
//! reservoir, a host wait before a release) are in no list for a moment; such moves hold
//! [`StreamLists::moving`] shared, and [`StreamLists::gather_and_take`], the last resort before an
//! owner grows or reports out of memory, holds it exclusively, so that it sees every free block.
//! No list lock is ever held across a host wait: [`StreamLists::drain_synchronized`] takes a
//! list's blocks out under its lock, waits for their stream without it, then hands them on.
//!
//! Streams come and go (a program may use a stream per task): when a list's stream has no handle
//! left but the list's own (see [`rmm_cuda::Stream::is_sole_handle`]), nobody can allocate or free
//! on it any more, so the list is *retired* the next time a stream is added (or the owner
//! releases or defragments): its blocks go to the *retired list*, one list shared by every retired
//! stream, whose own stream (the resource's) is made to wait (on the device) for each retired
//! stream's work; other streams steal from it as from any list. The retired stream's handle is
//! dropped then (so the stream itself is destroyed), and its entry is reused by the next new
//! stream. The number of lists is thus bounded by the streams alive (plus the per-thread default
//! streams of threads that have used the resource: only their own thread can order work on them,
//! so they are never retired).

mod key;
mod lock;
mod slots;

pub(crate) use key::stream_key;
pub(crate) use slots::Entry;

use crate::error::Result;
use crate::suballocators::free_list::FreeStore;
use key::is_per_thread;
use lock::ListLock;
use once_cell::sync::OnceCell;
use parking_lot::{RwLock, RwLockReadGuard};
use rmm_cuda::{Event, Stream, StreamId};
use slots::{Slots, Writer};
use std::sync::Arc;

/// The free list of one stream. Aligned to two cache lines so that the lists of different
/// streams, used by different threads, never share one.
#[repr(align(128))]
pub(crate) struct StreamList<F> {
    state: ListLock<ListState<F>>,
}

pub(crate) struct ListState<F> {
    pub(crate) free: F,
    /// The stream whose frees this list holds; `None` once the stream is retired (the list is
    /// empty then, and waits in its entry for the next new stream).
    stream: Option<Stream>,
    /// The stream is a per-thread default stream: only its own thread may record on it.
    per_thread: bool,
    /// Marks this stream's frees for the streams that steal them (made on first need). Shared so
    /// that a host wait on it can happen without this list's lock.
    event: Option<Arc<Event>>,
}

impl<F> ListState<F> {
    /// Records this list's event at the current end of its stream (nothing for a retired list).
    fn record(&mut self) -> Result<()> {
        let Some(stream) = &self.stream else {
            return Ok(());
        };
        if self.event.is_none() {
            self.event = Some(Arc::new(stream.device().new_event()?));
        }
        stream.record(self.event.as_ref().expect("just made"))?;
        Ok(())
    }

    /// Makes later work on `thief` wait for everything freed into this list so far. The caller
    /// holds this list's lock, so no other thief re-records the event in between.
    fn order_before(&mut self, thief: &Stream) -> Result<()> {
        if !self.per_thread {
            self.record()?;
        }
        // A per-thread list whose owner never recorded holds only memory no work has used.
        if let Some(ev) = &self.event {
            thief.wait(ev)?;
        }
        Ok(())
    }

    /// What the host must wait for before this list's blocks are free of the work that freed
    /// them: taken under the lock, waited for without it.
    fn host_wait(&self) -> HostWait {
        if self.per_thread {
            // Only the owning thread can name its per-thread stream; the event it recorded at
            // its last free covers everything in the list (a later record covers more).
            self.event
                .clone()
                .map_or(HostWait::Nothing, HostWait::Event)
        } else {
            self.stream
                .clone()
                .map_or(HostWait::Nothing, HostWait::Stream)
        }
    }
}

/// A host wait taken out of a list's lock (see [`ListState::host_wait`]).
enum HostWait {
    Stream(Stream),
    Event(Arc<Event>),
    Nothing,
}

impl HostWait {
    fn wait(&self) -> Result<()> {
        match self {
            HostWait::Stream(s) => s.synchronize()?,
            HostWait::Event(e) => e.synchronize()?,
            HostWait::Nothing => {}
        }
        Ok(())
    }
}

impl<F: FreeStore> StreamList<F> {
    fn new(free: F, stream: &Stream, per_thread: bool) -> Self {
        StreamList {
            state: ListLock::new(ListState {
                free,
                stream: Some(stream.clone()),
                per_thread,
                event: None,
            }),
        }
    }

    /// A block of `size` bytes from this stream's own free blocks.
    #[inline(always)]
    pub(crate) fn take(&self, size: usize) -> Option<u64> {
        self.state.lock().free.take(size)
    }

    /// [`StreamList::take`] when the lock is free now (no wait).
    #[inline(always)]
    fn try_take(&self, size: usize) -> Option<u64> {
        self.state.try_lock()?.free.take(size)
    }

    /// [`FreeStore::give_quick`] under this list's lock when it is free now; never for a
    /// per-thread default stream (its free records an event: [`StreamList::give`]).
    #[inline(always)]
    fn try_give_quick(&self, addr: u64, size: usize) -> bool {
        let Some(mut st) = self.state.try_lock() else {
            return false;
        };
        !st.per_thread && st.free.give_quick(addr, size)
    }

    /// Runs `f` on this stream's free blocks (read only).
    pub(crate) fn inspect<R>(&self, f: impl FnOnce(&F) -> R) -> R {
        f(&self.state.lock().free)
    }

    /// A block freed by work on this stream.
    #[inline(always)]
    pub(crate) fn give(&self, addr: u64, size: usize) -> Result<()> {
        let mut st = self.state.lock();
        st.free.give(addr, size);
        if st.per_thread {
            st.record()?;
        }
        Ok(())
    }

    /// Memory no work has used yet (fresh from upstream or from a reservoir that only holds such
    /// memory): usable by this stream without any ordering.
    pub(crate) fn give_fresh(&self, addr: u64, size: usize) {
        self.state.lock().free.give_moved(addr, size);
    }

    /// Several blocks of fresh memory at once (see [`StreamList::give_fresh`]); also puts back
    /// blocks taken out of this list and not handed on.
    pub(crate) fn give_fresh_many(&self, blocks: &[(u64, usize)]) {
        let mut st = self.state.lock();
        for &(a, s) in blocks {
            st.free.give_moved(a, s);
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
            st.free.give_moved(a, s);
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
            st.free.give_moved(a, s);
        }
        if st.per_thread && !blocks.is_empty() {
            // A later thief waits on this event only: it must cover the wait just made too.
            st.record()?;
        }
        Ok(size.and_then(|size| st.free.take(size)))
    }

    /// Gives this list (vacant: its stream was retired) to a new stream.
    fn reuse_for(&self, stream: &Stream, per_thread: bool) {
        let mut st = self.state.lock();
        debug_assert!(st.stream.is_none() && st.free.block_count() == 0);
        st.stream = Some(stream.clone());
        st.per_thread = per_thread;
    }

    /// When no handle to this list's stream is left but the list's own, hands the list's blocks
    /// to `heir` (ordered after the stream's work, on the device), drops the stream and answers
    /// true: the list is vacant then. `heir` is asked for only when there are blocks to hand on.
    fn retire_if_gone<'h>(
        &self,
        heir: impl FnOnce(&Stream) -> Result<&'h Retired<F>>,
    ) -> Result<bool>
    where
        F: 'h,
    {
        let gone = |st: &ListState<F>| {
            !st.per_thread && st.stream.as_ref().is_some_and(Stream::is_sole_handle)
        };
        let mut st = self.state.lock();
        if !gone(&st) {
            return Ok(false);
        }
        let mut moved = Vec::new();
        let mut to = None;
        if st.free.block_count() > 0 {
            // Made (once per resource) without this list's lock held.
            let stream = st.stream.clone().expect("a gone list has its stream");
            drop(st);
            let retired = heir(&stream)?;
            drop(stream);
            st = self.state.lock();
            if !gone(&st) {
                return Ok(false);
            }
            st.order_before(&retired.stream)?;
            st.free.drain_into(&mut moved);
            to = Some(retired);
        }
        let stream = st.stream.take();
        drop(st);
        // The stream is destroyed here; the record and the wait queued above outlive it.
        drop(stream);
        if let Some(retired) = to {
            retired.list.give_ordered_and_take(&moved, None)?;
        }
        Ok(true)
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

/// Where retired streams' blocks go: a list of a stream of the resource's own, which waits for
/// each retired stream's work before its blocks enter the list.
struct Retired<F> {
    stream: Stream,
    list: Arc<StreamList<F>>,
}

/// Makes the free store of a new list.
type MakeStore<F> = Box<dyn Fn() -> F + Send + Sync>;

/// The free lists of every stream a resource has seen (and not retired).
pub(crate) struct StreamLists<F> {
    slots: Slots<StreamList<F>>,
    /// Held shared by every move that takes free blocks out of one place (a list, the owner's
    /// reservoir) before it puts them into another, so that they are in no list meanwhile;
    /// exclusively by [`StreamLists::gather_and_take`], which must find every free block.
    /// Allocations and frees on a stream's own list never touch it.
    moving: RwLock<()>,
    retired: OnceCell<Retired<F>>,
    make: MakeStore<F>,
}

impl<F: FreeStore> StreamLists<F> {
    /// No lists yet; `make` makes the free store of each new one.
    pub(crate) fn new(make: impl Fn() -> F + Send + Sync + 'static) -> Self {
        StreamLists {
            slots: Slots::default(),
            moving: RwLock::new(()),
            retired: OnceCell::new(),
            make: Box::new(make),
        }
    }

    /// The list of `stream`, made on first use.
    #[inline]
    pub(crate) fn get(&self, stream: &Stream) -> Result<Entry<'_, StreamList<F>>> {
        let key = stream_key(stream);
        match self.slots.get(key) {
            Some(found) => Ok(found),
            None => self.insert(key, stream),
        }
    }

    /// A block of `size` bytes from `stream`'s own list, the quick way: a lookup of the array
    /// part only, the lock only when free now, so that a resource's allocate inlines it whole.
    /// `None` says only "not that way" (a per-thread default stream, a list not in the array
    /// part, its lock held, no block in the list): the caller then goes the general way
    /// ([`StreamLists::get`], [`StreamList::take`], then stealing or growing).
    #[inline(always)]
    pub(crate) fn take_quick(&self, stream: &Stream, size: usize) -> Option<u64> {
        self.list_in_array(stream)?.try_take(size)
    }

    /// A block freed on `stream` kept the quick way ([`StreamLists::take_quick`],
    /// [`FreeStore::give_quick`]); false: nothing was done, [`StreamList::give`] must take it.
    #[inline(always)]
    pub(crate) fn give_quick(&self, stream: &Stream, addr: u64, size: usize) -> bool {
        self.list_in_array(stream)
            .is_some_and(|list| list.try_give_quick(addr, size))
    }

    /// `stream`'s list where the quick paths find it: in the slot map's array part, and never a
    /// per-thread default stream's (whose key needs the thread's index: [`stream_key`]).
    #[inline(always)]
    fn list_in_array(&self, stream: &Stream) -> Option<&StreamList<F>> {
        let id = stream.id();
        if id == StreamId::PER_THREAD_DEFAULT {
            return None;
        }
        self.slots.get_in_array(id.0)
    }

    /// A stream's first use: retires the lists of streams that are gone (so a program using a
    /// stream per task keeps a bounded number of lists), then makes this stream's list, in a
    /// retired list's entry when there is one.
    #[cold]
    fn insert(&self, key: u64, stream: &Stream) -> Result<Entry<'_, StreamList<F>>> {
        let mut writer = self.slots.writer();
        if let Some(found) = self.slots.get(key) {
            return Ok(found);
        }
        self.retire_gone(&mut writer);
        let per_thread = is_per_thread(key);
        writer.get_or_try_insert(
            key,
            |list| list.reuse_for(stream, per_thread),
            || Ok(StreamList::new((self.make)(), stream, per_thread)),
        )
    }

    /// Retires every list whose stream is gone (see the module's documentation). Best effort:
    /// should ordering fail (a device error), the list stays as it is and the rest wait for the
    /// next time.
    fn retire_gone(&self, writer: &mut Writer<'_, StreamList<F>>) {
        let _moving = self.moving();
        let mut failed = false;
        writer.retire_where(|list| {
            if failed {
                return false;
            }
            match list.retire_if_gone(|stream| self.retired(stream)) {
                Ok(retired) => retired,
                Err(_) => {
                    failed = true;
                    false
                }
            }
        });
    }

    /// The retired list, made on first need with a new stream of `like`'s device.
    fn retired(&self, like: &Stream) -> Result<&Retired<F>> {
        self.retired.get_or_try_init(|| {
            let stream = like.device().new_stream()?;
            Ok(Retired {
                list: Arc::new(StreamList::new((self.make)(), &stream, false)),
                stream,
            })
        })
    }

    /// Streams whose lists are kept (the retired list aside).
    pub(crate) fn stream_count(&self) -> usize {
        self.slots.count()
    }

    /// Held while free blocks are out of every list on their way to another one (the owner's
    /// carves from its reservoir take it; steals take it themselves). Never held twice by one
    /// thread, and never while waiting for the owner's growth lock.
    pub(crate) fn moving(&self) -> RwLockReadGuard<'_, ()> {
        self.moving.read()
    }

    /// Every list, the retired one last.
    fn lists(&self) -> Vec<Arc<StreamList<F>>> {
        let mut all = self.slots.all();
        if let Some(retired) = self.retired.get() {
            all.push(retired.list.clone());
        }
        all
    }

    /// The other streams' lists, starting after `me`'s (so that thieves spread over the lists
    /// rather than all trying the first one, and in a ring of streams handing blocks on, each
    /// first takes back what it handed to the next).
    fn others(&self, me: &StreamList<F>) -> Vec<Arc<StreamList<F>>> {
        let mut all = self.lists();
        if let Some(at) = all.iter().position(|l| std::ptr::eq(&**l, me)) {
            all.rotate_left(at + 1);
            all.pop();
        }
        all
    }

    /// Takes a block of `size` bytes from other streams' free blocks, after ordering `me`'s
    /// stream (`stream`) behind the work that freed them (one event record and wait per list
    /// taken, no host synchronisation). First the list of one stream that holds a block of `size`
    /// bytes: the block is taken under that list's lock and the rest of the list moves to `me`.
    /// When no single list has one and `merge_all` is set, every list moves to `me`, where
    /// fragments of several streams may coalesce, and the block is taken in the same critical
    /// section. `None` when nothing fitted: other threads may have been moving blocks at that
    /// moment, which only [`StreamLists::gather_and_take`] rules out.
    pub(crate) fn steal(
        &self,
        me: &StreamList<F>,
        stream: &Stream,
        size: usize,
        merge_all: bool,
    ) -> Result<Option<u64>> {
        let _moving = self.moving();
        let others = self.others(me);
        let mut moved = Vec::new();
        for victim in &others {
            let mut st = victim.state.lock();
            if st.free.largest() >= size {
                st.order_before(stream)?;
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
        Self::drain_others(&others, me, stream, &mut moved)?;
        if moved.is_empty() {
            return Ok(None);
        }
        me.give_ordered_and_take(&moved, Some(size))
    }

    /// The last resort before the owner grows or reports that it is out of memory: while no other
    /// move is under way, gathers every free block into `me`'s list (that of `stream`), the other
    /// streams' (ordered as for a steal) and what `extra` adds (the owner's reservoir, memory no
    /// work has used), so that they coalesce there, then takes `size` bytes from it. `None` means
    /// that no block of `size` bytes was free anywhere (the frees made while this runs aside).
    /// Each list is taken in turn, so owners keep allocating and freeing meanwhile.
    pub(crate) fn gather_and_take(
        &self,
        me: &StreamList<F>,
        stream: &Stream,
        size: usize,
        extra: impl FnOnce(&mut Vec<(u64, usize)>),
    ) -> Result<Option<u64>> {
        let _all = self.moving.write();
        let mut moved = Vec::new();
        Self::drain_others(&self.others(me), me, stream, &mut moved)?;
        extra(&mut moved);
        me.give_ordered_and_take(&moved, Some(size))
    }

    /// Moves every block of `others` into `moved`, ordering `me`'s stream (`stream`) after each
    /// list taken. Should ordering fail, what was taken so far goes to `me` before the error
    /// returns.
    fn drain_others(
        others: &[Arc<StreamList<F>>],
        me: &StreamList<F>,
        stream: &Stream,
        moved: &mut Vec<(u64, usize)>,
    ) -> Result<()> {
        for victim in others {
            let mut st = victim.state.lock();
            if st.free.block_count() > 0 {
                if let Err(e) = st.order_before(stream) {
                    drop(st);
                    me.give_ordered_and_take(moved, None)?;
                    return Err(e);
                }
                st.free.drain_into(moved);
            }
        }
        Ok(())
    }

    /// Empties every list into `out`, waiting on the host for the streams that freed the
    /// blocks, so they may go to any stream (or back upstream) without further ordering. Each
    /// list's blocks are taken out under its lock and waited for without it, so its stream's
    /// owner keeps allocating and freeing meanwhile (on blocks freed later). Then retires the
    /// lists of streams that are gone. On error, `out` holds the blocks of the lists waited for
    /// so far; the failed list keeps its own.
    pub(crate) fn drain_synchronized(&self, out: &mut Vec<(u64, usize)>) -> Result<()> {
        {
            let _moving = self.moving();
            for list in self.lists() {
                let start = out.len();
                let wait = {
                    let mut st = list.state.lock();
                    if st.free.block_count() == 0 {
                        continue;
                    }
                    st.free.drain_into(out);
                    st.host_wait()
                };
                if let Err(e) = wait.wait() {
                    // Still this stream's: `wait` holds a handle to it, so it was not retired.
                    list.give_fresh_many(&out[start..]);
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
        self.retire_gone(&mut self.slots.writer());
        Ok(())
    }

    /// Free bytes over all lists.
    pub(crate) fn free_bytes(&self) -> usize {
        self.lists()
            .iter()
            .map(|l| l.state.lock().free.free_bytes())
            .sum()
    }

    /// The largest single free block over all lists.
    pub(crate) fn largest(&self) -> usize {
        self.lists()
            .iter()
            .map(|l| l.state.lock().free.largest())
            .max()
            .unwrap_or(0)
    }

    /// One summary per list (the retired list last, under the resource's own stream).
    pub(crate) fn summaries(&self) -> Vec<ListSummary> {
        self.lists()
            .iter()
            .filter_map(|l| {
                let mut st = l.state.lock();
                Some(ListSummary {
                    stream: st.stream.clone()?,
                    free_bytes: st.free.free_bytes(),
                    largest: st.free.largest(),
                    blocks: st.free.block_count(),
                })
            })
            .collect()
    }
}
