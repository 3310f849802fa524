//! CUDA virtual memory: an address range reserved once, with physical memory mapped into it and
//! unmapped again piece by piece (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`). What grows a buffer or a pool in place: new
//! memory lands right after the old, so nothing has to move. On the simulated device the range is
//! host memory and a mapping takes from the device's capacity.

use crate::device::Device;
use crate::error::{Checked, CudaError, Result};
use crate::DeviceId;
use cudarc::driver::sys;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// A reserved range of device addresses and the pieces of physical memory mapped into it.
///
/// ```
/// use rmm_cuda::{Device, VirtualRange};
/// let device = Device::simulated(1 << 30);
/// let range = VirtualRange::reserve(&device, 256 << 20)?; // addresses only
/// let g = range.granularity();
/// range.map(0, 4 * g)?; // physical memory at the start
/// range.map(4 * g, 4 * g)?; // more right after it: the range grows in place
/// assert_eq!(range.mapped_bytes(), 8 * g);
/// // SAFETY: nothing uses the mapped memory.
/// unsafe { range.unmap(4 * g, 4 * g)? };
/// assert_eq!(range.mapped_bytes(), 4 * g);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub struct VirtualRange {
    device: Device,
    base: u64,
    size: usize,
    granularity: usize,
    /// Mapped pieces by offset: (length, physical handle; 0 on the simulated device).
    pieces: Mutex<BTreeMap<usize, (usize, u64)>>,
}

impl std::fmt::Debug for VirtualRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualRange")
            .field("base", &format_args!("{:#x}", self.base))
            .field("size", &self.size)
            .field("mapped", &self.mapped_bytes())
            .finish()
    }
}

/// The allocation properties of device memory of `ordinal`.
fn device_props(ordinal: i32) -> sys::CUmemAllocationProp {
    // SAFETY: an all-zero CUmemAllocationProp is valid (no flags, no metadata).
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    prop
}

