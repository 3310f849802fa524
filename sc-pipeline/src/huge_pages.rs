//! The `scpipe` process's host allocator: the system allocator, with transparent huge pages asked
//! for on large arrays.
//!
//! A run moves tens of gigabytes through new host arrays (the input's X, the results downloaded
//! or stacked from the GPUs). With 4 KiB pages the kernel takes a page fault and zeroes a page for
//! every 4 KiB first written, and unmaps as many pages when the array is freed. On the H100 hosts,
//! 16 threads copy into fresh memory at 15.8 GB/s with 4 KiB pages and at 32.6 GB/s with 2 MiB
//! pages, and freeing 8 GiB takes 0.27 s against 0.02 s (`scripts/device/experiments/fault_bench.c`).
//! Where transparent huge pages are set to `madvise` (the usual default), only memory marked with
//! `madvise(MADV_HUGEPAGE)` gets them: this allocator marks every allocation of at least
//! [`LARGE_BYTES`]. `SCPIPE_HUGE_PAGES=0` turns it off; where the kernel has no transparent huge
//! pages the advice is refused and changes nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// Allocations at least this large are marked (glibc maps them on their own, so the advice
/// covers no other allocation's memory, and a partly used 2 MiB page wastes at most 3%).
pub const LARGE_BYTES: usize = 64 << 20;

const UNKNOWN: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The system allocator, asking for transparent huge pages on allocations of at least
/// [`LARGE_BYTES`] unless `SCPIPE_HUGE_PAGES=0`. Install it with
/// `#[global_allocator] static A: sc_pipeline::huge_pages::HugePageAllocator = HugePageAllocator;`
/// (the `scpipe` binary does).
pub struct HugePageAllocator;

/// Whether the advice is on: read from `SCPIPE_HUGE_PAGES` once, without allocating (this runs
/// inside the allocator).
fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            // SAFETY: a NUL-terminated name; the value, if any, is read before this returns.
            let value = unsafe { libc::getenv(c"SCPIPE_HUGE_PAGES".as_ptr()) };
            // SAFETY: getenv returned a NUL-terminated string when not null.
            let off =
                !value.is_null() && unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes() == b"0";
            STATE.store(if off { OFF } else { ON }, Ordering::Relaxed);
            !off
        }
    }
}

/// Marks the whole pages inside `len` bytes at `ptr` for transparent huge pages (best effort:
/// a refusal only means 4 KiB pages).
fn advise(ptr: *mut u8, len: usize) {
    if ptr.is_null() || len < LARGE_BYTES || !enabled() {
        return;
    }
    const PAGE: usize = 4096;
    let start = (ptr as usize).next_multiple_of(PAGE);
    let end = (ptr as usize + len) / PAGE * PAGE;
    if end > start {
        // SAFETY: the range lies inside memory this process just allocated; MADV_HUGEPAGE only
        // changes how later faults in it are served, never its contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

// SAFETY: every call goes to `System` with the same arguments; `advise` never touches the memory.
unsafe impl GlobalAlloc for HugePageAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        advise(p, layout.size());
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Fresh maps are zero already: the kernel zeroes each page (huge or not) on first touch.
        let p = System.alloc_zeroed(layout);
        advise(p, layout.size());
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        advise(p, new_size);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping of /proc/self/smaps that holds `addr`.
    fn vm_flags_at(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[test]
    fn large_allocations_are_marked_for_huge_pages_and_hold_their_values() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        let layout = Layout::from_size_align(LARGE_BYTES + 12_345, 64).unwrap();
        // SAFETY: a non-zero layout; the memory is written before it is read and freed once.
        unsafe {
            let p = HugePageAllocator.alloc(layout);
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 7, layout.size());
            assert_eq!(*p.add(layout.size() - 1), 7);
            let middle = p as usize + layout.size() / 2;
            let flags = vm_flags_at(middle).expect("the allocation is in /proc/self/smaps");
            if thp.contains('[') && !thp.contains("[never]") && enabled() {
                assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
            }
            let q = HugePageAllocator.realloc(p, layout, 2 * layout.size());
            assert!(!q.is_null());
            assert_eq!(*q.add(layout.size() - 1), 7);
            HugePageAllocator.dealloc(q, Layout::from_size_align(2 * layout.size(), 64).unwrap());
            let small = Layout::from_size_align(100, 8).unwrap();
            let z = HugePageAllocator.alloc_zeroed(small);
            assert!(std::slice::from_raw_parts(z, 100).iter().all(|&b| b == 0));
            HugePageAllocator.dealloc(z, small);
        }
    }
}
