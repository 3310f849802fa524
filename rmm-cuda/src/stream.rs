//! Streams: ordered queues of device work, real or simulated.

use crate::device::{Backend, Device};
use crate::error::{Checked, CudaError, Result};
use crate::event::Event;
use crate::sim::SimOp;
use cudarc::driver::{result, sys, CudaStream};
use std::fmt;
use std::sync::Arc;

/// A stream's identity: the raw `CUstream` value for real streams (0 is the legacy default
/// stream, 2 the per-thread default stream), a device-unique number for simulated ones. Cheap to
/// copy and hash: the memory resources key their per-stream state by it.
///
/// ```
/// use rmm_cuda::{Device, StreamId};
/// let device = Device::simulated(1 << 20);
/// assert_eq!(device.default_stream().id(), StreamId::LEGACY_DEFAULT);
/// assert_ne!(device.new_stream()?.id(), StreamId::LEGACY_DEFAULT);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The legacy default stream (handle 0), which synchronises with blocking streams.
    pub const LEGACY_DEFAULT: StreamId = StreamId(0);
    /// The per-thread default stream (handle 2): a different stream on every thread.
    pub const PER_THREAD_DEFAULT: StreamId = StreamId(2);
}

#[derive(Clone)]
enum Inner {
    Cuda(Arc<CudaStream>),
    /// A simulated stream's number, shared by its clones (so that, as for a real stream, one can
    /// tell whether other clones exist).
    Sim(Arc<u64>),
}

/// A stream of a device. Cheap to clone (clones share the stream); a created stream is destroyed
/// when its last clone drops.
///
/// ```
/// use rmm_cuda::Device;
/// let device = Device::simulated(1 << 20);
/// let stream = device.new_stream()?;
/// let clone = stream.clone(); // the same stream
/// assert_eq!(stream, clone);
/// stream.synchronize()?;
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Clone)]
pub struct Stream {
    device: Device,
    inner: Inner,
    /// `inner`'s identity (a CUDA stream's handle), read once: [`Stream::id`] is on every
    /// allocation's path (the resources key their per-stream state by it), and the handle
    /// would otherwise be asked of cudarc each time.
    id: StreamId,
    /// Another library's stream (see [`Stream::borrowed`]): never destroyed by us, never taken
    /// for gone.
    borrowed: bool,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:#x} on {})", self.id().0, self.device.id())
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device && self.id() == other.id()
    }
}
impl Eq for Stream {}

impl Stream {
    fn of(device: &Device, inner: Inner, borrowed: bool) -> Stream {
        let id = match &inner {
            Inner::Cuda(s) => StreamId(s.cu_stream() as u64),
            Inner::Sim(id) => StreamId(**id),
        };
        Stream {
            device: device.clone(),
            inner,
            id,
            borrowed,
        }
    }

    pub(crate) fn default_of(device: &Device) -> Stream {
        let inner = match &*device.inner {
            Backend::Cuda(ctx) => Inner::Cuda(ctx.default_stream()),
            Backend::Sim(_) => Inner::Sim(Arc::new(StreamId::LEGACY_DEFAULT.0)),
        };
        Stream::of(device, inner, false)
    }

    pub(crate) fn per_thread_of(device: &Device) -> Stream {
        let inner = match &*device.inner {
            Backend::Cuda(ctx) => Inner::Cuda(ctx.per_thread_stream()),
            Backend::Sim(_) => Inner::Sim(Arc::new(StreamId::PER_THREAD_DEFAULT.0)),
        };
        Stream::of(device, inner, false)
    }

    pub(crate) fn new_on(device: &Device) -> Result<Stream> {
        let inner = match &*device.inner {
            Backend::Cuda(ctx) => Inner::Cuda(ctx.new_stream().checked("cuStreamCreate")?),
            Backend::Sim(sim) => Inner::Sim(Arc::new(sim.next_id())),
        };
        Ok(Stream::of(device, inner, false))
    }

