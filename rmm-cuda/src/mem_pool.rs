//! CUDA stream-ordered memory pools (`cuMemPoolCreate` / `cuMemAllocFromPoolAsync`).

use crate::device::{Backend, Device};
use crate::error::{Checked, CudaError, Result};
use crate::stream::Stream;
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// How to build a [`MemPool`].
///
/// ```
/// use rmm_cuda::{Device, MemPoolOptions};
/// let device = Device::simulated(1 << 30);
/// let pool = device.create_mem_pool(MemPoolOptions {
///     release_threshold: Some(64 << 20),
///     maximum_size: Some(512 << 20),
/// })?;
/// # let _ = pool;
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MemPoolOptions {
    /// Bytes the pool keeps reserved when idle instead of returning them to the driver at each
    /// synchronisation. `None` keeps everything (RMM's cuda_async resource does the same).
    pub release_threshold: Option<u64>,
    /// Largest the pool may grow to; 0 or `None` means no limit.
    pub maximum_size: Option<usize>,
}

/// A pool of device memory owned by the driver, allocated from and freed to in stream order.
///
/// ```
/// use rmm_cuda::{Device, MemPoolOptions};
/// let device = Device::simulated(1 << 30);
/// let pool = device.create_mem_pool(MemPoolOptions::default())?;
/// let stream = device.new_stream()?;
/// let ptr = pool.alloc_async(1 << 20, &stream)?;
/// // SAFETY: allocated just above from this pool; freed in stream order.
/// unsafe { pool.free_async(ptr, &stream)? };
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub struct MemPool {
    device: Device,
    raw: sys::CUmemoryPool,
    /// Whether dropping this value destroys the pool (false for a view of the device's default
    /// pool, which the driver owns).
    owned: bool,
    /// Bytes reserved by a simulated pool's allocations (the driver counts for real pools).
    sim_reserved: AtomicU64,
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemPool(on {})", self.device.id())
    }
}

// SAFETY: CUmemoryPool handles may be used from any thread.
unsafe impl Send for MemPool {}
unsafe impl Sync for MemPool {}

