//! A simulated device: host memory with the capacity of a GPU, and streams and events that run
//! synchronously and record every ordering operation, so tests can check what was asked.

use crate::error::{CudaError, Result};
use crate::ALIGNMENT;
use parking_lot::Mutex;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// An ordering operation issued on a simulated device.
///
/// ```
/// use rmm_cuda::{Device, SimOp};
/// let device = Device::simulated(1 << 20);
/// let stream = device.new_stream()?;
/// stream.synchronize()?;
/// assert!(device.sim_ops().iter().any(|op| matches!(op, SimOp::StreamSync { .. })));
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOp {
    /// `event` recorded on `stream`.
    Record { event: u64, stream: u64 },
    /// `stream` made to wait for `event`.
    Wait { stream: u64, event: u64 },
    /// The host waited for `stream`.
    StreamSync { stream: u64 },
    /// The host waited for `event`.
    EventSync { event: u64 },
    /// The host waited for the whole device.
    DeviceSync,
    /// `bytes` at `ptr` prefetched to the device on `stream`.
    Prefetch { ptr: u64, bytes: usize, stream: u64 },
}

/// A test hook of a simulated device, called on the host thread that waits (a stream, event or
/// device synchronisation) with the wait, after it is logged: it can make the wait slow (block
/// until the test says so) or observe it. See [`crate::Device::set_sim_wait_hook`].
///
/// ```
/// use rmm_cuda::Device;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// let device = Device::simulated(1 << 20);
/// let waits = Arc::new(AtomicUsize::new(0));
/// let seen = waits.clone();
/// device.set_sim_wait_hook(Some(Arc::new(move |_op| {
///     seen.fetch_add(1, Ordering::Relaxed);
/// })));
/// device.new_stream()?.synchronize()?;
/// assert_eq!(waits.load(Ordering::Relaxed), 1);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub type SimWaitHook = Arc<dyn Fn(SimOp) + Send + Sync>;

pub(crate) struct SimDevice {
    pub(crate) index: usize,
    capacity: usize,
    used: AtomicUsize,
    live: Mutex<BTreeMap<u64, usize>>,
    ops: Mutex<Vec<SimOp>>,
    next_id: AtomicU64,
    wait_hook: Mutex<Option<SimWaitHook>>,
}

static NEXT_SIM_INDEX: AtomicUsize = AtomicUsize::new(0);

impl SimDevice {
    pub(crate) fn new(capacity: usize) -> Self {
        SimDevice {
            index: NEXT_SIM_INDEX.fetch_add(1, Ordering::Relaxed),
            capacity,
            used: AtomicUsize::new(0),
            live: Mutex::new(BTreeMap::new()),
            ops: Mutex::new(Vec::new()),
            // Stream ids start above the real driver's special handles (0 = legacy, 2 = per-thread).
            next_id: AtomicU64::new(16),
            wait_hook: Mutex::new(None),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn log(&self, op: SimOp) {
        self.ops.lock().push(op);
    }

    /// A host wait: logged, then the test hook (if any) runs on the waiting thread.
    pub(crate) fn host_wait(&self, op: SimOp) {
        self.log(op);
        let hook = self.wait_hook.lock().clone();
        if let Some(hook) = hook {
            hook(op);
        }
    }

    pub(crate) fn set_wait_hook(&self, hook: Option<SimWaitHook>) {
        *self.wait_hook.lock() = hook;
    }

    pub(crate) fn ops(&self) -> Vec<SimOp> {
        self.ops.lock().clone()
    }

    pub(crate) fn clear_ops(&self) {
        self.ops.lock().clear();
    }

    /// Takes `bytes` of host memory (256-aligned) if the simulated capacity allows.
    pub(crate) fn alloc(&self, call: &'static str, bytes: usize) -> Result<u64> {
        // Reserve capacity first, so a huge request fails without touching the host allocator.
        self.take_capacity(call, bytes)?;
        let layout = Layout::from_size_align(bytes.max(1), ALIGNMENT)
            .map_err(|e| CudaError::invalid(call, e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            return Err(CudaError::simulated_out_of_memory(
                call,
                bytes,
                self.capacity - self.used(),
            ));
        }
        self.live.lock().insert(ptr as u64, bytes);
        Ok(ptr as u64)
    }

    /// Frees what `alloc` returned; a pointer it did not return is an error, as with the driver.
    pub(crate) fn free(&self, call: &'static str, ptr: u64) -> Result<()> {
        let bytes = self.live.lock().remove(&ptr).ok_or_else(|| {
            CudaError::invalid(
                call,
                format!("{ptr:#x} is not a live allocation of this simulated device"),
            )
        })?;
        // SAFETY: `ptr` came from `alloc` with exactly this layout and is removed from `live`.
        unsafe {
            std::alloc::dealloc(
                ptr as *mut u8,
                Layout::from_size_align_unchecked(bytes.max(1), ALIGNMENT),
            )
        };
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Reserves `bytes` of address space backed by host memory (pages are touched only when
    /// used), counted against the capacity only as parts of it are mapped (`map_capacity`).
    pub(crate) fn reserve(&self, call: &'static str, bytes: usize) -> Result<u64> {
        let layout = Layout::from_size_align(bytes.max(1), ALIGNMENT)
            .map_err(|e| CudaError::invalid(call, e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(CudaError::simulated_out_of_memory(call, bytes, 0));
        }
        self.live.lock().insert(ptr as u64, bytes);
        Ok(ptr as u64)
    }

    /// Gives back what `reserve` returned.
    pub(crate) fn unreserve(&self, call: &'static str, ptr: u64) -> Result<()> {
        let bytes =
            self.live.lock().remove(&ptr).ok_or_else(|| {
                CudaError::invalid(call, format!("{ptr:#x} is not a reserved range"))
            })?;
        // SAFETY: `ptr` came from `reserve` with exactly this layout.
        unsafe {
            std::alloc::dealloc(
                ptr as *mut u8,
                Layout::from_size_align_unchecked(bytes.max(1), ALIGNMENT),
            )
        };
        Ok(())
    }

    /// Takes `bytes` of the capacity (an allocation, or a mapping into a reserved range).
    pub(crate) fn take_capacity(&self, call: &'static str, bytes: usize) -> Result<()> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let free = self.capacity - used;
            if bytes > free {
                return Err(CudaError::simulated_out_of_memory(call, bytes, free));
            }
            match self.used.compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Gives back capacity taken by `take_capacity`.
    pub(crate) fn return_capacity(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Size of a live allocation, if `ptr` is one.
    pub(crate) fn allocation_size(&self, ptr: u64) -> Option<usize> {
        self.live.lock().get(&ptr).copied()
    }

    /// Checks that `[ptr, ptr + bytes)` lies inside one live allocation (catches wild copies).
    pub(crate) fn check_range(&self, call: &'static str, ptr: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let live = self.live.lock();
        let inside = live
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&base, &len)| ptr + bytes as u64 <= base + len as u64);
        if inside {
            Ok(())
        } else {
            Err(CudaError::invalid(
                call,
                format!("{bytes} bytes at {ptr:#x} are not inside a live allocation"),
            ))
        }
    }
}

impl Drop for SimDevice {
    fn drop(&mut self) {
        for (ptr, bytes) in std::mem::take(self.live.get_mut()) {
            // SAFETY: every entry came from `alloc` with this layout.
            unsafe {
                std::alloc::dealloc(
                    ptr as *mut u8,
                    Layout::from_size_align_unchecked(bytes.max(1), ALIGNMENT),
                )
            };
        }
    }
}
