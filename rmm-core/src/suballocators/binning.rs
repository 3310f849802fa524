//! Binning (RMM's `binning_memory_resource`): requests up to a bin's size go to that bin's
//! resource (by default a fixed-size resource of blocks of that size), larger ones to the
//! upstream. A request goes to the smallest bin that holds it.

use crate::error::{human_bytes, MemoryError, Result};
use crate::resource::{aligned_size, MemoryKind, MemoryResource, SharedResource};
use crate::suballocators::fixed_size::FixedSizeResource;
use rmm_cuda::{Device, Stream};
use std::fmt;

/// Blocks each default (fixed-size) bin takes from the upstream at a time, as in RMM.
///
/// ```
/// assert!(rmm_core::DEFAULT_BIN_BLOCKS > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const DEFAULT_BIN_BLOCKS: usize = 128;

enum BinResource<U: MemoryResource> {
    Fixed(Box<FixedSizeResource<U>>),
    Custom(SharedResource),
}

struct Bin<U: MemoryResource> {
    size: usize,
    resource: BinResource<U>,
}

/// Where a request goes (an enum rather than `&dyn`, so default bins are called directly).
enum Target<'a, U: MemoryResource> {
    Fixed(&'a FixedSizeResource<U>),
    Custom(&'a SharedResource),
    Upstream(&'a U),
}

/// Size bins in front of the upstream `U`. `U` is cloned into every default bin, so it should be a
/// shared handle (`Arc<...>`, [`SharedResource`]) or a resource without state of its own.
///
/// ```
/// use rmm_core::{BinningResource, CudaResource, Device, MemoryResource, PoolOptions, PoolResource};
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 30);
/// let pool = Arc::new(PoolResource::new(CudaResource::new(&device), PoolOptions::sized(64 << 20, None))?);
/// // Bins of 256 KiB .. 4 MiB; larger requests go to the pool.
/// let bins = BinningResource::with_range(pool, 18, 22)?;
/// let stream = device.new_stream()?;
/// let small = bins.allocate(100 << 10, &stream)?;
/// let large = bins.allocate(16 << 20, &stream)?;
/// // SAFETY: allocated just above with these sizes, unused.
/// unsafe {
///     bins.deallocate(small, 100 << 10, &stream)?;
///     bins.deallocate(large, 16 << 20, &stream)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BinningResource<U: MemoryResource + Clone = SharedResource> {
    upstream: U,
    /// Sorted by size.
    bins: Vec<Bin<U>>,
    /// `Some(e)` when the bins are 2^e, 2^(e+1), ... with none missing (as [`Self::with_range`]
    /// makes them): a request's bin is then computed from its size, not searched (the exit of a
    /// search is a branch that random sizes mispredict).
    first_power: Option<u32>,
}

impl<U: MemoryResource + Clone> fmt::Debug for BinningResource<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BinningResource")
            .field("upstream", &self.upstream.name())
            .field("bins", &self.bin_sizes())
            .finish()
    }
}

impl<U: MemoryResource + Clone> BinningResource<U> {
    /// No bins yet: everything goes to the upstream until bins are added.
    pub fn new(upstream: U) -> Self {
        BinningResource {
            upstream,
            bins: Vec::new(),
            first_power: None,
        }
    }

    /// Fixed-size bins of 2^`min_exponent` .. 2^`max_exponent` bytes (RMM's range constructor;
    /// e.g. 18..=22 for 256 KiB to 4 MiB).
    pub fn with_range(upstream: U, min_exponent: u32, max_exponent: u32) -> Result<Self> {
        if min_exponent > max_exponent || max_exponent >= usize::BITS - 1 {
            return Err(MemoryError::InvalidArgument(format!(
                "bin exponents {min_exponent}..={max_exponent} are not a valid range"
            )));
        }
        let mut r = Self::new(upstream);
        for e in min_exponent..=max_exponent {
            r.add_bin(1 << e, None)?;
        }
        Ok(r)
    }

    /// Adds a bin for requests up to `size` bytes (rounded up to 256), served by `resource`, or by
    /// a new fixed-size resource over the upstream when `None`.
    pub fn add_bin(&mut self, size: usize, resource: Option<SharedResource>) -> Result<()> {
        let size = aligned_size(size);
        if size == 0 {
            return Err(MemoryError::InvalidArgument(
                "a bin needs a non-zero size".into(),
            ));
        }
        if self.bins.iter().any(|b| b.size == size) {
            return Err(MemoryError::InvalidArgument(format!(
                "a bin of {} exists already",
                human_bytes(size)
            )));
        }
        let resource = match resource {
            Some(r) => {
                if r.device() != self.upstream.device() {
                    return Err(MemoryError::InvalidArgument(format!(
                        "bin resource {} is on {}, the upstream on {}",
                        r.name(),
                        r.device().id(),
                        self.upstream.device().id()
                    )));
                }
                BinResource::Custom(r)
            }
            None => BinResource::Fixed(Box::new(FixedSizeResource::new(
                self.upstream.clone(),
                size,
                DEFAULT_BIN_BLOCKS,
            )?)),
        };
        let at = self.bins.partition_point(|b| b.size < size);
        self.bins.insert(at, Bin { size, resource });
        self.first_power = self.bins.first().and_then(|first| {
            let consecutive = self
                .bins
                .iter()
                .enumerate()
                .all(|(i, b)| first.size.checked_shl(i as u32) == Some(b.size));
            (first.size.is_power_of_two() && consecutive).then(|| first.size.trailing_zeros())
        });
        Ok(())
    }

