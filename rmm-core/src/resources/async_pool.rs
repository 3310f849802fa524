//! A CUDA stream-ordered pool of the resource's own (`cuMemAllocFromPoolAsync`), or a view of
//! the device's default pool.

use super::driver_alloc_error;
use crate::error::{MemoryError, Result};
use crate::resource::{check_stream, MemoryResource};
use rmm_cuda::{Device, MemPool, MemPoolOptions, Stream};

/// How to build an [`AsyncResource`].
///
/// ```
/// use rmm_core::{AsyncResource, AsyncResourceOptions, Device};
/// let device = Device::simulated(1 << 30);
/// let options = AsyncResourceOptions {
///     initial_pool_size: Some(64 << 20),
///     maximum_pool_size: Some(256 << 20),
///     ..Default::default()
/// };
/// let pool = AsyncResource::new(&device, options)?;
/// # let _ = pool;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncResourceOptions {
    /// Bytes reserved up front (allocated once and freed back into the pool), so the first
    /// allocations do not pay for growth.
    pub initial_pool_size: Option<usize>,
    /// Bytes the pool keeps when idle rather than returning them to the driver at synchronisation
    /// points. Default: keep everything.
    pub release_threshold: Option<usize>,
    /// Hard limit on the pool's size.
    pub maximum_pool_size: Option<usize>,
}

/// The driver's stream-ordered allocator on a pool owned by this resource (RMM's
/// `cuda_async_memory_resource`). Memory freed on a stream is reused by the driver in stream order.
///
/// ```
/// use rmm_core::{AsyncResource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// // The device's default pool, shared with cuMemAllocAsync and cudarc's CudaStream::alloc.
/// let shared = AsyncResource::view_default_pool(&device)?;
/// let stream = device.new_stream()?;
/// let ptr = shared.allocate(1 << 16, &stream)?;
/// // SAFETY: allocated just above with this size; freed in stream order.
/// unsafe { shared.deallocate(ptr, 1 << 16, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AsyncResource {
    pool: MemPool,
    options: AsyncResourceOptions,
}

impl AsyncResource {
    pub fn new(device: &Device, options: AsyncResourceOptions) -> Result<Self> {
        if let (Some(init), Some(max)) = (options.initial_pool_size, options.maximum_pool_size) {
            if init > max {
                return Err(MemoryError::InvalidArgument(format!(
                    "initial pool size {init} exceeds the maximum pool size {max}"
                )));
            }
        }
        let pool = device.create_mem_pool(MemPoolOptions {
            release_threshold: options.release_threshold.map(|b| b as u64),
            maximum_size: options.maximum_pool_size,
        })?;
        if let Some(initial) = options.initial_pool_size.filter(|&b| b > 0) {
            // Reserve by allocating and freeing once; the release threshold keeps it reserved.
            let stream = device.default_stream();
            let ptr = pool
                .alloc_async(initial, &stream)
                .map_err(|e| driver_alloc_error("async", device, initial, e))?;
            // SAFETY: just allocated on this stream, unused.
            unsafe { pool.free_async(ptr, &stream)? };
            stream.synchronize()?;
        }
        Ok(AsyncResource { pool, options })
    }

    /// A view of the device's default pool (RMM's `cuda_async_view_memory_resource`): the pool
    /// `cuMemAllocAsync` and cudarc's `CudaStream::alloc` use, so our containers and theirs
    /// share one pool and its free memory. The pool's settings are left as the driver (or whoever
    /// set them) has them, and dropping the resource leaves the pool alone.
    ///
    /// ```
    /// use rmm_core::{AsyncResource, Device, MemoryResource};
    /// let device = Device::simulated(1 << 30);
    /// let view = AsyncResource::view_default_pool(&device)?;
    /// let stream = device.new_stream()?;
    /// let ptr = view.allocate(1 << 20, &stream)?;
    /// assert_eq!(view.name(), "async_view");
    /// // SAFETY: allocated just above with this size and stream.
    /// unsafe { view.deallocate(ptr, 1 << 20, &stream)? };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn view_default_pool(device: &Device) -> Result<Self> {
        Ok(AsyncResource {
            pool: MemPool::device_default(device)?,
            options: AsyncResourceOptions::default(),
        })
    }

    /// Bytes the pool holds from the driver.
    pub fn pool_size(&self) -> Result<usize> {
        Ok(self.pool.reserved_bytes()? as usize)
    }

    /// Bytes handed out now.
    pub fn used_bytes(&self) -> Result<usize> {
        Ok(self.pool.used_bytes()? as usize)
    }

    /// Returns idle memory to the driver, keeping at least `keep` bytes.
    pub fn trim_to(&self, keep: usize) -> Result<()> {
        Ok(self.pool.trim_to(keep)?)
    }

    pub fn options(&self) -> AsyncResourceOptions {
        self.options
    }
}

impl MemoryResource for AsyncResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        self.pool.alloc_async(bytes, stream).map_err(|e| {
            let mut err = driver_alloc_error(&self.name(), self.pool.device(), bytes, e);
            if let MemoryError::OutOfMemory(oom) = &mut err {
                oom.held = self.pool.reserved_bytes().ok().map(|b| b as usize);
                if let Some(max) = self.options.maximum_pool_size {
                    oom.maximum = Some(max);
                }
            }
            err
        })
    }

    unsafe fn deallocate(&self, ptr: u64, _bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        Ok(self.pool.free_async(ptr, stream)?)
    }

    fn device(&self) -> &Device {
        self.pool.device()
    }

    fn name(&self) -> String {
        if self.pool.is_view() {
            "async_view".into()
        } else {
            "async".into()
        }
    }
}
