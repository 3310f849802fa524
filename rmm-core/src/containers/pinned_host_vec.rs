//! `PinnedHostVec<T>`: values in page-locked host memory, the source of asynchronous copies to
//! the device.

use crate::error::Result;
use crate::resource::MemoryResource;
use crate::resources::PinnedHostResource;
use bytemuck::Pod;
use parking_lot::Mutex;
use rmm_cuda::{Event, Stream, StreamId};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Events kept at most before completed ones are dropped (copies on per-thread default streams
/// each get their own event: that handle names a different stream on every thread).
const PRUNE_AT: usize = 8;

/// `len` values of `T` in pinned (page-locked) host memory from a [`PinnedHostResource`].
///
/// The driver reads pinned memory by DMA while the host goes on, so a copy from it to the
/// device need not wait: [`crate::DeviceVec::from_pinned_async`] and
/// [`crate::DeviceBuffer::copy_from_pinned_async`] queue the copy on a stream and return at once.
/// The copy cannot outlive its source: every such copy records an event on its stream in this
/// vector, and whatever could change or free the memory waits for those events first, on the
/// host: [`PinnedHostVec::as_mut_slice`] and `drop` (and [`PinnedHostVec::wait_for_copies`],
/// which does only that). Reading it ([`PinnedHostVec::as_slice`]) never waits: the copies only
/// read it too.
///
/// ```
/// use rmm_core::{Device, DeviceVec, PinnedHostResource, PinnedHostVec};
/// use rmm_cuda::SimOp;
/// let device = Device::simulated(1 << 30);
/// let stream = device.new_stream()?;
/// let pinned = PinnedHostResource::new(&device);
/// let mut staging = PinnedHostVec::from_slice(&[1.0f32, 2.0, 3.0], &pinned, &stream)?;
///
/// let on_device = DeviceVec::from_pinned_async(&staging, &stream)?;
/// let host_waits = |ops: Vec<SimOp>| {
///     ops.into_iter()
///         .filter(|op| matches!(op, SimOp::StreamSync { .. } | SimOp::EventSync { .. }))
///         .count()
/// };
/// assert_eq!(host_waits(device.sim_ops()), 0, "queued, not waited for");
///
/// // Refilling the staging buffer first waits for the copy that reads it.
/// staging.as_mut_slice()?.copy_from_slice(&[4.0, 5.0, 6.0]);
/// assert_eq!(host_waits(device.sim_ops()), 1);
/// assert_eq!(on_device.to_host()?, vec![1.0, 2.0, 3.0]);
/// # Ok::<(), rmm_core::MemoryError>(())
/// ```
pub struct PinnedHostVec<T: Pod> {
    /// Address of the first value (0 when there are no bytes).
    ptr: u64,
    len: usize,
    stream: Stream,
    resource: PinnedHostResource,
    /// Copies that may still read the memory: per stream, an event recorded after the last one
    /// queued there.
    reads: Mutex<Vec<(StreamId, Event)>>,
    _t: PhantomData<T>,
}

impl<T: Pod> fmt::Debug for PinnedHostVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PinnedHostVec<{}>(len {}, at {:#x}, {:?})",
            std::any::type_name::<T>(),
            self.len,
            self.ptr,
            self.stream
        )
    }
}

