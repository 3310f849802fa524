//! Devices: real CUDA devices (one shared primary context each) or simulated ones.

use crate::driver::device_count;
use crate::error::{Checked, CudaError, Result};
use crate::event::Event;
use crate::mem_pool::{MemPool, MemPoolOptions};
use crate::sim::{SimDevice, SimOp, SimWaitHook};
use crate::stream::Stream;
use cudarc::driver::{result, sys, CudaContext};
use once_cell::sync::OnceCell;
use parking_lot::Mutex;
use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

/// Which device: a CUDA ordinal, or a simulated device's index.
///
/// ```
/// use rmm_cuda::{Device, DeviceId};
/// let device = Device::simulated(1 << 20);
/// assert!(matches!(device.id(), DeviceId::Simulated(_)));
/// println!("{}", device.id()); // "sim:N" ("cuda:N" for a GPU)
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceId {
    Cuda(usize),
    Simulated(usize),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceId::Simulated(n) => write!(f, "sim:{n}"),
        }
    }
}

/// Free and total memory of a device, in bytes.
///
/// ```
/// let device = rmm_cuda::Device::simulated(1 << 20);
/// let info = device.memory_info()?;
/// assert_eq!((info.free, info.total), (1 << 20, 1 << 20));
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: usize,
    pub total: usize,
}

/// Advice for managed memory (`cuMemAdvise`), applied for this device.
///
/// ```
/// use rmm_cuda::{Device, MemAdvice};
/// let device = Device::simulated(1 << 30);
/// let ptr = device.alloc_managed(1 << 20)?;
/// device.advise(ptr, 1 << 20, MemAdvice::SetReadMostly)?;
/// // SAFETY: allocated just above, unused.
/// unsafe { device.free(ptr)? };
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemAdvice {
    SetReadMostly,
    UnsetReadMostly,
    SetPreferredLocation,
    UnsetPreferredLocation,
    SetAccessedBy,
    UnsetAccessedBy,
}

pub(crate) enum Backend {
    Cuda(Arc<CudaContext>),
    Sim(SimDevice),
}

/// A device handle: cheap to clone, `Send + Sync`. Real devices of the same ordinal share one
/// handle (and the device's primary context).
///
/// ```
/// use rmm_cuda::Device;
/// // GPU 0 when there is one, else a simulated device backed by host memory.
/// let device = Device::cuda(0).unwrap_or_else(|_| Device::simulated(1 << 30));
/// let stream = device.new_stream()?;
/// let ptr = device.alloc(4096)?;
/// // SAFETY: allocated just above, unused.
/// unsafe { device.free(ptr)? };
/// stream.synchronize()?;
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<Backend>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.id())
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for Device {}

static CUDA_DEVICES: OnceCell<Mutex<Vec<Option<Device>>>> = OnceCell::new();

thread_local! {
    /// The device this thread last made current through [`Device::bind`] (its backend's address;
    /// a CUDA device's backend lives as long as the process, in `CUDA_DEVICES`).
    static LAST_BOUND: Cell<usize> = const { Cell::new(0) };
}