impl MemPool {
    pub(crate) fn create(device: &Device, options: MemPoolOptions) -> Result<MemPool> {
        let raw = match &*device.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
                props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
                props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
                props.location = device.mem_location();
                props.maxSize = options.maximum_size.unwrap_or(0);
                // SAFETY: props is fully initialised.
                unsafe { result::mem_pool::create(&props) }.checked("cuMemPoolCreate")?
            }
            Backend::Sim(_) => std::ptr::null_mut(),
        };
        let pool = MemPool {
            device: device.clone(),
            raw,
            owned: true,
            sim_reserved: AtomicU64::new(0),
        };
        pool.set_release_threshold(options.release_threshold.unwrap_or(u64::MAX))?;
        Ok(pool)
    }

    /// The device's default pool (`cuDeviceGetDefaultMemPool`), the one `cuMemAllocAsync` and
    /// cudarc's `CudaStream::alloc` draw from, as a view: its attributes are left as they are
    /// and dropping the view does not destroy it.
    pub fn device_default(device: &Device) -> Result<MemPool> {
        let raw = match &*device.inner {
            Backend::Cuda(ctx) => {
                ctx.bind_to_thread().checked("cuCtxSetCurrent")?;
                // SAFETY: the context's device handle is valid.
                unsafe { result::device::get_default_mem_pool(ctx.cu_device()) }
                    .checked("cuDeviceGetDefaultMemPool")?
            }
            Backend::Sim(_) => std::ptr::null_mut(),
        };
        Ok(MemPool {
            device: device.clone(),
            raw,
            owned: false,
            sim_reserved: AtomicU64::new(0),
        })
    }

    /// Whether this is a view of a pool owned elsewhere ([`MemPool::device_default`]).
    pub fn is_view(&self) -> bool {
        !self.owned
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn set_attr(&self, attr: sys::CUmemPool_attribute, mut value: u64) -> Result<()> {
        if self.device.is_simulated() {
            return Ok(());
        }
        // SAFETY: the pool is live; the u64 matches the attribute's type (cuuint64_t).
        unsafe {
            result::mem_pool::set_attribute(self.raw, attr, &mut value as *mut u64 as *mut c_void)
        }
        .checked("cuMemPoolSetAttribute")
    }

    fn get_attr(&self, attr: sys::CUmemPool_attribute) -> Result<u64> {
        let mut value = 0u64;
        // SAFETY: as above.
        unsafe {
            result::mem_pool::get_attribute(self.raw, attr, &mut value as *mut u64 as *mut c_void)
        }
        .checked("cuMemPoolGetAttribute")?;
        Ok(value)
    }

    /// Bytes kept reserved when idle.
    pub fn set_release_threshold(&self, bytes: u64) -> Result<()> {
        self.set_attr(
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            bytes,
        )
    }

    /// Bytes the pool holds from the driver now.
    pub fn reserved_bytes(&self) -> Result<u64> {
        if self.device.is_simulated() {
            return Ok(self.sim_reserved.load(Ordering::Relaxed));
        }
        self.get_attr(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    }

    /// Bytes of the pool handed out now.
    pub fn used_bytes(&self) -> Result<u64> {
        if self.device.is_simulated() {
            return Ok(self.sim_reserved.load(Ordering::Relaxed));
        }
        self.get_attr(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    }

    /// Returns idle memory to the driver, keeping at least `keep` bytes.
    pub fn trim_to(&self, keep: usize) -> Result<()> {
        if self.device.is_simulated() {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: the pool is live.
        unsafe { result::mem_pool::trim_to(self.raw, keep) }.checked("cuMemPoolTrimTo")
    }

    /// Allocates `bytes` ordered on `stream`. Zero bytes gives the null pointer.
    pub fn alloc_async(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        self.check_stream(stream, "cuMemAllocFromPoolAsync")?;
        match self.device.sim() {
            Some(sim) => {
                let ptr = sim.alloc("cuMemAllocFromPoolAsync", bytes)?;
                self.sim_reserved.fetch_add(bytes as u64, Ordering::Relaxed);
                Ok(ptr)
            }
            None => {
                self.bind_for(stream)?;
                // SAFETY: pool and stream are live and of this device.
                unsafe { result::mem_pool::alloc_async(self.raw, bytes, stream.raw()) }
                    .checked("cuMemAllocFromPoolAsync")
            }
        }
    }

    /// Frees `ptr` ordered on `stream`.
    ///
    /// # Safety
    /// `ptr` must come from `alloc_async` of this pool and not be freed yet.
    pub unsafe fn free_async(&self, ptr: u64, stream: &Stream) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        self.check_stream(stream, "cuMemFreeAsync")?;
        match self.device.sim() {
            Some(sim) => {
                let bytes = sim.allocation_size(ptr).unwrap_or(0);
                sim.free("cuMemFreeAsync", ptr)?;
                self.sim_reserved.fetch_sub(bytes as u64, Ordering::Relaxed);
                Ok(())
            }
            None => {
                self.bind_for(stream)?;
                result::free_async(ptr, stream.raw()).checked("cuMemFreeAsync")
            }
        }
    }

    /// Makes the device current where a stream-ordered call needs it. A created stream names its
    /// context, which the driver takes from it whatever is current (checked on an H100, driver
    /// 580, with no context and with another context current:
    /// `scripts/device/experiments/no_context_check.c`), so the hot path does not ask the driver for the
    /// current context on every call (10 to 20 ns); it makes the device current once per thread.
    /// The default streams (handles 0 and 2) mean the stream of the *current* context, so for
    /// them the device is made current on every call.
    #[inline]
    fn bind_for(&self, stream: &Stream) -> Result<()> {
        if stream.is_default() {
            self.device.bind()
        } else {
            self.device.bind_once_per_thread()
        }
    }

    fn check_stream(&self, stream: &Stream, call: &'static str) -> Result<()> {
        if stream.device() == &self.device {
            Ok(())
        } else {
            Err(CudaError::invalid(
                call,
                "the stream belongs to another device than the pool",
            ))
        }
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        if self.device.is_simulated() || !self.owned {
            return;
        }
        if self.device.bind().is_ok() {
            // Outstanding allocations must be gone; wait for their frees before destroying.
            let _ = self.device.synchronize();
            // SAFETY: the pool is live and dropped once.
            let _ = unsafe { result::mem_pool::destroy(self.raw) };
        }
    }
}
