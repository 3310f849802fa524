//! The conformance suite every memory resource must pass (the idea of RMM's `mr_ref_test`):
//! non-null 256-aligned pointers, zero-size requests, sizes from one byte to a gigabyte, a huge
//! request that fails with out-of-memory (no panic, no abort), live blocks that never overlap,
//! random allocate/free traces on the default and on created streams, frees on another thread,
//! several threads at once, and `is_equal` holding of every handle to the resource.
//!
//! Each check returns `Err(description)` on a violation. [`crate::conformance_tests!`] turns the
//! whole suite into `#[test]` functions for one resource.

use super::live_set::LiveSet;
use super::SplitMix64;
use crate::resource::MemoryResource;
use crate::MemoryError;
use parking_lot::Mutex;
use rmm_cuda::{Stream, ALIGNMENT};
use std::sync::Arc;

/// Sizes and limits of a conformance run, so small resources (fixed-size blocks, capped pools)
/// run the same suite.
#[derive(Debug, Clone)]
pub struct ConformanceConfig {
    /// Largest single allocation tried by the size sweep (default 1 GiB).
    pub max_size: usize,
    /// A request that must fail with out-of-memory (default 1 PiB); `None` skips that check.
    pub huge_request: Option<usize>,
    /// Steps of each random trace.
    pub random_steps: usize,
    /// Largest request of the random traces.
    pub random_max_size: usize,
    /// Bytes live at once in a random trace (the trace frees before passing it).
    pub random_max_live: usize,
    /// Threads of the concurrent check.
    pub threads: usize,
}

impl Default for ConformanceConfig {
    fn default() -> Self {
        ConformanceConfig {
            max_size: 1 << 30,
            huge_request: Some(1 << 50),
            random_steps: 2_000,
            random_max_size: 1 << 20,
            random_max_live: 256 << 20,
            threads: 4,
        }
    }
}

type Check = std::result::Result<(), String>;

fn fail<T: std::fmt::Display>(what: &str) -> impl FnOnce(T) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn check_pointer(ptr: u64, bytes: usize) -> Check {
    if bytes > 0 && ptr == 0 {
        return Err(format!("null pointer for {bytes} bytes"));
    }
    if ptr % ALIGNMENT as u64 != 0 {
        return Err(format!(
            "pointer {ptr:#x} for {bytes} bytes is not {ALIGNMENT}-byte aligned"
        ));
    }
    Ok(())
}

/// Writes `tag` into the first and last byte of the block and reads them back: proves the memory
/// is really there and really this long.
fn touch(r: &dyn MemoryResource, stream: &Stream, ptr: u64, bytes: usize, tag: u8) -> Check {
    if bytes == 0 {
        return Ok(());
    }
    let last = ptr + bytes as u64 - 1;
    // SAFETY: both bytes lie inside the live block we own.
    unsafe {
        if r.kind().host_accessible() {
            std::ptr::write_volatile(ptr as *mut u8, tag);
            std::ptr::write_volatile(last as *mut u8, tag);
            let (a, b) = (
                std::ptr::read_volatile(ptr as *const u8),
                std::ptr::read_volatile(last as *const u8),
            );
            return if a == tag && b == tag {
                Ok(())
            } else {
                Err(format!(
                    "host bytes of block {ptr:#x} did not keep their value"
                ))
            };
        }
        stream.memset(ptr, tag, 1).map_err(fail("memset"))?;
        stream.memset(last, tag, 1).map_err(fail("memset"))?;
        let mut a = [0u8];
        let mut b = [0u8];
        stream
            .copy_to_host(&mut a, ptr)
            .map_err(fail("copy to host"))?;
        stream
            .copy_to_host(&mut b, last)
            .map_err(fail("copy to host"))?;
        if a[0] != tag || b[0] != tag {
            return Err(format!(
                "block {ptr:#x} of {bytes} bytes did not keep its bytes ({} {} != {tag})",
                a[0], b[0]
            ));
        }
    }
    Ok(())
}

fn free(r: &dyn MemoryResource, ptr: u64, bytes: usize, stream: &Stream) -> Check {
    // SAFETY: callers pass only blocks they allocated from `r` and still own.
    unsafe { r.deallocate(ptr, bytes, stream) }.map_err(fail("deallocate"))
}

