//! The memory-resource contract every resource and adaptor implements.

use crate::error::Result;
use crate::identity::ResourceIdentity;
use rmm_cuda::{Device, Stream, ALIGNMENT};
use std::fmt;
use std::sync::Arc;

/// What kind of memory a resource hands out.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryKind, MemoryResource, PinnedHostResource};
/// let device = Device::simulated(1 << 20);
/// assert_eq!(CudaResource::new(&device).kind(), MemoryKind::Device);
/// assert!(PinnedHostResource::new(&device).kind().host_accessible());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory, usable by kernels of its device only.
    Device,
    /// Managed (unified) memory, usable from host and device.
    Managed,
    /// Page-locked host memory, usable by the host and by copies/kernels through mapping.
    PinnedHost,
    /// Pageable host memory from the system allocator, usable by kernels of devices that
    /// access pageable memory (HMM, ATS).
    System,
}

impl MemoryKind {
    /// Whether the host reads and writes this memory directly.
    pub fn host_accessible(self) -> bool {
        matches!(self, MemoryKind::PinnedHost | MemoryKind::System)
    }
}

/// A source of memory, stream-ordered.
///
/// - `allocate(bytes, stream)` returns an address aligned to [`ALIGNMENT`] (256 bytes) that may be
///   used by work queued on `stream` from now on. Zero bytes is legal and returns 0.
/// - `deallocate(ptr, bytes, stream)` gives it back; work already queued on `stream` may still use
///   it, so the resource reuses it for `stream` at once but for another stream only after ordering
///   (an event wait on the device, never a host sync where avoidable).
/// - Resources are `Send + Sync` and shared through [`SharedResource`] (`Arc`); an adaptor or
///   sub-allocator owns its upstream.
/// - Out-of-memory is [`crate::MemoryError::OutOfMemory`], never a panic or abort.
///
/// ```
/// use rmm_core::{Device, MemoryResource, Result, Stream};
/// /// A resource that forwards to another and counts the calls.
/// #[derive(Debug)]
/// struct Counting<U: MemoryResource> {
///     upstream: U,
///     calls: std::sync::atomic::AtomicUsize,
/// }
/// impl<U: MemoryResource> MemoryResource for Counting<U> {
///     fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
///         self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         self.upstream.allocate(bytes, stream)
///     }
///     unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
///         self.upstream.deallocate(ptr, bytes, stream)
///     }
///     fn device(&self) -> &Device {
///         self.upstream.device()
///     }
///     fn name(&self) -> String {
///         format!("counting({})", self.upstream.name())
///     }
/// }
/// let device = Device::simulated(1 << 20);
/// let r = Counting { upstream: rmm_core::CudaResource::new(&device), calls: Default::default() };
/// let stream = device.new_stream()?;
/// let p = r.allocate(256, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { r.deallocate(p, 256, &stream)? };
/// assert_eq!(r.calls.into_inner(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait MemoryResource: Send + Sync + fmt::Debug {
    /// Allocates `bytes` for use on `stream`.
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64>;

    /// Returns memory obtained from [`MemoryResource::allocate`].
    ///
    /// # Safety
    /// `ptr` must have come from `allocate` of this resource with the same `bytes`, must not have
    /// been returned already, and no work not ordered before `stream`'s current end may use it.
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()>;

    /// The device whose memory this is.
    fn device(&self) -> &Device;

    /// What kind of memory this is.
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }

    /// A short name for messages (e.g. `pool(cuda)`).
    fn name(&self) -> String;

    /// What this resource's memory is interchangeable with, for [`MemoryResource::is_equal`].
    /// The default is this object alone ([`ResourceIdentity::Object`]): right for every resource
    /// that keeps state about what it handed out (pools, arenas, counting adaptors). Resources
    /// whose memory any other of their kind can free (driver allocations:
    /// [`ResourceIdentity::Driver`]) and adaptors that add nothing to a free (they answer their
    /// upstream's identity) override it.
    fn identity(&self) -> ResourceIdentity {
        ResourceIdentity::of_object(self)
    }

    /// True when `other` can free what this resource allocated, and the other way round (RMM's
    /// `is_equal`): the same object, through any handle (two clones of one [`SharedResource`]),
    /// or two resources whose memory is interchangeable, such as two [`crate::CudaResource`]s of
    /// one device. Compares [`MemoryResource::identity`]; a resource overrides that, not this, so
    /// that the answer is the same both ways.
    ///
    /// ```
    /// use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource, SharedResource};
    /// use std::sync::Arc;
    /// let device = Device::simulated(1 << 30);
    /// assert!(CudaResource::new(&device).is_equal(&CudaResource::new(&device)));
    /// let pool: SharedResource =
    ///     Arc::new(PoolResource::new(CudaResource::new(&device), PoolOptions::sized(1 << 20, None))?);
    /// let other: SharedResource =
    ///     Arc::new(PoolResource::new(CudaResource::new(&device), PoolOptions::sized(1 << 20, None))?);
    /// assert!(pool.is_equal(&pool.clone()));
    /// assert!(!pool.is_equal(&other));
    /// # Ok::<(), rmm_core::MemoryError>(())
    /// ```
    fn is_equal(&self, other: &dyn MemoryResource) -> bool {
        self.identity() == other.identity()
    }

    /// `Some(unit)` when this resource grows one address range: each allocation (a multiple of
    /// `unit` bytes) starts where the previous one ended, and allocations are given back from
    /// the end, last first. A pool over it treats its chunks as one range (blocks coalesce
    /// across them) and gives memory back from the end ([`crate::ExpandableResource`]). `None`
    /// (the default): separate allocations.
    fn contiguous_growth_unit(&self) -> Option<usize> {
        None
    }
}

