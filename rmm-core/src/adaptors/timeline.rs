//! Memory over time: every allocation and deallocation through the adaptor appends a point
//! (seconds since the adaptor was made, live bytes), and counts and the peak are kept. With a
//! free-space probe (e.g. a pool's `free_bytes` and `largest_free_block`), the free space is
//! sampled at every event too (what the resource holds and its largest free block over time)
//! and kept for the peak, which gives the fragmentation at the peak
//! (`1 - largest free block / free bytes`).
//!
//! ```
//! use rmm_core::adaptors::TimelineAdaptor;
//! use rmm_core::{CudaResource, Device, DeviceBuffer};
//! use std::sync::Arc;
//!
//! let device = Device::simulated(1 << 30);
//! let timeline = Arc::new(TimelineAdaptor::new(CudaResource::new(&device)));
//! let stream = device.new_stream().unwrap();
//! let a = DeviceBuffer::with_resource(1000, &stream, timeline.clone()).unwrap();
//! drop(a);
//! let t = timeline.timeline();
//! assert_eq!((t.allocations, t.peak_bytes, t.points.len()), (1, 1000, 2));
//! ```

use crate::error::Result;
use crate::resource::MemoryResource;
use parking_lot::Mutex;
use rmm_cuda::Stream;
use std::time::Instant;

/// Free space of a resource at one moment.
///
/// ```
/// use rmm_core::adaptors::FreeSpace;
/// let space = FreeSpace { free_bytes: 100, largest_free_block: 75 };
/// assert!((space.fragmentation() - 0.25).abs() < 1e-12);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreeSpace {
    pub free_bytes: usize,
    pub largest_free_block: usize,
}

impl FreeSpace {
    /// `1 - largest free block / free bytes` (0 when nothing is free: no fragmentation to see).
    pub fn fragmentation(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block as f64 / self.free_bytes as f64
        }
    }
}

/// One sample: seconds since the adaptor was made (or reset), the live bytes after the event,
/// and the upstream's free space then (with a probe).
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, TimelineAdaptor};
/// let device = Device::simulated(1 << 30);
/// let recorder = TimelineAdaptor::new(CudaResource::new(&device));
/// let stream = device.new_stream()?;
/// let ptr = recorder.allocate(1 << 20, &stream)?;
/// let last = recorder.timeline().points.last().cloned().expect("a point per event");
/// assert_eq!(last.live_bytes, 1 << 20);
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { recorder.deallocate(ptr, 1 << 20, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelinePoint {
    pub seconds: f64,
    pub live_bytes: u64,
    pub free_space: Option<FreeSpace>,
}

/// What the adaptor recorded.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, TimelineAdaptor};
/// let device = Device::simulated(1 << 30);
/// let recorder = TimelineAdaptor::new(CudaResource::new(&device));
/// let stream = device.new_stream()?;
/// let a = recorder.allocate(1 << 20, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { recorder.deallocate(a, 1 << 20, &stream)? };
/// let t = recorder.timeline();
/// assert_eq!((t.peak_bytes, t.allocations), (1 << 20, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    pub points: Vec<TimelinePoint>,
    pub peak_bytes: u64,
    /// Allocations made (deallocations are not counted).
    pub allocations: u64,
    /// Bytes of all allocations made.
    pub allocated_bytes: u64,
    /// The probe's reading when the peak was last raised (none without a probe).
    pub free_space_at_peak: Option<FreeSpace>,
}

type Probe = Box<dyn Fn() -> FreeSpace + Send + Sync>;

/// Records live bytes over time through an upstream resource.
///
/// ```
/// use rmm_core::adaptors::FreeSpace;
/// use rmm_core::{CudaResource, Device, MemoryResource, PoolOptions, PoolResource, TimelineAdaptor};
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 30);
/// let pool = Arc::new(PoolResource::new(CudaResource::new(&device), PoolOptions::sized(64 << 20, None))?);
/// let probe = pool.clone();
/// // With a probe, every point also records the pool's free space and largest free block.
/// let recorder = TimelineAdaptor::new(pool).with_probe(move || FreeSpace {
///     free_bytes: probe.free_bytes(),
///     largest_free_block: probe.largest_free_block(),
/// });
/// let stream = device.new_stream()?;
/// let ptr = recorder.allocate(1 << 20, &stream)?;
/// assert!(recorder.timeline().free_space_at_peak.is_some());
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { recorder.deallocate(ptr, 1 << 20, &stream)? };
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TimelineAdaptor<U> {
    upstream: U,
    probe: Option<Probe>,
    state: Mutex<(Instant, u64, Timeline)>,
}

impl<U: MemoryResource> TimelineAdaptor<U> {
    pub fn new(upstream: U) -> Self {
        TimelineAdaptor {
            upstream,
            probe: None,
            state: Mutex::new((Instant::now(), 0, Timeline::default())),
        }
    }