/// Pointers are non-null and 256-aligned for a spread of awkward sizes.
pub fn alignment(r: &dyn MemoryResource, cfg: &ConformanceConfig) -> Check {
    let stream = r.device().default_stream();
    let sizes = [
        1usize,
        3,
        255,
        256,
        257,
        1000,
        4095,
        4096,
        65_537,
        1 << 20,
        (1 << 20) + 1,
    ];
    let mut held = Vec::new();
    for &bytes in sizes.iter().filter(|&&b| b <= cfg.max_size) {
        let ptr = r.allocate(bytes, &stream).map_err(fail("allocate"))?;
        check_pointer(ptr, bytes)?;
        held.push((ptr, bytes));
    }
    let mut live = LiveSet::default();
    for &(p, b) in &held {
        live.insert(p, b)?;
    }
    for (p, b) in held {
        free(r, p, b, &stream)?;
    }
    Ok(())
}

/// Zero bytes is legal, and so is giving it back.
pub fn zero_size(r: &dyn MemoryResource, _cfg: &ConformanceConfig) -> Check {
    let stream = r.device().default_stream();
    let ptr = r.allocate(0, &stream).map_err(fail("allocate(0)"))?;
    check_pointer(ptr, 0)?;
    free(r, ptr, 0, &stream)
}

/// Sizes from one byte to `max_size`, each really usable end to end.
pub fn size_sweep(r: &dyn MemoryResource, cfg: &ConformanceConfig) -> Check {
    let stream = r.device().new_stream().map_err(fail("new stream"))?;
    let mut bytes = 1usize;
    let mut tag = 1u8;
    while bytes <= cfg.max_size {
        let ptr = r
            .allocate(bytes, &stream)
            .map_err(|e| format!("allocate({bytes}): {e}"))?;
        check_pointer(ptr, bytes)?;
        touch(r, &stream, ptr, bytes, tag)?;
        free(r, ptr, bytes, &stream)?;
        bytes *= 16;
        tag = tag.wrapping_add(1);
    }
    if cfg.max_size > 0 && !cfg.max_size.is_power_of_two() {
        let ptr = r
            .allocate(cfg.max_size, &stream)
            .map_err(fail("allocate(max_size)"))?;
        touch(r, &stream, ptr, cfg.max_size, 7)?;
        free(r, ptr, cfg.max_size, &stream)?;
    }
    stream.synchronize().map_err(fail("synchronize"))
}

/// A request far beyond any memory fails with out-of-memory.
pub fn huge_request(r: &dyn MemoryResource, cfg: &ConformanceConfig) -> Check {
    let Some(bytes) = cfg.huge_request else {
        return Ok(());
    };
    let stream = r.device().default_stream();
    match r.allocate(bytes, &stream) {
        Err(MemoryError::OutOfMemory(oom)) if oom.requested >= bytes => Ok(()),
        Err(MemoryError::OutOfMemory(oom)) => Err(format!(
            "out-of-memory error reports {} bytes requested, not {bytes}",
            oom.requested
        )),
        Err(other) => Err(format!(
            "huge request gave {other}, not an out-of-memory error"
        )),
        Ok(ptr) => {
            let _ = free(r, ptr, bytes, &stream);
            Err(format!("a request of {bytes} bytes succeeded"))
        }
    }
}

/// One random allocate/free trace on `stream`, checking alignment, overlap and contents.
fn random_trace(
    r: &dyn MemoryResource,
    cfg: &ConformanceConfig,
    stream: &Stream,
    seed: u64,
    live_set: &Mutex<LiveSet>,
) -> Check {
    let mut rng = SplitMix64::new(seed);
    let mut mine: Vec<(u64, usize, u8)> = Vec::new();
    let mut used = 0usize;
    for step in 0..cfg.random_steps {
        let bytes = 1 + rng.below(cfg.random_max_size as u64) as usize;
        let free_one =
            !mine.is_empty() && ((rng.next() & 1) == 1 || used + bytes > cfg.random_max_live);
        if free_one {
            let k = rng.below(mine.len() as u64) as usize;
            let (p, b, tag) = mine.swap_remove(k);
            if step % 16 == 0 {
                touch(r, stream, p, b, tag)?;
            }
            live_set.lock().remove(p, b);
            free(r, p, b, stream)?;
            used -= b;
        } else {
            let p = r
                .allocate(bytes, stream)
                .map_err(|e| format!("allocate({bytes}) at step {step}: {e}"))?;
            check_pointer(p, bytes)?;
            live_set.lock().insert(p, bytes)?;
            let tag = (step % 251) as u8 + 1;
            if step % 16 == 0 {
                touch(r, stream, p, bytes, tag)?;
            }
            mine.push((p, bytes, tag));
            used += bytes;
        }
    }
    for (p, b, _) in mine {
        live_set.lock().remove(p, b);
        free(r, p, b, stream)?;
    }
    stream.synchronize().map_err(fail("synchronize"))
}

