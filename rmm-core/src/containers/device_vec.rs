//! `DeviceVec<T>`: a typed array of plain-old-data values in device memory.

use super::{DeviceBuffer, PinnedHostVec};
use crate::error::{MemoryError, Result};
use crate::registry::get_per_device_resource;
use crate::resource::SharedResource;
use bytemuck::Pod;
use rmm_cuda::Stream;
use std::marker::PhantomData;

/// `len` values of `T` in device memory (RMM's `device_uvector`): uninitialised on creation
/// unless made from host data or zeroed.
///
/// ```
/// use rmm_core::{Device, DeviceVec};
/// let device = Device::simulated(1 << 30);
/// let stream = device.new_stream()?;
/// let mut v = DeviceVec::from_host(&[1u32, 2, 3], &stream)?;
/// v.resize(4)?;
/// assert_eq!(v.len(), 4);
/// let other = device.new_stream()?;
/// v.set_stream(&other)?; // later use and the free are ordered on `other`
/// assert_eq!(&v.to_host()?[..3], &[1, 2, 3]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceVec<T: Pod> {
    buf: DeviceBuffer,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for DeviceVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceVec<{}>(len {}, {:?})",
            std::any::type_name::<T>(),
            self.len(),
            self.buf
        )
    }
}

fn bytes_for<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        MemoryError::InvalidArgument(format!(
            "{len} elements of {} overflow usize",
            std::any::type_name::<T>()
        ))
    })
}

impl<T: Pod> DeviceVec<T> {
    /// `len` uninitialised values from the current resource.
    pub fn new(len: usize, stream: &Stream) -> Result<Self> {
        Self::with_resource(len, stream, get_per_device_resource(stream.device()))
    }

    /// `len` uninitialised values from `resource`.
    pub fn with_resource(len: usize, stream: &Stream, resource: SharedResource) -> Result<Self> {
        Ok(DeviceVec {
            buf: DeviceBuffer::with_resource(bytes_for::<T>(len)?, stream, resource)?,
            _t: PhantomData,
        })
    }

    /// `len` zero values from the current resource.
    pub fn zeros(len: usize, stream: &Stream) -> Result<Self> {
        let mut v = Self::new(len, stream)?;
        v.buf.memset(0)?;
        Ok(v)
    }

    /// `len` zero values from `resource`.
    pub fn zeros_with_resource(
        len: usize,
        stream: &Stream,
        resource: SharedResource,
    ) -> Result<Self> {
        let mut v = Self::with_resource(len, stream, resource)?;
        v.buf.memset(0)?;
        Ok(v)
    }

    /// Sets every value to zero bytes (queued on the stream).
    pub fn fill_zero(&mut self) -> Result<()> {
        self.buf.memset(0)
    }