    /// Samples `probe` (the upstream's free space) at every event.
    pub fn with_probe(mut self, probe: impl Fn() -> FreeSpace + Send + Sync + 'static) -> Self {
        self.probe = Some(Box::new(probe));
        self
    }

    /// A copy of what was recorded so far.
    pub fn timeline(&self) -> Timeline {
        self.state.lock().2.clone()
    }

    /// When the recording's time 0 was: the adaptor's creation, or its last [`reset`].
    ///
    /// [`reset`]: TimelineAdaptor::reset
    pub fn started(&self) -> Instant {
        self.state.lock().0
    }

    /// Starts a new recording at time 0; the live bytes carry over (as the first point).
    pub fn reset(&self) {
        let mut s = self.state.lock();
        let live = s.1;
        *s = (
            Instant::now(),
            live,
            Timeline {
                points: vec![TimelinePoint {
                    seconds: 0.0,
                    live_bytes: live,
                    free_space: self.probe.as_ref().map(|p| p()),
                }],
                peak_bytes: live,
                ..Timeline::default()
            },
        );
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U> std::fmt::Debug for TimelineAdaptor<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimelineAdaptor").finish_non_exhaustive()
    }
}

impl<U: MemoryResource> MemoryResource for TimelineAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let ptr = self.upstream.allocate(bytes, stream)?;
        let mut s = self.state.lock();
        let (start, live, t) = &mut *s;
        *live += bytes as u64;
        t.allocations += 1;
        t.allocated_bytes += bytes as u64;
        let free_space = self.probe.as_ref().map(|p| p());
        t.points.push(TimelinePoint {
            seconds: start.elapsed().as_secs_f64(),
            live_bytes: *live,
            free_space,
        });
        if *live > t.peak_bytes {
            t.peak_bytes = *live;
            t.free_space_at_peak = free_space;
        }
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        self.upstream.deallocate(ptr, bytes, stream)?;
        let mut s = self.state.lock();
        let (start, live, t) = &mut *s;
        *live = live.saturating_sub(bytes as u64);
        t.points.push(TimelinePoint {
            seconds: start.elapsed().as_secs_f64(),
            live_bytes: *live,
            free_space: self.probe.as_ref().map(|p| p()),
        });
        Ok(())
    }

    pass_through!(device, kind, name = "timeline");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CudaResource, Device, DeviceBuffer, PoolOptions, PoolResource};
    use std::sync::Arc;

    #[test]
    fn records_points_peak_and_the_pools_free_space_at_the_peak() {
        let device = Device::simulated(1 << 30);
        let stream = device.new_stream().unwrap();
        let pool = Arc::new(
            PoolResource::new(
                CudaResource::new(&device),
                PoolOptions::sized(1 << 20, None),
            )
            .unwrap(),
        );
        let p = pool.clone();
        let t = Arc::new(
            TimelineAdaptor::new(pool.clone()).with_probe(move || FreeSpace {
                free_bytes: p.free_bytes(),
                largest_free_block: p.largest_free_block(),
            }),
        );
        let a = DeviceBuffer::with_resource(256 << 10, &stream, t.clone()).unwrap();
        let b = DeviceBuffer::with_resource(256 << 10, &stream, t.clone()).unwrap();
        let c = DeviceBuffer::with_resource(256 << 10, &stream, t.clone()).unwrap();
        drop(b); // a hole between a and c
        let tl = t.timeline();
        assert_eq!(tl.allocations, 3);
        assert_eq!(tl.allocated_bytes, 3 * (256 << 10));
        assert_eq!(tl.peak_bytes, 3 * (256 << 10));
        let lives: Vec<u64> = tl.points.iter().map(|p| p.live_bytes).collect();
        assert_eq!(lives, vec![256 << 10, 512 << 10, 768 << 10, 512 << 10]);
        assert!(tl.points.windows(2).all(|w| w[0].seconds <= w[1].seconds));
        // Sampled at every event: after the hole was made, 512 KiB free in two blocks.
        let last = tl.points.last().unwrap().free_space.unwrap();
        assert_eq!(
            (last.free_bytes, last.largest_free_block),
            (512 << 10, 256 << 10)
        );
        // At the peak, 256 KiB of the 1 MiB pool were free in one block.
        let at_peak = tl.free_space_at_peak.unwrap();
        assert_eq!(at_peak.free_bytes, 256 << 10);
        assert_eq!(at_peak.fragmentation(), 0.0);
        // Now two free blocks (the hole and the tail) of 256 KiB: fragmentation 0.5.
        let now = FreeSpace {
            free_bytes: pool.free_bytes(),
            largest_free_block: pool.largest_free_block(),
        };
        assert_eq!(now.fragmentation(), 0.5);
        t.reset();
        assert_eq!(t.timeline().points.len(), 1);
        assert_eq!(t.timeline().peak_bytes, 512 << 10);
        drop((a, c));
    }
}