/// Random traces on the default stream and on a created stream.
pub fn random_traces(r: &dyn MemoryResource, cfg: &ConformanceConfig) -> Check {
    let live = Mutex::new(LiveSet::default());
    random_trace(r, cfg, &r.device().default_stream(), 1, &live)?;
    let stream = r.device().new_stream().map_err(fail("new stream"))?;
    random_trace(r, cfg, &stream, 2, &live)
}

/// Blocks allocated on one thread and freed on another.
pub fn free_on_other_thread(r: Arc<dyn MemoryResource>, cfg: &ConformanceConfig) -> Check {
    let stream = r.device().new_stream().map_err(fail("new stream"))?;
    let mut blocks = Vec::new();
    for i in 0..64usize {
        let bytes = 1 + (i * 4099) % cfg.random_max_size.max(1);
        blocks.push((r.allocate(bytes, &stream).map_err(fail("allocate"))?, bytes));
    }
    let r2 = r.clone();
    let s2 = stream.clone();
    std::thread::spawn(move || -> Check {
        for (p, b) in blocks {
            free(&*r2, p, b, &s2)?;
        }
        Ok(())
    })
    .join()
    .map_err(|_| "the freeing thread panicked".to_string())??;
    stream.synchronize().map_err(fail("synchronize"))
}

/// Several threads, each with its own stream, run random traces at once; no block of any thread
/// may overlap a live block of another.
pub fn concurrent_threads(r: Arc<dyn MemoryResource>, cfg: &ConformanceConfig) -> Check {
    let live = Arc::new(Mutex::new(LiveSet::default()));
    let per_thread = ConformanceConfig {
        random_max_live: cfg.random_max_live / cfg.threads.max(1),
        ..cfg.clone()
    };
    let handles: Vec<_> = (0..cfg.threads)
        .map(|t| {
            let (r, live, cfg) = (r.clone(), live.clone(), per_thread.clone());
            std::thread::spawn(move || -> Check {
                let stream = r.device().new_stream().map_err(fail("new stream"))?;
                random_trace(&*r, &cfg, &stream, 100 + t as u64, &live)
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| "a worker thread panicked".to_string())??;
    }
    Ok(())
}

/// A resource is equal to itself through every handle ([`MemoryResource::is_equal`]), both ways,
/// and memory allocated through one handle is freed through another.
pub fn equal_to_itself(r: Arc<dyn MemoryResource>, _cfg: &ConformanceConfig) -> Check {
    let clone = r.clone();
    let handles: [&dyn MemoryResource; 3] = [&r, &*r, &clone];
    for a in handles {
        for b in handles {
            if !a.is_equal(b) {
                return Err(format!(
                    "{} is not equal to itself through another handle",
                    r.name()
                ));
            }
        }
    }
    let stream = r.device().default_stream();
    let ptr = clone.allocate(1000, &stream).map_err(fail("allocate"))?;
    free(&*r, ptr, 1000, &stream)
}

/// Generates one `#[test]` per conformance check for a resource.
///
/// `$setup` is an expression giving `Option<(SharedResource, ConformanceConfig)>`; `None` means
/// "cannot run here" (no GPU) and must itself have printed why (see
/// `rmm_cuda::require_gpu_from_env`).
#[macro_export]
macro_rules! conformance_tests {
    ($module:ident, $setup:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use $crate::testing::conformance as c;

            fn setup() -> Option<($crate::SharedResource, c::ConformanceConfig)> {
                $setup
            }

            #[test]
            fn alignment() {
                if let Some((r, cfg)) = setup() {
                    c::alignment(&*r, &cfg).unwrap();
                }
            }
            #[test]
            fn zero_size() {
                if let Some((r, cfg)) = setup() {
                    c::zero_size(&*r, &cfg).unwrap();
                }
            }
            #[test]
            fn size_sweep() {
                if let Some((r, cfg)) = setup() {
                    c::size_sweep(&*r, &cfg).unwrap();
                }
            }
            #[test]
            fn huge_request() {
                if let Some((r, cfg)) = setup() {
                    c::huge_request(&*r, &cfg).unwrap();
                }
            }
            #[test]
            fn random_traces() {
                if let Some((r, cfg)) = setup() {
                    c::random_traces(&*r, &cfg).unwrap();
                }
            }
            #[test]
            fn free_on_other_thread() {
                if let Some((r, cfg)) = setup() {
                    c::free_on_other_thread(r, &cfg).unwrap();
                }
            }
            #[test]
            fn concurrent_threads() {
                if let Some((r, cfg)) = setup() {
                    c::concurrent_threads(r, &cfg).unwrap();
                }
            }
            #[test]
            fn equal_to_itself() {
                if let Some((r, cfg)) = setup() {
                    c::equal_to_itself(r, &cfg).unwrap();
                }
            }
        }
    };
}