    /// Wraps a cudarc stream (e.g. one a library created) so our resources can order on it.
    pub fn from_cuda(device: &Device, stream: Arc<CudaStream>) -> Result<Stream> {
        match &*device.inner {
            Backend::Cuda(ctx) if Arc::ptr_eq(ctx, stream.context()) => {
                Ok(Stream::of(device, Inner::Cuda(stream), false))
            }
            _ => Err(CudaError::invalid(
                "Stream::from_cuda",
                "the stream belongs to another device",
            )),
        }
    }

    /// Wraps a stream that other code created and owns, given as its raw `cudaStream_t` (the
    /// current stream of PyTorch, CuPy or Numba), so our resources can order on it. 0 and 1
    /// (`cudaStreamLegacy`) are the legacy default stream, 2 the per-thread default stream. The
    /// wrapper never destroys the stream, and [`Stream::is_sole_handle`] is always false for it:
    /// only its owner knows when it goes. A simulated device lends only its default stream (0).
    ///
    /// # Safety
    /// `raw` must be a stream of this device's primary context, alive as long as the wrapper or
    /// any clone of it (kept by a resource, say) is used.
    ///
    /// ```
    /// use rmm_cuda::{Device, StreamId};
    /// let device = Device::simulated(1 << 20);
    /// // SAFETY: 0 is the default stream, alive as long as the device.
    /// let stream = unsafe { rmm_cuda::Stream::borrowed(&device, std::ptr::null_mut())? };
    /// assert_eq!(stream.id(), StreamId::LEGACY_DEFAULT);
    /// // SAFETY: 1 is cudaStreamLegacy, the same stream.
    /// let legacy = unsafe { rmm_cuda::Stream::borrowed(&device, 1 as *mut _)? };
    /// assert_eq!(legacy.id(), StreamId::LEGACY_DEFAULT);
    /// assert!(unsafe { rmm_cuda::Stream::borrowed(&device, 0x1234 as *mut _) }.is_err());
    /// # Ok::<(), rmm_cuda::CudaError>(())
    /// ```
    pub unsafe fn borrowed(device: &Device, raw: *mut std::ffi::c_void) -> Result<Stream> {
        let id = StreamId(raw as u64);
        // cudaStreamLegacy names the same stream as 0: one free list serves both.
        const CUDA_STREAM_LEGACY: StreamId = StreamId(1);
        if id == StreamId::LEGACY_DEFAULT || id == CUDA_STREAM_LEGACY {
            return Ok(Stream::default_of(device));
        }
        if id == StreamId::PER_THREAD_DEFAULT {
            return Ok(Stream::per_thread_of(device));
        }
        match &*device.inner {
            Backend::Cuda(ctx) => Ok(Stream::of(
                device,
                // SAFETY: the caller promises a live stream of this context.
                Inner::Cuda(unsafe { ctx.wrap_borrowed_stream(raw as sys::CUstream) }),
                true,
            )),
            Backend::Sim(_) => Err(CudaError::invalid(
                "Stream::borrowed",
                format!(
                    "a simulated device has no stream {:#x} to borrow (only the default stream, 0)",
                    id.0
                ),
            )),
        }
    }