impl Device {
    /// The CUDA device `ordinal`. Errors (never panics) when there is no driver, no GPU, or no
    /// such device.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        let count = device_count()?;
        if count == 0 {
            return Err(CudaError::NoDevice);
        }
        if ordinal >= count {
            return Err(CudaError::InvalidDevice { ordinal, count });
        }
        let mut cache = CUDA_DEVICES
            .get_or_init(|| Mutex::new(vec![None; count]))
            .lock();
        if let Some(dev) = &cache[ordinal] {
            return Ok(dev.clone());
        }
        let ctx = CudaContext::new(ordinal).checked("cuDevicePrimaryCtxRetain")?;
        let dev = Device {
            inner: Arc::new(Backend::Cuda(ctx)),
        };
        cache[ordinal] = Some(dev.clone());
        Ok(dev)
    }

    /// A simulated device with `capacity` bytes of (host) memory.
    pub fn simulated(capacity: usize) -> Device {
        Device {
            inner: Arc::new(Backend::Sim(SimDevice::new(capacity))),
        }
    }

    pub fn id(&self) -> DeviceId {
        match &*self.inner {
            Backend::Cuda(ctx) => DeviceId::Cuda(ctx.ordinal()),
            Backend::Sim(sim) => DeviceId::Simulated(sim.index),
        }
    }

    pub fn is_simulated(&self) -> bool {
        matches!(&*self.inner, Backend::Sim(_))
    }

    /// The cudarc context of a real device (for kernel launches and library handles).
    pub fn cuda_context(&self) -> Option<&Arc<CudaContext>> {
        match &*self.inner {
            Backend::Cuda(ctx) => Some(ctx),
            Backend::Sim(_) => None,
        }
    }

    pub(crate) fn sim(&self) -> Option<&SimDevice> {
        match &*self.inner {
            Backend::Sim(sim) => Some(sim),
            Backend::Cuda(_) => None,
        }
    }

    /// Makes this device current on the calling thread (no-op when simulated).
    pub fn bind(&self) -> Result<()> {
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                LAST_BOUND.set(self.backend_address());
                Ok(())
            }
            Backend::Sim(_) => Ok(()),
        }
    }

    /// [`Device::bind`] unless this thread's last bind through it was of this device: for calls
    /// that take their context from a created stream (the stream-ordered pool's), which need no
    /// check of the current context per call (a driver call each). Making it current once per
    /// thread is a precaution: the driver does not need it, but tools that watch CUDA threads
    /// may assume that a thread making CUDA calls has a context current.
    pub(crate) fn bind_once_per_thread(&self) -> Result<()> {
        if LAST_BOUND.get() == self.backend_address() {
            return Ok(());
        }
        self.bind()
    }

    fn backend_address(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Makes this device current until the guard drops, then restores the previous context.
    pub fn guard(&self) -> Result<DeviceGuard> {
        let previous = match &*self.inner {
            Backend::Cuda(_) => result::ctx::get_current().checked("cuCtxGetCurrent")?,
            Backend::Sim(_) => None,
        };
        self.bind()?;
        Ok(DeviceGuard {
            previous: previous.map(|c| c as usize),
            _not_send: std::marker::PhantomData,
        })
    }

    pub fn name(&self) -> Result<String> {
        match &*self.inner {
            Backend::Cuda(ctx) => ctx.name().checked("cuDeviceGetName"),
            Backend::Sim(sim) => Ok(format!(
                "simulated device {} ({} bytes)",
                sim.index,
                sim.capacity()
            )),
        }
    }

    /// Compute capability (major, minor); a simulated device reports (0, 0).
    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        match &*self.inner {
            Backend::Cuda(ctx) => ctx.compute_capability().checked("cuDeviceGetAttribute"),
            Backend::Sim(_) => Ok((0, 0)),
        }
    }

    pub fn total_memory(&self) -> Result<usize> {
        Ok(self.memory_info()?.total)
    }

    pub fn memory_info(&self) -> Result<MemoryInfo> {
        match &*self.inner {
            Backend::Cuda(ctx) => {
                let (free, total) = ctx.mem_get_info().checked("cuMemGetInfo")?;
                Ok(MemoryInfo { free, total })
            }
            Backend::Sim(sim) => Ok(MemoryInfo {
                free: sim.capacity() - sim.used(),
                total: sim.capacity(),
            }),
        }
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> Result<()> {
        match &*self.inner {
            Backend::Cuda(ctx) => ctx.synchronize().checked("cuCtxSynchronize"),
            Backend::Sim(sim) => {
                sim.host_wait(SimOp::DeviceSync);
                Ok(())
            }
        }
    }

    /// The legacy default stream (handle 0).
    pub fn default_stream(&self) -> Stream {
        Stream::default_of(self)
    }

    /// The per-thread default stream.
    pub fn per_thread_stream(&self) -> Stream {
        Stream::per_thread_of(self)
    }

    /// A new stream that does not synchronise with the legacy default stream.
    pub fn new_stream(&self) -> Result<Stream> {
        Stream::new_on(self)
    }

    /// A new event (timing disabled, for ordering).
    pub fn new_event(&self) -> Result<Event> {
        Event::new_on(self)
    }

    /// The ordering operations a simulated device was asked for so far (empty for a real device).
    pub fn sim_ops(&self) -> Vec<SimOp> {
        self.sim().map(SimDevice::ops).unwrap_or_default()
    }

    /// Installs (or, with `None`, removes) a test hook that runs on every host wait of a
    /// simulated device (stream, event and device synchronisation), on the waiting thread, after
    /// the wait is logged in [`Device::sim_ops`]. A test can make a wait slow or observable with
    /// it, e.g. block a synchronisation until another thread has done something. No-op on a real
    /// device.
    ///
    /// ```
    /// use rmm_cuda::{Device, SimOp};
    /// use std::sync::{Arc, Mutex};
    /// let device = Device::simulated(1 << 20);
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// device.set_sim_wait_hook(Some(Arc::new(move |op| log.lock().unwrap().push(op))));
    /// let stream = device.new_stream()?;
    /// stream.synchronize()?;
    /// device.set_sim_wait_hook(None);
    /// assert_eq!(*seen.lock().unwrap(), vec![SimOp::StreamSync { stream: stream.id().0 }]);
    /// # Ok::<(), rmm_cuda::CudaError>(())
    /// ```
    pub fn set_sim_wait_hook(&self, hook: Option<SimWaitHook>) {
        if let Some(sim) = self.sim() {
            sim.set_wait_hook(hook);
        }
    }

    /// Forgets the simulated device's recorded operations.
    pub fn clear_sim_ops(&self) {
        if let Some(sim) = self.sim() {
            sim.clear_ops();
        }
    }

    /// Device memory (`cuMemAlloc`). Zero bytes gives the null pointer.
    pub fn alloc(&self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: a context is current; the memory is returned uninitialised.
                unsafe { result::malloc_sync(bytes) }.checked("cuMemAlloc")
            }
            Backend::Sim(sim) => sim.alloc("cuMemAlloc", bytes),
        }
    }

    /// Frees what [`Device::alloc`] returned.
    ///
    /// # Safety
    /// `ptr` must come from `alloc` on this device, not be freed yet, and no work may still use it.
    pub unsafe fn free(&self, ptr: u64) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                result::free_sync(ptr).checked("cuMemFree")
            }
            Backend::Sim(sim) => sim.free("cuMemFree", ptr),
        }
    }

    /// Managed (unified) memory attached globally (`cuMemAllocManaged`).
    pub fn alloc_managed(&self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: a context is current.
                unsafe {
                    result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                }
                .checked("cuMemAllocManaged")
            }
            Backend::Sim(sim) => sim.alloc("cuMemAllocManaged", bytes),
        }
    }

    /// Page-locked host memory (`cuMemHostAlloc`, portable), returned as an address.
    pub fn alloc_pinned(&self, bytes: usize) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: a context is current. CU_MEMHOSTALLOC_PORTABLE = 1.
                unsafe { result::malloc_host(bytes, 1) }
                    .map(|p| p as u64)
                    .checked("cuMemHostAlloc")
            }
            Backend::Sim(sim) => sim.alloc("cuMemHostAlloc", bytes),
        }
    }

    /// Frees what [`Device::alloc_pinned`] returned.
    ///
    /// # Safety
    /// As for [`Device::free`].
    pub unsafe fn free_pinned(&self, ptr: u64) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                result::free_host(ptr as *mut std::ffi::c_void).checked("cuMemFreeHost")
            }
            Backend::Sim(sim) => sim.free("cuMemFreeHost", ptr),
        }
    }

    fn location(&self) -> sys::CUmemLocation {
        let id = match self.id() {
            DeviceId::Cuda(n) => n as i32,
            DeviceId::Simulated(_) => 0,
        };
        sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id,
        }
    }

    /// Migrates managed memory to this device, ordered on `stream`.
    pub fn prefetch(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: the range is checked by the driver; the stream belongs to this device.
                unsafe { result::mem_prefetch_async(ptr, bytes, self.location(), stream.raw()) }
                    .checked("cuMemPrefetchAsync")
            }
            Backend::Sim(sim) => {
                sim.check_range("cuMemPrefetchAsync", ptr, bytes)?;
                sim.log(SimOp::Prefetch {
                    ptr,
                    bytes,
                    stream: stream.id().0,
                });
                Ok(())
            }
        }
    }

    /// Gives the driver advice about a managed range, for this device.
    pub fn advise(&self, ptr: u64, bytes: usize, advice: MemAdvice) -> Result<()> {
        use sys::CUmem_advise::*;
        let raw = match advice {
            MemAdvice::SetReadMostly => CU_MEM_ADVISE_SET_READ_MOSTLY,
            MemAdvice::UnsetReadMostly => CU_MEM_ADVISE_UNSET_READ_MOSTLY,
            MemAdvice::SetPreferredLocation => CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
            MemAdvice::UnsetPreferredLocation => CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
            MemAdvice::SetAccessedBy => CU_MEM_ADVISE_SET_ACCESSED_BY,
            MemAdvice::UnsetAccessedBy => CU_MEM_ADVISE_UNSET_ACCESSED_BY,
        };
        match &*self.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: the driver validates the range.
                unsafe { result::mem_advise(ptr, bytes, raw, self.location()) }
                    .checked("cuMemAdvise")
            }
            Backend::Sim(sim) => sim.check_range("cuMemAdvise", ptr, bytes),
        }
    }

    /// Whether the device reads and writes ordinary (pageable) host memory coherently
    /// (`CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS`: HMM or ATS), so that memory from the
    /// system allocator can be handed to kernels. A simulated device says no.
    pub fn pageable_memory_access(&self) -> Result<bool> {
        match &*self.inner {
            Backend::Cuda(ctx) => Ok(ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)
                .checked("cuDeviceGetAttribute")?
                != 0),
            Backend::Sim(_) => Ok(false),
        }
    }

    /// A CUDA stream-ordered memory pool of this device (`cuMemPoolCreate`).
    pub fn create_mem_pool(&self, options: MemPoolOptions) -> Result<MemPool> {
        MemPool::create(self, options)
    }

    /// The location value used by pool creation.
    pub(crate) fn mem_location(&self) -> sys::CUmemLocation {
        self.location()
    }
}

/// Restores the previously current context when dropped. Stays on its thread.
///
/// ```
/// let device = rmm_cuda::Device::simulated(1 << 20);
/// {
///     let _current = device.guard()?; // `device` is current on this thread here
/// }
/// // ... and the previous context is current again.
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub struct DeviceGuard {
    previous: Option<usize>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(prev) = self.previous {
            // SAFETY: `prev` was the current context when the guard was made; primary contexts
            // live as long as the process holds them.
            let _ = unsafe { result::ctx::set_current(prev as sys::CUcontext) };
        }
        // Another context (or none) may be current now.
        LAST_BOUND.set(0);
    }
}