impl<T: Pod> PinnedHostVec<T> {
    /// `len` zero values from `resource`, allocated (and freed, when the vector drops) on
    /// `stream`.
    pub fn zeroed(len: usize, resource: &PinnedHostResource, stream: &Stream) -> Result<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            crate::MemoryError::InvalidArgument(format!(
                "{len} elements of {} overflow usize",
                std::any::type_name::<T>()
            ))
        })?;
        let ptr = resource.allocate(bytes, stream)?;
        if bytes > 0 {
            // SAFETY: fresh pinned host memory of `bytes` bytes (from the driver, used by no
            // work), ours alone.
            unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, bytes) };
        }
        Ok(PinnedHostVec {
            ptr,
            len,
            stream: stream.clone(),
            resource: resource.clone(),
            reads: Mutex::new(Vec::new()),
            _t: PhantomData,
        })
    }

    /// A copy of `values` in pinned memory from `resource` (see [`PinnedHostVec::zeroed`]).
    pub fn from_slice(
        values: &[T],
        resource: &PinnedHostResource,
        stream: &Stream,
    ) -> Result<Self> {
        let mut v = Self::zeroed(values.len(), resource, stream)?;
        v.as_mut_slice()?.copy_from_slice(values);
        Ok(v)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Host address of the first value (0 when there are no bytes).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The stream the memory was allocated on and is freed on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    fn data(&self) -> NonNull<T> {
        NonNull::new(self.ptr as *mut T).unwrap_or(NonNull::dangling())
    }

    /// The values. Never waits: copies queued from them only read them.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised values (zeroed at creation), aligned (pinned memory is
        // page-aligned, and the null address is replaced by a dangling aligned pointer for empty
        // memory); nothing writes them while `&self` lives (writes need `&mut self`, and the
        // queued copies only read).
        unsafe { std::slice::from_raw_parts(self.data().as_ptr(), self.len) }
    }

    /// The values, to change: first waits on the host for every copy still reading them.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.wait_for_copies()?;
        // SAFETY: as in `as_slice`; no copy reads the memory any more and `&mut self` excludes
        // every other access.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data().as_ptr(), self.len) })
    }

    /// Waits on the host for every copy from this vector queued so far.
    pub fn wait_for_copies(&self) -> Result<()> {
        let reads = std::mem::take(&mut *self.reads.lock());
        for (i, (_, event)) in reads.iter().enumerate() {
            if let Err(e) = event.synchronize() {
                // Keep what was not waited for: a later call (or drop) waits again.
                self.reads.lock().extend(reads.into_iter().skip(i));
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// The bytes of the values, for a copy whose end `queue_read` marks.
    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self.as_slice())
    }

    /// Queues a copy that reads this vector on `stream` (`copy` queues it), then records that
    /// read, so that nothing changes or frees the memory before the copy has run. Should the
    /// record fail, waits on the host for the stream instead.
    pub(crate) fn queue_read(
        &self,
        stream: &Stream,
        copy: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let mut reads = self.reads.lock();
        if reads.len() >= PRUNE_AT {
            reads.retain(|(_, e)| !e.is_complete().unwrap_or(false));
        }
        let id = stream.id();
        // The per-thread default stream is another stream on every thread: one event each.
        let shared = id != StreamId::PER_THREAD_DEFAULT;
        let at = match reads.iter().position(|(s, _)| shared && *s == id) {
            Some(at) => at,
            None => {
                // Made before the copy is queued, so that failing to make it costs nothing.
                reads.push((id, stream.device().new_event()?));
                reads.len() - 1
            }
        };
        copy()?;
        // Re-recording covers the earlier copies on this stream too (they come first).
        if stream.record(&reads[at].1).is_err() {
            drop(reads);
            stream.synchronize()?;
        }
        Ok(())
    }
}

impl<T: Pod> Drop for PinnedHostVec<T> {
    fn drop(&mut self) {
        if let Err(e) = self.wait_for_copies() {
            // Freeing memory that a copy may still read is not an option: leak it.
            eprintln!(
                "rmm-core: PinnedHostVec: waiting for the copies from it failed ({e}); \
                 its {} bytes are leaked",
                self.len * std::mem::size_of::<T>()
            );
            return;
        }
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: allocated by this resource with this size on this stream; no copy reads it.
        if let Err(e) = unsafe { self.resource.deallocate(self.ptr, bytes, &self.stream) } {
            eprintln!("rmm-core: PinnedHostVec of {bytes} bytes could not be freed: {e}");
        }
    }
}