    /// This stream's identity (the same for every clone).
    #[inline]
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Whether this is the legacy or the per-thread default stream: a handle that names the
    /// default stream of whichever context is current, not a stream of its own.
    pub(crate) fn is_default(&self) -> bool {
        let id = self.id();
        id == StreamId::LEGACY_DEFAULT || id == StreamId::PER_THREAD_DEFAULT
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// True when this handle is the only one left to a stream created by [`Device::new_stream`]
    /// (or wrapped by [`Stream::from_cuda`]): no clone of it exists anywhere else, so no other
    /// code can queue work on it, and the stream is destroyed when this handle drops. Always false
    /// for the legacy and per-thread default streams, which live as long as their device, and
    /// for [`Stream::borrowed`] ones, whose owner alone knows when they go.
    ///
    /// The memory resources use it to retire the state they keep for streams that are gone.
    ///
    /// ```
    /// let device = rmm_cuda::Device::simulated(1 << 20);
    /// let stream = device.new_stream()?;
    /// assert!(stream.is_sole_handle());
    /// let clone = stream.clone();
    /// assert!(!stream.is_sole_handle());
    /// drop(clone);
    /// assert!(stream.is_sole_handle());
    /// assert!(!device.default_stream().is_sole_handle());
    /// # Ok::<(), rmm_cuda::CudaError>(())
    /// ```
    pub fn is_sole_handle(&self) -> bool {
        if self.borrowed || self.is_default() {
            return false;
        }
        let count = match &self.inner {
            Inner::Cuda(s) => Arc::strong_count(s),
            Inner::Sim(n) => Arc::strong_count(n),
        };
        if count == 1 {
            // Pairs with the release decrement of the clone dropped last, so everything its
            // holder did with the stream happens before what the caller does next.
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            true
        } else {
            false
        }
    }

    /// The cudarc stream, to launch kernels or call libraries on (None when simulated).
    pub fn cuda(&self) -> Option<&Arc<CudaStream>> {
        match &self.inner {
            Inner::Cuda(s) => Some(s),
            Inner::Sim(_) => None,
        }
    }

    /// The raw `CUstream` (= `cudaStream_t`) handle, for C code (callbacks, other libraries);
    /// a simulated stream gives its id as a pointer-sized token.
    pub fn as_raw(&self) -> *mut std::ffi::c_void {
        self.raw() as *mut std::ffi::c_void
    }

    pub(crate) fn raw(&self) -> sys::CUstream {
        self.id.0 as sys::CUstream
    }

    /// Blocks the host until all work queued on this stream is done (and clears the upper
    /// vector state the driver leaves: see [`crate::clear_upper_vector_state`]).
    pub fn synchronize(&self) -> Result<()> {
        match &self.inner {
            Inner::Cuda(s) => {
                let done = s.synchronize().checked("cuStreamSynchronize");
                crate::clear_upper_vector_state();
                done
            }
            Inner::Sim(id) => {
                if let Some(sim) = self.device.sim() {
                    sim.host_wait(SimOp::StreamSync { stream: **id });
                }
                Ok(())
            }
        }
    }

    /// Records `event` at the current end of this stream.
    pub fn record(&self, event: &Event) -> Result<()> {
        event.record_on(self)
    }

    /// Makes later work on this stream wait (on the device) for `event`.
    pub fn wait(&self, event: &Event) -> Result<()> {
        event.wait_on(self)
    }

    /// Makes later work on this stream wait for all work queued on `other` so far, using `event`
    /// as the marker. No host synchronisation.
    pub fn wait_for(&self, other: &Stream, event: &Event) -> Result<()> {
        if self.id() == other.id() {
            return Ok(());
        }
        other.record(event)?;
        self.wait(event)
    }

    pub(crate) fn sim_log(&self, op: SimOp) {
        if let Some(sim) = self.device.sim() {
            sim.log(op);
        }
    }

    fn bind(&self) -> Result<()> {
        self.device.bind()
    }

    /// Copies host bytes to device memory at `dst`, then waits for the copy to finish, so `src`
    /// may be reused at once.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` must be device (or managed/pinned) memory that nothing else uses.
    pub unsafe fn copy_from_host(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.copy_from_host_async(dst, src)?;
        self.synchronize()
    }

    /// As [`Stream::copy_from_host`] without the wait.
    ///
    /// # Safety
    /// Also: `src` must stay valid and unchanged until the stream has executed the copy (it may be
    /// pinned memory, which the driver reads asynchronously).
    pub unsafe fn copy_from_host_async(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        match &self.inner {
            Inner::Cuda(s) => {
                self.bind()?;
                result::memcpy_htod_async(dst, src, s.cu_stream()).checked("cuMemcpyHtoDAsync")
            }
            Inner::Sim(_) => {
                self.device
                    .sim()
                    .unwrap()
                    .check_range("cuMemcpyHtoDAsync", dst, src.len())?;
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len());
                Ok(())
            }
        }
    }

