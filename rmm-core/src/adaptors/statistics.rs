//! Statistics (RMM's `statistics_resource_adaptor`): current, peak and total bytes and
//! allocation counts, in scopes that can be pushed and popped.

use crate::error::{MemoryError, Result};
use crate::resource::{MemoryResource, SharedResource};
use parking_lot::Mutex;
use rmm_cuda::Stream;

/// One counter: the current value, its peak, and the total ever added.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, StatisticsAdaptor};
/// let device = Device::simulated(1 << 30);
/// let stats = StatisticsAdaptor::new(CudaResource::new(&device));
/// let stream = device.new_stream()?;
/// let ptr = stats.allocate(1000, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { stats.deallocate(ptr, 1000, &stream)? };
/// let bytes = stats.bytes_counter();
/// assert_eq!((bytes.value, bytes.peak, bytes.total), (0, 1000, 1000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter {
    pub value: i64,
    pub peak: i64,
    pub total: i64,
}

impl Counter {
    fn add(&mut self, n: i64) {
        self.value += n;
        self.total += n;
        self.peak = self.peak.max(self.value);
    }

    fn sub(&mut self, n: i64) {
        self.value -= n;
    }

    /// Folds a popped inner scope into this one: its peak counts on top of this scope's value
    /// at the time, its value and total add up.
    fn absorb(&mut self, inner: &Counter) {
        self.peak = self.peak.max(self.value + inner.peak);
        self.value += inner.value;
        self.total += inner.total;
    }
}

/// Bytes and allocation counts of one scope.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, StatisticsAdaptor};
/// let device = Device::simulated(1 << 30);
/// let stats = StatisticsAdaptor::new(CudaResource::new(&device));
/// let stream = device.new_stream()?;
/// let ptr = stats.allocate(256, &stream)?;
/// let s = stats.statistics();
/// assert_eq!((s.bytes.value, s.allocations.value), (256, 1));
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { stats.deallocate(ptr, 256, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statistics {
    pub bytes: Counter,
    pub allocations: Counter,
}

/// Counts what goes through it. Counts are of the bytes asked for (not rounded). A pushed scope
/// starts at zero; frees of blocks allocated before the push make its value negative, as in RMM.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, StatisticsAdaptor};
/// let device = Device::simulated(1 << 30);
/// let stats = StatisticsAdaptor::new(CudaResource::new(&device));
/// let stream = device.new_stream()?;
/// // A scope: the counters of what happens inside it alone.
/// stats.push_counters();
/// let ptr = stats.allocate(4096, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { stats.deallocate(ptr, 4096, &stream)? };
/// let inner = stats.pop_counters()?;
/// assert_eq!((inner.bytes.peak, inner.allocations.total), (4096, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StatisticsAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
    /// Innermost scope last; never empty.
    scopes: Mutex<Vec<Statistics>>,
}

impl<U: MemoryResource> StatisticsAdaptor<U> {
    pub fn new(upstream: U) -> Self {
        StatisticsAdaptor {
            upstream,
            scopes: Mutex::new(vec![Statistics::default()]),
        }
    }

    /// The innermost scope's counters.
    pub fn statistics(&self) -> Statistics {
        *self.scopes.lock().last().expect("never empty")
    }

    pub fn bytes_counter(&self) -> Counter {
        self.statistics().bytes
    }

    pub fn allocations_counter(&self) -> Counter {
        self.statistics().allocations
    }

    /// Starts a new scope with zeroed counters; returns the enclosing scope's counters.
    pub fn push_counters(&self) -> Statistics {
        let mut scopes = self.scopes.lock();
        let outer = *scopes.last().expect("never empty");
        scopes.push(Statistics::default());
        outer
    }

    /// Ends the innermost scope, folds it into the enclosing one and returns it. The outermost
    /// scope cannot be popped.
    pub fn pop_counters(&self) -> Result<Statistics> {
        let mut scopes = self.scopes.lock();
        if scopes.len() < 2 {
            return Err(MemoryError::InvalidArgument(
                "pop_counters: no pushed scope to pop".into(),
            ));
        }
        let inner = scopes.pop().expect("checked");
        let outer = scopes.last_mut().expect("checked");
        outer.bytes.absorb(&inner.bytes);
        outer.allocations.absorb(&inner.allocations);
        Ok(inner)
    }

    /// Number of scopes (1 when nothing is pushed).
    pub fn depth(&self) -> usize {
        self.scopes.lock().len()
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U: MemoryResource> MemoryResource for StatisticsAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let ptr = self.upstream.allocate(bytes, stream)?;
        let mut scopes = self.scopes.lock();
        let top = scopes.last_mut().expect("never empty");
        top.bytes.add(bytes as i64);
        top.allocations.add(1);
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        self.upstream.deallocate(ptr, bytes, stream)?;
        let mut scopes = self.scopes.lock();
        let top = scopes.last_mut().expect("never empty");
        top.bytes.sub(bytes as i64);
        top.allocations.sub(1);
        Ok(())
    }

    pass_through!(device, kind, name = "statistics");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn popping_folds_the_inner_peak_on_top_of_the_outer_value() {
        let mut outer = Counter::default();
        outer.add(100);
        let mut inner = Counter::default();
        inner.add(50);
        inner.add(30);
        inner.sub(80);
        outer.absorb(&inner);
        assert_eq!(
            outer,
            Counter {
                value: 100,
                peak: 180,
                total: 180
            }
        );
    }
}