    /// Sets every byte of every value to `byte` (queued on the stream; `0xff` makes every
    /// unsigned integer its maximum).
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        self.buf.memset(byte)
    }

    /// A copy of `values` from the current resource.
    pub fn from_host(values: &[T], stream: &Stream) -> Result<Self> {
        Self::from_host_with_resource(values, stream, get_per_device_resource(stream.device()))
    }

    /// A copy of `values` from `resource`.
    pub fn from_host_with_resource(
        values: &[T],
        stream: &Stream,
        resource: SharedResource,
    ) -> Result<Self> {
        Ok(DeviceVec {
            buf: DeviceBuffer::from_host_with_resource(
                bytemuck::cast_slice(values),
                stream,
                resource,
            )?,
            _t: PhantomData,
        })
    }

    /// A copy of `values` (in pinned host memory) from the current resource, queued on `stream`
    /// without waiting for it, unlike [`DeviceVec::from_host`], which must wait before its source
    /// may be reused. `values` waits for the copy before it lets its memory be changed or freed
    /// (see [`PinnedHostVec`]), so the copy cannot outlive its source.
    ///
    /// ```
    /// use rmm_core::{Device, DeviceVec, PinnedHostResource, PinnedHostVec};
    /// let device = Device::simulated(1 << 30);
    /// let stream = device.new_stream()?;
    /// let values = PinnedHostVec::from_slice(&[1u32, 2, 3], &PinnedHostResource::new(&device), &stream)?;
    /// let v = DeviceVec::from_pinned_async(&values, &stream)?;
    /// drop(values); // waits for the copy, then frees the pinned memory
    /// assert_eq!(v.to_host()?, vec![1, 2, 3]);
    /// # Ok::<(), rmm_core::MemoryError>(())
    /// ```
    pub fn from_pinned_async(values: &PinnedHostVec<T>, stream: &Stream) -> Result<Self> {
        Self::from_pinned_async_with_resource(
            values,
            stream,
            get_per_device_resource(stream.device()),
        )
    }

    /// As [`DeviceVec::from_pinned_async`], from `resource`.
    pub fn from_pinned_async_with_resource(
        values: &PinnedHostVec<T>,
        stream: &Stream,
        resource: SharedResource,
    ) -> Result<Self> {
        Ok(DeviceVec {
            buf: DeviceBuffer::from_pinned_async_with_resource(values, stream, resource)?,
            _t: PhantomData,
        })
    }

    /// Overwrites all values from `values` (same length, in pinned host memory), queued on the
    /// vector's stream without waiting: see [`DeviceBuffer::copy_from_pinned_async`].
    pub fn copy_from_pinned_async(&mut self, values: &PinnedHostVec<T>) -> Result<()> {
        self.buf.copy_from_pinned_async(values)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.buf.size() / std::mem::size_of::<T>().max(1)
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Device address of the first value (0 when empty).
    pub fn ptr(&self) -> u64 {
        self.buf.ptr()
    }

    /// The stream the vector's work (and its final free) is queued on.
    pub fn stream(&self) -> &Stream {
        self.buf.stream()
    }

    /// The untyped buffer underneath.
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }

    /// The values of an untyped buffer (its size a whole number of values), e.g. one
    /// [`DeviceBuffer::borrowed`] from another library.
    pub fn from_buffer(buf: DeviceBuffer) -> Result<Self> {
        let item = std::mem::size_of::<T>().max(1);
        if !buf.size().is_multiple_of(item) {
            return Err(crate::error::MemoryError::InvalidArgument(format!(
                "a buffer of {} bytes is not a whole number of {item}-byte values",
                buf.size()
            )));
        }
        Ok(DeviceVec {
            buf,
            _t: PhantomData,
        })
    }

    /// The untyped buffer underneath, taken out of the vector.
    pub fn into_buffer(self) -> DeviceBuffer {
        self.buf
    }

    /// The values, copied to the host.
    pub fn to_host(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len()];
        self.buf.copy_to_host(bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Overwrites all values from `values` (same length).
    pub fn copy_from_host(&mut self, values: &[T]) -> Result<()> {
        self.buf.copy_from_host(bytemuck::cast_slice(values))
    }

    /// Changes the length, keeping the first `min(old, new)` values.
    pub fn resize(&mut self, len: usize) -> Result<()> {
        self.buf.resize(bytes_for::<T>(len)?)
    }

    /// Makes room for at least `capacity` values, keeping the contents.
    pub fn reserve(&mut self, capacity: usize) -> Result<()> {
        self.buf.reserve(bytes_for::<T>(capacity)?)
    }

    /// Makes the capacity equal to the length, keeping the contents.
    pub fn shrink_to_fit(&mut self) -> Result<()> {
        self.buf.shrink_to_fit()
    }

    /// Moves the vector to `stream` (see [`DeviceBuffer::set_stream`]).
    pub fn set_stream(&mut self, stream: &Stream) -> Result<()> {
        self.buf.set_stream(stream)
    }

    /// A deep copy on `stream`.
    pub fn try_clone_on(&self, stream: &Stream) -> Result<Self> {
        Ok(DeviceVec {
            buf: self.buf.try_clone_on(stream)?,
            _t: PhantomData,
        })
    }
}