/// A resource shared between owners: the form resources are stored, composed and registered in.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, SharedResource};
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 20);
/// let shared: SharedResource = Arc::new(CudaResource::new(&device));
/// let handle = shared.clone(); // the same resource
/// assert!(shared.is_equal(&handle));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type SharedResource = Arc<dyn MemoryResource>;

impl<R: MemoryResource + ?Sized> MemoryResource for Arc<R> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        (**self).allocate(bytes, stream)
    }
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        (**self).deallocate(ptr, bytes, stream)
    }
    fn device(&self) -> &Device {
        (**self).device()
    }
    fn kind(&self) -> MemoryKind {
        (**self).kind()
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn identity(&self) -> ResourceIdentity {
        (**self).identity()
    }
    fn is_equal(&self, other: &dyn MemoryResource) -> bool {
        (**self).is_equal(other)
    }
    fn contiguous_growth_unit(&self) -> Option<usize> {
        (**self).contiguous_growth_unit()
    }
}

/// Rounds `bytes` up to a multiple of `align` (a power of two).
///
/// ```
/// assert_eq!(rmm_core::align_up(1000, 512), 1024);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn align_up(bytes: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    (bytes + align - 1) & !(align - 1)
}

/// Rounds `bytes` up to the resources' alignment, 256.
///
/// ```
/// assert_eq!(rmm_core::aligned_size(1), 256); // every allocation is a multiple of 256 bytes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn aligned_size(bytes: usize) -> usize {
    align_up(bytes, ALIGNMENT)
}

/// Checks that `stream` belongs to the resource's device (a cheap guard against cross-device use).
/// Generic so that a resource checking itself compiles to one pointer comparison.
///
/// ```
/// use rmm_core::{check_stream, CudaResource, Device};
/// let (a, b) = (Device::simulated(1 << 20), Device::simulated(1 << 20));
/// let cuda = CudaResource::new(&a);
/// assert!(check_stream(&cuda, &a.new_stream()?).is_ok());
/// assert!(check_stream(&cuda, &b.new_stream()?).is_err()); // another device's stream
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn check_stream<R: MemoryResource + ?Sized>(resource: &R, stream: &Stream) -> Result<()> {
    if stream.device() == resource.device() {
        Ok(())
    } else {
        Err(wrong_device(stream, &resource.name(), resource.device()))
    }
}

#[cold]
fn wrong_device(stream: &Stream, name: &str, device: &Device) -> crate::MemoryError {
    crate::MemoryError::InvalidArgument(format!(
        "stream of {} used with resource {name} of {}",
        stream.device().id(),
        device.id()
    ))
}