    /// The bin sizes, ascending.
    pub fn bin_sizes(&self) -> Vec<usize> {
        self.bins.iter().map(|b| b.size).collect()
    }

    /// The upstream resource.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    /// The smallest bin that holds `bytes` (at least 1), if any.
    #[inline]
    fn bin_of(&self, bytes: usize) -> Option<&Bin<U>> {
        // Past the largest bin (the last), none, without a scan.
        if self.bins.last().is_none_or(|b| bytes > b.size) {
            return None;
        }
        match self.first_power {
            Some(first) => {
                // 2^power is the smallest power of two at least `bytes`.
                let power = usize::BITS - (bytes - 1).leading_zeros();
                self.bins.get(power.saturating_sub(first) as usize)
            }
            // Few bins: a scan beats a binary search.
            None => self.bins.iter().find(|b| bytes <= b.size),
        }
    }

    /// The resource that serves `bytes`.
    #[inline]
    fn target(&self, bytes: usize) -> Target<'_, U> {
        match self.bin_of(bytes) {
            Some(Bin {
                resource: BinResource::Fixed(r),
                ..
            }) => Target::Fixed(r),
            Some(Bin {
                resource: BinResource::Custom(r),
                ..
            }) => Target::Custom(r),
            None => Target::Upstream(&self.upstream),
        }
    }
}

impl<U: MemoryResource + Clone> MemoryResource for BinningResource<U> {
    #[inline]
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        match self.target(bytes) {
            Target::Fixed(r) => r.allocate(bytes, stream),
            Target::Custom(r) => r.allocate(bytes, stream),
            Target::Upstream(r) => r.allocate(bytes, stream),
        }
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match self.target(bytes) {
            Target::Fixed(r) => r.deallocate(ptr, bytes, stream),
            Target::Custom(r) => r.deallocate(ptr, bytes, stream),
            Target::Upstream(r) => r.deallocate(ptr, bytes, stream),
        }
    }

    fn device(&self) -> &Device {
        self.upstream.device()
    }

    fn kind(&self) -> MemoryKind {
        self.upstream.kind()
    }

    fn name(&self) -> String {
        format!("binning({})", self.upstream.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CudaResource, StatisticsAdaptor};
    use std::sync::Arc;

    /// A request goes to the smallest bin that holds it, past the largest to the upstream, and
    /// a bin added later (larger than all) takes what went upstream before.
    #[test]
    fn requests_go_to_the_smallest_bin_that_holds_them() {
        let device = Device::simulated(1 << 30);
        let upstream = Arc::new(StatisticsAdaptor::new(CudaResource::new(&device)));
        let small = Arc::new(StatisticsAdaptor::new(CudaResource::new(&device)));
        let large = Arc::new(StatisticsAdaptor::new(CudaResource::new(&device)));
        let mut binning = BinningResource::new(upstream.clone());
        binning.add_bin(4096, Some(small.clone())).unwrap();
        let s = device.new_stream().unwrap();
        let served = |bytes: usize, binning: &BinningResource<_>| {
            let counts = |r: &StatisticsAdaptor<CudaResource>| r.statistics().allocations.total;
            let before = [counts(&upstream), counts(&small), counts(&large)];
            let p = binning.allocate(bytes, &s).unwrap();
            let after = [counts(&upstream), counts(&small), counts(&large)];
            // SAFETY: allocated just above with this size, unused.
            unsafe { binning.deallocate(p, bytes, &s).unwrap() };
            ["upstream", "small", "large"][(0..3).find(|&i| after[i] > before[i]).unwrap()]
        };
        assert_eq!(served(100, &binning), "small");
        assert_eq!(served(4096, &binning), "small");
        assert_eq!(served(4097, &binning), "upstream");
        binning.add_bin(1 << 20, Some(large.clone())).unwrap();
        assert_eq!(served(4097, &binning), "large");
        assert_eq!(served(1 << 20, &binning), "large");
        assert_eq!(served((1 << 20) + 1, &binning), "upstream");
    }

    /// The computed bin of consecutive powers of two is the one a scan finds, and other bin sets
    /// (a gap, a size that is no power of two) are scanned.
    #[test]
    fn a_computed_bin_is_the_smallest_that_holds_the_request() {
        let device = Device::simulated(1 << 30);
        let scan = |b: &BinningResource<CudaResource>, bytes: usize| {
            b.bins
                .iter()
                .find(|bin| bytes <= bin.size)
                .map(|bin| bin.size)
        };
        let sizes: Vec<usize> = (0..=24)
            .flat_map(|e| [(1usize << e) - 1, 1 << e, (1 << e) + 1, 3 << e.max(1) >> 1])
            .filter(|&s| s > 0)
            .collect();
        let ranged = BinningResource::with_range(CudaResource::new(&device), 10, 20).unwrap();
        assert_eq!(ranged.first_power, Some(10));
        let mut gap = BinningResource::new(CudaResource::new(&device));
        for size in [1 << 12, 1 << 14] {
            gap.add_bin(size, None).unwrap();
        }
        let mut odd = BinningResource::with_range(CudaResource::new(&device), 12, 14).unwrap();
        odd.add_bin(3 << 14, None).unwrap();
        assert_eq!((gap.first_power, odd.first_power), (None, None));
        for b in [&ranged, &gap, &odd] {
            for &bytes in &sizes {
                assert_eq!(
                    b.bin_of(bytes).map(|bin| bin.size),
                    scan(b, bytes),
                    "{bytes}"
                );
            }
        }
    }
}
