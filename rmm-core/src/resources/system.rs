//! The system allocator's memory, for devices that access pageable host memory (RMM's
//! `system_memory_resource`: HMM on x86 with a recent driver, ATS on Grace Hopper).

use crate::error::{MemoryError, OutOfMemory, Result};
use crate::resource::{check_stream, MemoryKind, MemoryResource};
use rmm_cuda::ALIGNMENT;
use rmm_cuda::{Device, Stream};
use std::alloc::Layout;

/// Host memory from the system allocator, used by kernels directly where the device can read
/// and write pageable memory: no pinning, no copies, the operating system migrates or maps the
/// pages. [`SystemResource::new`] refuses a device without that ability.
///
/// ```
/// use rmm_core::{Device, MemoryResource, SystemResource};
/// // GPU 0 where it reads pageable memory (HMM or ATS); elsewhere the reason is the error.
/// let device = Device::cuda(0).unwrap_or_else(|_| Device::simulated(1 << 30));
/// match SystemResource::new(&device) {
///     Ok(system) => {
///         let stream = device.new_stream()?;
///         let ptr = system.allocate(1 << 20, &stream)?;
///         // SAFETY: allocated just above with this size, unused.
///         unsafe { system.deallocate(ptr, 1 << 20, &stream)? };
///     }
///     Err(e) => println!("{e}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SystemResource {
    device: Device,
}

impl SystemResource {
    /// The system allocator for `device`; an error saying why where the device cannot access
    /// pageable memory (`CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS` is 0).
    ///
    /// ```
    /// use rmm_core::{Device, SystemResource};
    /// // A simulated device has no HMM: the resource is refused, saying what to use instead.
    /// let e = SystemResource::new(&Device::simulated(1 << 30)).unwrap_err();
    /// assert!(e.to_string().contains("ManagedResource"));
    /// ```
    pub fn new(device: &Device) -> Result<Self> {
        if !device.pageable_memory_access()? {
            return Err(MemoryError::InvalidArgument(format!(
                "system memory: {} cannot access pageable host memory (no HMM or ATS: the device \
                 attribute PAGEABLE_MEMORY_ACCESS is 0); use ManagedResource or PinnedHostResource",
                device.id()
            )));
        }
        Ok(SystemResource {
            device: device.clone(),
        })
    }

    fn layout(bytes: usize) -> Option<Layout> {
        Layout::from_size_align(bytes, ALIGNMENT).ok()
    }
}

impl MemoryResource for SystemResource {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        if bytes == 0 {
            return Ok(0);
        }
        let oom = || MemoryError::OutOfMemory(OutOfMemory::new("system", bytes));
        let layout = Self::layout(bytes).ok_or_else(oom)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(oom());
        }
        Ok(ptr as u64)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        if ptr == 0 {
            return Ok(());
        }
        // Kernels queued on `stream` may still use the memory.
        stream.synchronize()?;
        let layout = Self::layout(bytes).expect("allocated with this layout");
        // SAFETY: the caller's contract: `ptr` came from `allocate(bytes)`.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn kind(&self) -> MemoryKind {
        MemoryKind::System
    }

    fn name(&self) -> String {
        "system".into()
    }
}
