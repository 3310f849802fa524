//! `DeviceBuffer`: untyped, stream-ordered device memory from a memory resource.

use super::PinnedHostVec;
use crate::error::{MemoryError, Result};
use crate::registry::get_per_device_resource;
use crate::resource::SharedResource;
use bytemuck::Pod;
use rmm_cuda::Stream;
use std::fmt;

/// Untyped device memory with a size and a capacity, tied to a stream (RMM's `device_buffer`).
///
/// All its work (copies, reallocation, the final free) is queued on its stream; the memory goes
/// back to the resource it came from, on its last stream, when it drops (on any thread).
///
/// ```
/// use rmm_core::{Device, DeviceBuffer};
/// let device = Device::simulated(1 << 30);
/// let stream = device.new_stream()?;
/// // RMM's rmm::device_buffer: untyped bytes from the device's current resource.
/// let mut buf = DeviceBuffer::from_host(b"hello", &stream)?;
/// assert_eq!(buf.size(), 5);
/// buf.resize(8)?;
/// buf.copy_from_host(b"GPU mem!")?;
/// assert_eq!(buf.to_host()?, b"GPU mem!".to_vec());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceBuffer {
    ptr: u64,
    size: usize,
    capacity: usize,
    stream: Stream,
    resource: SharedResource,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .field("capacity", &self.capacity)
            .field("stream", &self.stream)
            .field("resource", &self.resource.name())
            .finish()
    }
}

/// The name of the resource behind a borrowed buffer.
const LENT_NAME: &str = "borrowed";

/// Memory another owner keeps (another library's array), lent to a [`DeviceBuffer`] for a
/// while: there is nothing to allocate and nothing to free.
#[derive(Debug)]
struct Lent {
    device: rmm_cuda::Device,
}

impl crate::resource::MemoryResource for Lent {
    fn allocate(&self, bytes: usize, _: &Stream) -> Result<u64> {
        Err(MemoryError::InvalidArgument(format!(
            "a borrowed buffer cannot grow ({bytes} bytes asked)"
        )))
    }
    unsafe fn deallocate(&self, _: u64, _: usize, _: &Stream) -> Result<()> {
        Ok(())
    }
    fn device(&self) -> &rmm_cuda::Device {
        &self.device
    }
    fn name(&self) -> String {
        LENT_NAME.into()
    }
}

