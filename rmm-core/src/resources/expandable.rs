//! Device memory that grows in place: one reserved address range, physical memory mapped at its
//! end as allocations come and unmapped as they are given back (CUDA virtual memory; the idea of
//! PyTorch's expandable segments). The upstream of an expandable pool
//! ([`crate::PoolResource::expandable`]): the pool's chunks follow one another, so its free
//! blocks coalesce across growth steps, and [`crate::PoolResource::release`] gives the free end
//! of the range back to the driver while live blocks stay where they are.

use super::driver_alloc_error;
use crate::error::{human_bytes, MemoryError, OutOfMemory, Result};
use crate::resource::{check_stream, MemoryResource};
use parking_lot::Mutex;
use rmm_cuda::{Device, Stream, VirtualRange};

/// The smallest step the range grows by (a multiple of every mapping granularity in use).
///
/// ```
/// assert_eq!(rmm_core::EXPANDABLE_UNIT, 32 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const EXPANDABLE_UNIT: usize = 32 << 20;

/// One reserved range of device addresses, mapped from its start up to `end`.
///
/// ```
/// use rmm_core::{Device, ExpandableResource, MemoryResource, EXPANDABLE_UNIT};
/// let device = Device::simulated(1 << 30);
/// let range = ExpandableResource::new(&device, Some(512 << 20))?;
/// let stream = device.new_stream()?;
/// let a = range.allocate(1, &stream)?;
/// let b = range.allocate(1, &stream)?;
/// assert_eq!(b, a + EXPANDABLE_UNIT as u64); // the range grows in place
/// assert_eq!(range.mapped_bytes(), 2 * EXPANDABLE_UNIT);
/// // SAFETY: allocated above with these sizes, unused; given back last first.
/// unsafe {
///     range.deallocate(b, 1, &stream)?;
///     range.deallocate(a, 1, &stream)?;
/// }
/// assert_eq!(range.mapped_bytes(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ExpandableResource {
    range: VirtualRange,
    unit: usize,
    /// Bytes mapped from the start of the range (the end of the last allocation).
    end: Mutex<usize>,
}

impl ExpandableResource {
    /// Reserves `reserve` bytes of addresses on `device` (default: the device's total memory);
    /// nothing is mapped until the first allocation.
    pub fn new(device: &Device, reserve: Option<usize>) -> Result<Self> {
        let size = match reserve {
            Some(r) => r,
            None => device.memory_info()?.total,
        };
        let range = VirtualRange::reserve(device, size)?;
        let unit = EXPANDABLE_UNIT.div_ceil(range.granularity()) * range.granularity();
        Ok(ExpandableResource {
            range,
            unit,
            end: Mutex::new(0),
        })
    }

    /// Bytes of physical memory mapped now.
    pub fn mapped_bytes(&self) -> usize {
        *self.end.lock()
    }

    /// Bytes of addresses reserved (what the range can grow to).
    pub fn reserved_bytes(&self) -> usize {
        self.range.size()
    }

    /// The first address of the range.
    pub fn base(&self) -> u64 {
        self.range.base()
    }
}

impl MemoryResource for ExpandableResource {
    /// Maps `bytes` (rounded up to the growth unit) at the end of the range.
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        check_stream(self, stream)?;
        if bytes == 0 {
            return Ok(0);
        }
        let len = bytes.div_ceil(self.unit) * self.unit;
        let mut end = self.end.lock();
        if *end + len > self.range.size() {
            return Err(OutOfMemory::new("expandable", bytes)
                .held(*end)
                .maximum(self.range.size())
                .detail(format!(
                    "the reserved range of {} is full",
                    human_bytes(self.range.size())
                ))
                .into());
        }
        self.range
            .map(*end, len)
            .map_err(|e| driver_alloc_error("expandable", self.range.device(), bytes, e))?;
        let ptr = self.range.base() + *end as u64;
        *end += len;
        Ok(ptr)
    }

    /// Unmaps the last allocation (only the end of the range can be given back), after the work
    /// queued on `stream` is done.
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        check_stream(self, stream)?;
        if ptr == 0 {
            return Ok(());
        }
        let len = bytes.div_ceil(self.unit) * self.unit;
        let mut end = self.end.lock();
        let offset = ptr.wrapping_sub(self.range.base()) as usize;
        if ptr < self.range.base() || offset + len != *end {
            return Err(MemoryError::InvalidDeallocation(format!(
                "{ptr:#x} ({bytes} bytes) is not the last allocation of the expandable range: \
                 it gives memory back from its end only"
            )));
        }
        stream.synchronize()?;
        self.range.unmap(offset, len)?;
        *end = offset;
        Ok(())
    }

    fn device(&self) -> &Device {
        self.range.device()
    }

    fn name(&self) -> String {
        "expandable".into()
    }

    fn contiguous_growth_unit(&self) -> Option<usize> {
        Some(self.unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_at_the_end_and_gives_back_from_the_end() {
        let device = Device::simulated(1 << 30);
        let r = ExpandableResource::new(&device, Some(256 << 20)).unwrap();
        let s = device.new_stream().unwrap();
        let a = r.allocate(1, &s).unwrap();
        let b = r.allocate(EXPANDABLE_UNIT + 1, &s).unwrap();
        assert_eq!(a, r.base());
        assert_eq!(b, a + EXPANDABLE_UNIT as u64, "the next allocation follows");
        assert_eq!(r.mapped_bytes(), 3 * EXPANDABLE_UNIT);
        assert_eq!(
            device.memory_info().unwrap().free,
            (1 << 30) - 3 * EXPANDABLE_UNIT
        );
        // SAFETY: allocated above with these sizes, nothing uses them.
        let e = unsafe { r.deallocate(a, 1, &s) }.unwrap_err().to_string();
        assert!(e.contains("from its end only"), "{e}");
        unsafe { r.deallocate(b, EXPANDABLE_UNIT + 1, &s).unwrap() };
        unsafe { r.deallocate(a, 1, &s).unwrap() };
        assert_eq!(r.mapped_bytes(), 0);
        assert_eq!(device.memory_info().unwrap().free, 1 << 30);
        let full = r.allocate(512 << 20, &s).unwrap_err().to_string();
        assert!(full.contains("reserved range"), "{full}");
    }

    #[test]
    fn the_device_capacity_limits_the_mappings() {
        let device = Device::simulated(64 << 20);
        let r = ExpandableResource::new(&device, Some(1 << 30)).unwrap();
        let s = device.new_stream().unwrap();
        r.allocate(EXPANDABLE_UNIT, &s).unwrap();
        r.allocate(EXPANDABLE_UNIT, &s).unwrap();
        let e = r.allocate(1, &s).unwrap_err();
        assert!(matches!(e, MemoryError::OutOfMemory(_)), "{e}");
    }
}