    /// Copies device memory at `src` into `dst` and waits for the copy.
    ///
    /// # Safety
    /// `src .. src + dst.len()` must be readable device memory.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        match &self.inner {
            Inner::Cuda(s) => {
                self.bind()?;
                result::memcpy_dtoh_async(dst, src, s.cu_stream()).checked("cuMemcpyDtoHAsync")?;
                self.synchronize()
            }
            Inner::Sim(_) => {
                self.device
                    .sim()
                    .unwrap()
                    .check_range("cuMemcpyDtoHAsync", src, dst.len())?;
                std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len());
                Ok(())
            }
        }
    }

    /// As [`Stream::copy_to_host`] without the wait.
    ///
    /// # Safety
    /// Also: `dst` must stay valid and untouched until the stream has executed the copy (pinned
    /// memory, which the driver writes asynchronously).
    pub unsafe fn copy_to_host_async(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        match &self.inner {
            Inner::Cuda(s) => {
                self.bind()?;
                result::memcpy_dtoh_async(dst, src, s.cu_stream()).checked("cuMemcpyDtoHAsync")
            }
            Inner::Sim(_) => {
                self.device
                    .sim()
                    .unwrap()
                    .check_range("cuMemcpyDtoHAsync", src, dst.len())?;
                std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len());
                Ok(())
            }
        }
    }

    /// Queues a device-to-device copy of `bytes`.
    ///
    /// # Safety
    /// Both ranges must be valid device memory and must not overlap.
    pub unsafe fn copy_device(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match &self.inner {
            Inner::Cuda(s) => {
                self.bind()?;
                result::memcpy_dtod_async(dst, src, bytes, s.cu_stream())
                    .checked("cuMemcpyDtoDAsync")
            }
            Inner::Sim(_) => {
                let sim = self.device.sim().unwrap();
                sim.check_range("cuMemcpyDtoDAsync", src, bytes)?;
                sim.check_range("cuMemcpyDtoDAsync", dst, bytes)?;
                std::ptr::copy(src as *const u8, dst as *mut u8, bytes);
                Ok(())
            }
        }
    }

    /// Queues a copy of `bytes` from `src` in the memory of the device `from` to `dst` on this
    /// stream's device (`cuMemcpyPeerAsync`: straight between the GPUs where they reach each
    /// other, else through the host). The copy starts after the work queued on this stream; the
    /// source must be final (nothing queued on `from` still writing it).
    ///
    /// # Safety
    /// `src .. src + bytes` must be device memory of `from` and `dst .. dst + bytes` device
    /// memory of this stream's device that nothing else uses until the copy is done.
    pub unsafe fn copy_from_peer(
        &self,
        dst: u64,
        src: u64,
        from: &Device,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match (&self.inner, self.device.cuda_context(), from.cuda_context()) {
            (Inner::Cuda(s), Some(to_ctx), Some(from_ctx)) => {
                self.bind()?;
                result::memcpy_peer_async(
                    to_ctx.cu_ctx(),
                    dst,
                    from_ctx.cu_ctx(),
                    src,
                    bytes,
                    s.cu_stream(),
                )
                .checked("cuMemcpyPeerAsync")
            }
            (Inner::Sim(_), None, None) => {
                let (to, source) = (self.device.sim().unwrap(), from.sim().unwrap());
                source.check_range("cuMemcpyPeerAsync", src, bytes)?;
                to.check_range("cuMemcpyPeerAsync", dst, bytes)?;
                std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes);
                Ok(())
            }
            _ => Err(CudaError::invalid(
                "cuMemcpyPeerAsync",
                "a copy between a simulated device and a real one",
            )),
        }
    }

    /// Queues a byte memset.
    ///
    /// # Safety
    /// `dst .. dst + bytes` must be valid device memory.
    pub unsafe fn memset(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match &self.inner {
            Inner::Cuda(s) => {
                self.bind()?;
                result::memset_d8_async(dst, value, bytes, s.cu_stream()).checked("cuMemsetD8Async")
            }
            Inner::Sim(_) => {
                self.device
                    .sim()
                    .unwrap()
                    .check_range("cuMemsetD8Async", dst, bytes)?;
                std::ptr::write_bytes(dst as *mut u8, value, bytes);
                Ok(())
            }
        }
    }
}
