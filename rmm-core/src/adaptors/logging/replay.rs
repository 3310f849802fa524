//! Replaying an allocation log against a resource: the same requests, sizes and streams, in the
//! order the log lists them, so a workload captured once can be measured on any resource.

use super::record::{parse_log, LogAction, LogRecord};
use crate::error::{MemoryError, Result};
use crate::resource::MemoryResource;
use rmm_cuda::{Stream, StreamId};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a replay did.
///
/// ```
/// use rmm_core::adaptors::{parse_log, replay_log};
/// use rmm_core::{CudaResource, Device};
/// let log = "Thread,Time,Action,Pointer,Size,Stream
/// 0,12:00:00.000001,allocate,0x7f00,1024,0x0
/// 0,12:00:00.000002,free,0x7f00,1024,0x0
/// ";
/// let device = Device::simulated(1 << 30);
/// let report = replay_log(&parse_log(log.as_bytes())?, &CudaResource::new(&device))?;
/// assert_eq!((report.allocations, report.frees, report.peak_bytes), (1, 1, 1024));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Allocations made (and frees done) by the replay.
    pub allocations: usize,
    pub frees: usize,
    /// Failed allocations the log recorded (not replayed).
    pub logged_failures: usize,
    /// Allocations the log recorded as successful that failed here with out-of-memory.
    pub failed_allocations: usize,
    /// Frees of pointers the replay does not hold (allocated before the log began, or failed
    /// here): skipped.
    pub unmatched_frees: usize,
    /// Blocks the log never freed; the replay frees them at the end.
    pub left_live: usize,
    /// Most bytes live at once during the replay.
    pub peak_bytes: usize,
    /// Time spent in allocate and deallocate calls.
    pub elapsed: Duration,
}

/// Streams for the log's stream handles: the legacy and per-thread default streams as such,
/// one new stream for every other handle.
fn streams_for(
    records: &[LogRecord],
    resource: &dyn MemoryResource,
) -> Result<HashMap<u64, Stream>> {
    let device = resource.device();
    let mut streams = HashMap::new();
    for r in records {
        if streams.contains_key(&r.stream) {
            continue;
        }
        let s = match StreamId(r.stream) {
            StreamId::LEGACY_DEFAULT => device.default_stream(),
            StreamId::PER_THREAD_DEFAULT => device.per_thread_stream(),
            _ => device.new_stream()?,
        };
        streams.insert(r.stream, s);
    }
    Ok(streams)
}

/// Replays `records` against `resource`. Out-of-memory during the replay is counted, not fatal;
/// other errors stop it (after freeing what it holds).
///
/// ```
/// use rmm_core::adaptors::{parse_log, replay_log};
/// use rmm_core::{CudaResource, Device, PoolOptions, PoolResource};
/// let log = "Thread,Time,Action,Pointer,Size,Stream
/// 0,12:00:00.000001,allocate,0x7f00,1024,0x0
/// 0,12:00:00.000002,allocate,0x8f00,4096,0x0
/// 0,12:00:00.000003,free,0x7f00,1024,0x0
/// ";
/// let device = Device::simulated(1 << 30);
/// // The same workload on another resource (the block left live is freed at the end).
/// let pool = PoolResource::new(CudaResource::new(&device), PoolOptions::sized(1 << 20, None))?;
/// let report = replay_log(&parse_log(log.as_bytes())?, &pool)?;
/// assert_eq!((report.allocations, report.left_live), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_log(records: &[LogRecord], resource: &dyn MemoryResource) -> Result<ReplayReport> {
    replay_log_observed(records, resource, |_| {})
}

/// [`replay_log`], calling `observe` with the bytes live after every allocation and free (to
/// look at the resource at chosen moments, e.g. its fragmentation at the peak).
///
/// ```
/// use rmm_core::adaptors::{parse_log, replay_log_observed};
/// use rmm_core::{CudaResource, Device};
/// let log = "Thread,Time,Action,Pointer,Size,Stream
/// 0,12:00:00.000001,allocate,0x7f00,1024,0x0
/// 0,12:00:00.000002,free,0x7f00,1024,0x0
/// ";
/// let device = Device::simulated(1 << 30);
/// let mut live = Vec::new();
/// replay_log_observed(&parse_log(log.as_bytes())?, &CudaResource::new(&device), |b| live.push(b))?;
/// assert_eq!(live, vec![1024, 0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_log_observed(
    records: &[LogRecord],
    resource: &dyn MemoryResource,
    mut observe: impl FnMut(usize),
) -> Result<ReplayReport> {
    let streams = streams_for(records, resource)?;
    let mut report = ReplayReport::default();
    // Logged pointer -> (replayed pointer, size, stream handle).
    let mut live: HashMap<u64, (u64, usize, u64)> = HashMap::new();
    let mut live_bytes = 0usize;
    let mut failure = None;
    for r in records {
        let stream = &streams[&r.stream];
        match r.action {
            LogAction::AllocateFailure => report.logged_failures += 1,
            LogAction::Allocate => {
                let start = Instant::now();
                let result = resource.allocate(r.size, stream);
                report.elapsed += start.elapsed();
                match result {
                    Ok(ptr) => {
                        report.allocations += 1;
                        if r.size > 0 {
                            live.insert(r.ptr, (ptr, r.size, r.stream));
                            live_bytes += r.size;
                            report.peak_bytes = report.peak_bytes.max(live_bytes);
                        }
                        observe(live_bytes);
                    }
                    Err(MemoryError::OutOfMemory(_)) => report.failed_allocations += 1,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            LogAction::Free => match live.remove(&r.ptr) {
                Some((ptr, size, _)) => {
                    let start = Instant::now();
                    // SAFETY: allocated by this replay from `resource` with this size.
                    let result = unsafe { resource.deallocate(ptr, size, stream) };
                    report.elapsed += start.elapsed();
                    if let Err(e) = result {
                        failure = Some(e);
                        break;
                    }
                    report.frees += 1;
                    live_bytes -= size;
                    observe(live_bytes);
                }
                None if r.size == 0 => report.frees += 1,
                None => report.unmatched_frees += 1,
            },
        }
    }
    report.left_live = live.len();
    for (_, (ptr, size, handle)) in live {
        // SAFETY: allocated by this replay from `resource` with this size.
        let freed = unsafe { resource.deallocate(ptr, size, &streams[&handle]) };
        if let Err(e) = freed {
            failure.get_or_insert(e);
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Reads the log at `path` and replays it against `resource`.
///
/// ```
/// use rmm_core::adaptors::replay_file;
/// use rmm_core::{CudaResource, Device};
/// let path = std::env::temp_dir().join(format!("rmm_doc_replay_{}.csv", std::process::id()));
/// std::fs::write(&path, "Thread,Time,Action,Pointer,Size,Stream\n0,12:00:00.000001,allocate,0x7f00,64,0x0\n")?;
/// let device = Device::simulated(1 << 30);
/// let report = replay_file(&path, &CudaResource::new(&device))?;
/// assert_eq!(report.left_live, 1);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn replay_file(path: impl AsRef<Path>, resource: &dyn MemoryResource) -> Result<ReplayReport> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|e| {
        MemoryError::InvalidArgument(format!(
            "cannot open the allocation log {}: {e}",
            path.display()
        ))
    })?;
    replay_log(&parse_log(BufReader::new(file))?, resource)
}