impl VirtualRange {
    /// Reserves at least `size` bytes of addresses on `device` (rounded up to the mapping
    /// granularity); nothing is mapped yet.
    pub fn reserve(device: &Device, size: usize) -> Result<VirtualRange> {
        let (base, size, granularity) = match device.id() {
            DeviceId::Simulated(_) => {
                const SIM_GRANULARITY: usize = 2 << 20;
                let size = size.max(1).div_ceil(SIM_GRANULARITY) * SIM_GRANULARITY;
                let sim = device.sim().expect("a simulated device");
                (
                    sim.reserve("cuMemAddressReserve", size)?,
                    size,
                    SIM_GRANULARITY,
                )
            }
            DeviceId::Cuda(ordinal) => {
                device.bind()?;
                let prop = device_props(ordinal as i32);
                let mut granularity = 0usize;
                // SAFETY: `prop` describes device memory; the out-pointer is valid.
                unsafe {
                    sys::cuMemGetAllocationGranularity(
                        &mut granularity,
                        &prop,
                        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
                    )
                    .result()
                    .checked("cuMemGetAllocationGranularity")?
                };
                let size = size.max(1).div_ceil(granularity) * granularity;
                let mut base = 0;
                // SAFETY: reserves addresses only.
                unsafe {
                    sys::cuMemAddressReserve(&mut base, size, 0, 0, 0)
                        .result()
                        .checked("cuMemAddressReserve")?
                };
                (base, size, granularity)
            }
        };
        Ok(VirtualRange {
            device: device.clone(),
            base,
            size,
            granularity,
            pieces: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The first address of the range.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes of addresses reserved.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Offsets and lengths of mappings are multiples of this.
    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// Bytes mapped now.
    pub fn mapped_bytes(&self) -> usize {
        self.pieces.lock().values().map(|p| p.0).sum()
    }

    fn check_piece(&self, call: &'static str, offset: usize, len: usize) -> Result<()> {
        if len == 0 || offset % self.granularity != 0 || len % self.granularity != 0 {
            return Err(CudaError::invalid(
                call,
                format!(
                    "offset {offset} and length {len} must be non-zero multiples of {}",
                    self.granularity
                ),
            ));
        }
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(CudaError::invalid(
                call,
                format!(
                    "{len} bytes at offset {offset} pass the end of the {} reserved",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// Maps `len` bytes of new physical memory at `offset` (both multiples of the granularity,
    /// the place not mapped yet), readable and writable by the device. Out of device memory is
    /// the driver's out-of-memory error.
    pub fn map(&self, offset: usize, len: usize) -> Result<()> {
        self.check_piece("cuMemMap", offset, len)?;
        let mut pieces = self.pieces.lock();
        let overlaps = pieces
            .range(..offset + len)
            .next_back()
            .is_some_and(|(&o, &(l, _))| o + l > offset);
        if overlaps {
            return Err(CudaError::invalid(
                "cuMemMap",
                format!("offset {offset} is already mapped"),
            ));
        }
        let handle = match self.device.id() {
            DeviceId::Simulated(_) => {
                self.device
                    .sim()
                    .expect("a simulated device")
                    .take_capacity("cuMemCreate", len)?;
                0
            }
            DeviceId::Cuda(ordinal) => {
                self.device.bind()?;
                let prop = device_props(ordinal as i32);
                let ptr = self.base + offset as u64;
                let mut handle = 0;
                // SAFETY: `prop` describes device memory of this device; the out-pointer is valid.
                unsafe { sys::cuMemCreate(&mut handle, len, &prop, 0).result() }
                    .checked("cuMemCreate")?;
                // SAFETY: [ptr, ptr + len) lies in the reservation and is not mapped.
                let mapped =
                    unsafe { sys::cuMemMap(ptr, len, 0, handle, 0).result() }.checked("cuMemMap");
                if let Err(e) = mapped {
                    // SAFETY: the handle was created above and is not mapped.
                    unsafe { sys::cuMemRelease(handle) };
                    return Err(e);
                }
                let access = sys::CUmemAccessDesc {
                    location: prop.location,
                    flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                };
                // SAFETY: the range was just mapped.
                let granted = unsafe { sys::cuMemSetAccess(ptr, len, &access, 1).result() }
                    .checked("cuMemSetAccess");
                if let Err(e) = granted {
                    // SAFETY: mapped and created above, unused.
                    unsafe {
                        sys::cuMemUnmap(ptr, len);
                        sys::cuMemRelease(handle);
                    }
                    return Err(e);
                }
                handle
            }
        };
        pieces.insert(offset, (len, handle));
        Ok(())
    }

    /// Unmaps the pieces that [`VirtualRange::map`] mapped at exactly `[offset, offset + len)`
    /// (one or more whole pieces) and gives their physical memory back to the driver.
    ///
    /// # Safety
    /// No work may still use the memory (synchronize the streams that used it first).
    pub unsafe fn unmap(&self, offset: usize, len: usize) -> Result<()> {
        self.check_piece("cuMemUnmap", offset, len)?;
        let mut pieces = self.pieces.lock();
        let inside: Vec<(usize, usize, u64)> = pieces
            .range(offset..offset + len)
            .map(|(&o, &(l, h))| (o, l, h))
            .collect();
        let covered: usize = inside.iter().map(|p| p.1).sum();
        let whole = inside.first().is_some_and(|p| p.0 == offset)
            && inside.iter().all(|p| p.0 + p.1 <= offset + len)
            && covered == len;
        if !whole {
            return Err(CudaError::invalid(
                "cuMemUnmap",
                format!(
                    "[{offset}, {}) is not made of whole mapped pieces",
                    offset + len
                ),
            ));
        }
        for (o, l, h) in inside {
            self.unmap_piece(o, l, h)?;
            pieces.remove(&o);
        }
        Ok(())
    }

    fn unmap_piece(&self, offset: usize, len: usize, handle: u64) -> Result<()> {
        match self.device.sim() {
            Some(sim) => {
                sim.return_capacity(len);
                Ok(())
            }
            None => {
                self.device.bind()?;
                // SAFETY: the piece is mapped with this handle; the caller vouches it is unused.
                unsafe {
                    sys::cuMemUnmap(self.base + offset as u64, len)
                        .result()
                        .checked("cuMemUnmap")?;
                    sys::cuMemRelease(handle).result().checked("cuMemRelease")
                }
            }
        }
    }
}

impl Drop for VirtualRange {
    fn drop(&mut self) {
        let _ = self.device.bind();
        for (o, (l, h)) in std::mem::take(self.pieces.get_mut()) {
            if let Err(e) = self.unmap_piece(o, l, h) {
                eprintln!("rmm-cuda: unmapping a virtual memory piece failed: {e}");
            }
        }
        let freed = match self.device.sim() {
            Some(sim) => sim.unreserve("cuMemAddressFree", self.base),
            // SAFETY: the range was reserved by this value and nothing is mapped any more.
            None => unsafe { sys::cuMemAddressFree(self.base, self.size) }
                .result()
                .checked("cuMemAddressFree"),
        };
        if let Err(e) = freed {
            eprintln!("rmm-cuda: freeing a reserved address range failed: {e}");
        }
    }
}
