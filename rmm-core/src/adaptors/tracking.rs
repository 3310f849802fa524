//! Tracking (RMM's `tracking_resource_adaptor`): remembers every outstanding allocation (with the
//! stack that made it, optionally), so leaks can be listed and bad frees refused.
//!
//! A free of a pointer that is not outstanding (freed already, or never allocated here) or with
//! another size than it was allocated with is refused with [`MemoryError::InvalidDeallocation`]
//! and never reaches the upstream, so a sub-allocator without a checked mode of its own (a
//! [`crate::PoolResource`] built for speed, an arena) is protected from corruption by putting one
//! of these in front of it.

use crate::error::{human_bytes, MemoryError, Result};
use crate::resource::{MemoryResource, SharedResource};
use crate::thread_index::thread_index;
use parking_lot::Mutex;
use rmm_cuda::{Stream, StreamId};
use std::backtrace::Backtrace;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One outstanding allocation.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryResource, TrackingAdaptor};
/// let device = Device::simulated(1 << 30);
/// let tracking = TrackingAdaptor::new(CudaResource::new(&device), false);
/// let stream = device.new_stream()?;
/// let ptr = tracking.allocate(512, &stream)?;
/// let live = tracking.outstanding_allocations();
/// assert_eq!((live[0].ptr, live[0].bytes), (ptr, 512));
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { tracking.deallocate(ptr, 512, &stream)? };
/// assert!(tracking.outstanding_allocations().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct AllocationRecord {
    /// Its address.
    pub ptr: u64,
    /// Its size as asked (what the free must give).
    pub bytes: usize,
    /// The stream it was allocated on.
    pub stream: StreamId,
    /// The allocating thread (a small number unique in the process).
    pub thread: u64,
    /// Where it was allocated, when the adaptor captures stacks.
    pub backtrace: Option<Arc<Backtrace>>,
}

/// Tracks what goes through it, and refuses bad frees before they reach the upstream.
///
/// ```
/// use rmm_core::{CudaResource, Device, MemoryError, MemoryResource, PoolOptions, PoolResource, TrackingAdaptor};
/// let device = Device::simulated(1 << 30);
/// // A pool without its own checks, as in release builds.
/// let options = PoolOptions { validate_deallocations: false, ..PoolOptions::sized(1 << 20, None) };
/// let tracked = TrackingAdaptor::new(PoolResource::new(CudaResource::new(&device), options)?, false);
/// let stream = device.new_stream()?;
/// let p = tracked.allocate(1000, &stream)?;
/// // SAFETY: the tracking adaptor checks the pointer and size of every free before the pool sees it.
/// let wrong_size = unsafe { tracked.deallocate(p, 4000, &stream) };
/// assert!(matches!(wrong_size, Err(MemoryError::InvalidDeallocation(_))));
/// unsafe { tracked.deallocate(p, 1000, &stream)? };
/// let twice = unsafe { tracked.deallocate(p, 1000, &stream) };
/// assert!(matches!(twice, Err(MemoryError::InvalidDeallocation(_))));
/// assert_eq!(tracked.upstream().free_bytes(), 1 << 20, "the pool saw one free only");
/// # Ok::<(), MemoryError>(())
/// ```
#[derive(Debug)]
pub struct TrackingAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
    capture_backtraces: bool,
    live: Mutex<HashMap<u64, AllocationRecord>>,
    allocated: AtomicUsize,
}

impl<U: MemoryResource> TrackingAdaptor<U> {
    /// `capture_backtraces`: record the stack of every allocation (costly; for hunting leaks).
    pub fn new(upstream: U, capture_backtraces: bool) -> Self {
        TrackingAdaptor {
            upstream,
            capture_backtraces,
            live: Mutex::new(HashMap::new()),
            allocated: AtomicUsize::new(0),
        }
    }

    /// Bytes outstanding.
    pub fn allocated_bytes(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The outstanding allocations, by address.
    pub fn outstanding_allocations(&self) -> Vec<AllocationRecord> {
        let mut all: Vec<_> = self.live.lock().values().cloned().collect();
        all.sort_unstable_by_key(|r| r.ptr);
        all
    }

    /// A readable list of the outstanding allocations (what RMM's
    /// `get_outstanding_allocations_str` prints); "no outstanding allocations" when clean.
    pub fn leak_report(&self) -> String {
        let all = self.outstanding_allocations();
        if all.is_empty() {
            return format!("{}: no outstanding allocations", self.name());
        }
        let mut out = format!(
            "{}: {} outstanding allocations, {}\n",
            self.name(),
            all.len(),
            human_bytes(all.iter().map(|r| r.bytes).sum())
        );
        for r in &all {
            let _ = writeln!(
                out,
                "  {:#x}: {} bytes on stream {:#x}, thread {}",
                r.ptr, r.bytes, r.stream.0, r.thread
            );
            if let Some(bt) = &r.backtrace {
                for line in bt.to_string().lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
        out
    }

    /// The resource the allocations come from.
    pub fn upstream(&self) -> &U {
        &self.upstream
    }
}

impl<U: MemoryResource> MemoryResource for TrackingAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        let ptr = self.upstream.allocate(bytes, stream)?;
        // Zero bytes give the null pointer, which is never outstanding (an upstream that hands
        // out a real address for zero bytes has it tracked like any other).
        if ptr != 0 {
            let record = AllocationRecord {
                ptr,
                bytes,
                stream: stream.id(),
                thread: thread_index(),
                backtrace: self
                    .capture_backtraces
                    .then(|| Arc::new(Backtrace::force_capture())),
            };
            self.live.lock().insert(ptr, record);
            self.allocated.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(ptr)
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        if ptr == 0 && bytes == 0 {
            return self.upstream.deallocate(ptr, bytes, stream);
        }
        let record = {
            let mut live = self.live.lock();
            match live.remove(&ptr) {
                Some(r) if r.bytes == bytes => r,
                Some(r) => {
                    let allocated = r.bytes;
                    live.insert(ptr, r);
                    return Err(MemoryError::InvalidDeallocation(format!(
                        "{ptr:#x} was allocated with {allocated} bytes and is freed with {bytes}; \
                         {} did not pass the free on",
                        self.name()
                    )));
                }
                None => {
                    return Err(MemoryError::InvalidDeallocation(format!(
                        "{ptr:#x} ({bytes} bytes) is not an outstanding allocation of {} \
                         (freed already, or never allocated here); it did not pass the free on",
                        self.name()
                    )))
                }
            }
        };
        if let Err(e) = self.upstream.deallocate(ptr, bytes, stream) {
            self.live.lock().insert(ptr, record);
            return Err(e);
        }
        self.allocated.fetch_sub(bytes, Ordering::Relaxed);
        Ok(())
    }

    pass_through!(device, kind, name = "tracking");
}