impl DeviceBuffer {
    /// A buffer over `size` bytes at `ptr` that another owner keeps (a CuPy array handed over
    /// through its CUDA array interface, say): dropping it frees nothing, and it cannot grow.
    ///
    /// # Safety
    /// `ptr .. ptr + size` must be memory of the stream's device that stays allocated while the
    /// buffer lives, written by no one else meanwhile (read only, unless its owner agrees).
    ///
    /// ```
    /// use rmm_core::{Device, DeviceBuffer};
    /// let device = Device::simulated(1 << 20);
    /// let stream = device.new_stream()?;
    /// let owner = DeviceBuffer::from_host(b"lent", &stream)?;
    /// // SAFETY: `owner` outlives the view and nobody writes it meanwhile.
    /// let view = unsafe { DeviceBuffer::borrowed(owner.ptr(), owner.size(), &stream) };
    /// assert_eq!(view.to_host()?, b"lent".to_vec());
    /// assert!(view.is_borrowed() && !owner.is_borrowed());
    /// drop(view); // frees nothing
    /// assert_eq!(owner.to_host()?, b"lent".to_vec());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn borrowed(ptr: u64, size: usize, stream: &Stream) -> Self {
        DeviceBuffer {
            ptr,
            size,
            capacity: size,
            stream: stream.clone(),
            resource: std::sync::Arc::new(Lent {
                device: stream.device().clone(),
            }),
        }
    }

    /// Whether the memory is another owner's ([`DeviceBuffer::borrowed`]).
    pub fn is_borrowed(&self) -> bool {
        self.resource.name() == LENT_NAME
    }

    /// `size` uninitialised bytes from the current resource of the stream's device.
    pub fn new(size: usize, stream: &Stream) -> Result<Self> {
        Self::with_resource(size, stream, get_per_device_resource(stream.device()))
    }

    /// `size` uninitialised bytes from `resource`.
    pub fn with_resource(size: usize, stream: &Stream, resource: SharedResource) -> Result<Self> {
        if resource.device() != stream.device() {
            return Err(MemoryError::InvalidArgument(format!(
                "buffer on a stream of {} with a resource of {}",
                stream.device().id(),
                resource.device().id()
            )));
        }
        let ptr = resource.allocate(size, stream)?;
        Ok(DeviceBuffer {
            ptr,
            size,
            capacity: size,
            stream: stream.clone(),
            resource,
        })
    }

    /// A buffer holding a copy of `bytes` (from the current resource).
    pub fn from_host(bytes: &[u8], stream: &Stream) -> Result<Self> {
        Self::from_host_with_resource(bytes, stream, get_per_device_resource(stream.device()))
    }

    /// A buffer holding a copy of `bytes`, from `resource`.
    pub fn from_host_with_resource(
        bytes: &[u8],
        stream: &Stream,
        resource: SharedResource,
    ) -> Result<Self> {
        let mut buf = Self::with_resource(bytes.len(), stream, resource)?;
        buf.copy_from_host(bytes)?;
        Ok(buf)
    }

    /// A buffer holding a copy of `src`'s bytes (from the current resource), queued on `stream`
    /// without waiting for it: see [`DeviceBuffer::copy_from_pinned_async`].
    pub fn from_pinned_async<T: Pod>(src: &PinnedHostVec<T>, stream: &Stream) -> Result<Self> {
        Self::from_pinned_async_with_resource(src, stream, get_per_device_resource(stream.device()))
    }

    /// As [`DeviceBuffer::from_pinned_async`], from `resource`.
    pub fn from_pinned_async_with_resource<T: Pod>(
        src: &PinnedHostVec<T>,
        stream: &Stream,
        resource: SharedResource,
    ) -> Result<Self> {
        let mut buf = Self::with_resource(src.bytes().len(), stream, resource)?;
        buf.copy_from_pinned_async(src)?;
        Ok(buf)
    }

    /// Overwrites the whole buffer with `src`'s bytes (exactly `size` of them), queued on the
    /// buffer's stream; returns without waiting for the copy (unlike
    /// [`DeviceBuffer::copy_from_host`]). Work queued later on the stream sees the new contents.
    /// `src` records the copy, and waits for it before it lets its memory be changed or freed,
    /// so the copy cannot outlive its source.
    ///
    /// ```
    /// use rmm_core::{Device, DeviceBuffer, PinnedHostResource, PinnedHostVec};
    /// let device = Device::simulated(1 << 30);
    /// let stream = device.new_stream()?;
    /// let src = PinnedHostVec::from_slice(&[7u8; 512], &PinnedHostResource::new(&device), &stream)?;
    /// let mut buf = DeviceBuffer::new(512, &stream)?;
    /// buf.copy_from_pinned_async(&src)?;
    /// assert_eq!(buf.to_host()?, vec![7u8; 512]);
    /// # Ok::<(), rmm_core::MemoryError>(())
    /// ```
    pub fn copy_from_pinned_async<T: Pod>(&mut self, src: &PinnedHostVec<T>) -> Result<()> {
        let bytes = src.bytes();
        if bytes.len() != self.size {
            return Err(MemoryError::InvalidArgument(format!(
                "copy of {} pinned host bytes into a buffer of {} bytes",
                bytes.len(),
                self.size
            )));
        }
        src.queue_read(&self.stream, || {
            // SAFETY: `ptr .. ptr + size` is ours; `src` stays valid and unchanged until the copy
            // has run (it waits for the read recorded by `queue_read` before any change or free).
            unsafe { self.stream.copy_from_host_async(self.ptr, bytes)? };
            Ok(())
        })
    }

    /// Device address of the first byte (0 when empty).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The address as a reference, for kernel-argument lists that take pointers to arguments.
    pub(crate) fn ptr_ref(&self) -> &u64 {
        &self.ptr
    }

    /// Bytes in use (what copies and `to_host` cover).
    pub fn size(&self) -> usize {
        self.size
    }

    /// True when the size is 0.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Bytes allocated (at least the size).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The stream all the buffer's work (and its final free) is queued on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The resource the memory came from and goes back to.
    pub fn resource(&self) -> &SharedResource {
        &self.resource
    }

    /// Overwrites the whole buffer with `src` (which must have exactly `size` bytes); returns once
    /// `src` may be reused.
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<()> {
        if src.len() != self.size {
            return Err(MemoryError::InvalidArgument(format!(
                "copy of {} host bytes into a buffer of {} bytes",
                src.len(),
                self.size
            )));
        }
        // SAFETY: `ptr .. ptr + size` is ours.
        unsafe { self.stream.copy_from_host(self.ptr, src)? };
        Ok(())
    }

    /// Copies the buffer into `dst` (exactly `size` bytes), waiting for the copy.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() != self.size {
            return Err(MemoryError::InvalidArgument(format!(
                "copy of a buffer of {} bytes into {} host bytes",
                self.size,
                dst.len()
            )));
        }
        // SAFETY: `ptr .. ptr + size` is ours.
        unsafe { self.stream.copy_to_host(dst, self.ptr)? };
        Ok(())
    }

    /// The buffer's bytes, copied to the host.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.size];
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Sets every byte to `value` (queued on the stream).
    pub fn memset(&mut self, value: u8) -> Result<()> {
        // SAFETY: `ptr .. ptr + size` is ours.
        unsafe { self.stream.memset(self.ptr, value, self.size)? };
        Ok(())
    }

    /// Moves the buffer to `stream`: later work (and the final free) is ordered there, after all
    /// work already queued on the old stream.
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        if stream.device() != self.stream.device() {
            return Err(MemoryError::InvalidArgument(
                "set_stream to a stream of another device".into(),
            ));
        }
        if stream.id() != self.stream.id() {
            let event = stream.device().new_event()?;
            stream.wait_for(&self.stream, &event)?;
            self.stream = stream.clone();
        }
        Ok(())
    }

    /// Makes the capacity at least `new_capacity`, keeping the contents.
    pub fn reserve(&mut self, new_capacity: usize) -> Result<()> {
        if new_capacity > self.capacity {
            self.reallocate(new_capacity)?;
        }
        Ok(())
    }

    /// Changes the size, keeping the first `min(old, new)` bytes; grows the capacity if needed.
    pub fn resize(&mut self, new_size: usize) -> Result<()> {
        self.reserve(new_size)?;
        self.size = new_size;
        Ok(())
    }

    /// Makes the capacity equal to the size, keeping the contents.
    pub fn shrink_to_fit(&mut self) -> Result<()> {
        if self.capacity != self.size {
            self.reallocate(self.size)?;
        }
        Ok(())
    }

    fn reallocate(&mut self, new_capacity: usize) -> Result<()> {
        let new_ptr = self.resource.allocate(new_capacity, &self.stream)?;
        let keep = self.size.min(new_capacity);
        // SAFETY: both ranges are ours and distinct; the copy is ordered on our stream.
        let copied = unsafe { self.stream.copy_device(new_ptr, self.ptr, keep) };
        if let Err(e) = copied {
            // SAFETY: just allocated, unused.
            let _ = unsafe {
                self.resource
                    .deallocate(new_ptr, new_capacity, &self.stream)
            };
            return Err(e.into());
        }
        // SAFETY: the old memory is ours; the copy reading it is queued before the free.
        unsafe {
            self.resource
                .deallocate(self.ptr, self.capacity, &self.stream)?
        };
        self.ptr = new_ptr;
        self.capacity = new_capacity;
        Ok(())
    }

    /// A deep copy whose memory and work belong to `stream` (same resource).
    pub fn try_clone_on(&self, stream: &Stream) -> Result<DeviceBuffer> {
        let copy = DeviceBuffer::with_resource(self.size, stream, self.resource.clone())?;
        if stream.id() != self.stream.id() {
            // The copy must see everything already queued on our stream.
            let event = stream.device().new_event()?;
            stream.wait_for(&self.stream, &event)?;
        }
        // SAFETY: both ranges are live and distinct.
        unsafe { stream.copy_device(copy.ptr, self.ptr, self.size)? };
        Ok(copy)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by this resource with this capacity; all our work is on our stream.
        if let Err(e) = unsafe {
            self.resource
                .deallocate(self.ptr, self.capacity, &self.stream)
        } {
            eprintln!(
                "rmm-core: DeviceBuffer of {} bytes could not be freed: {e}",
                self.capacity
            );
        }
    }
}
