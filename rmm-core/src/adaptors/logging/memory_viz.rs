//! An allocation log as a PyTorch memory snapshot: the pickled dictionary that
//! `torch.cuda.memory._dump_snapshot` writes and PyTorch's memory visualizer (`memory_viz`, and
//! `torch.cuda._memory_viz`) opens, so a run through our resources can be looked at with the
//! tools PyTorch users know.
//!
//! What goes in: `device_traces[device]` has one entry per logged event (`alloc`,
//! `free_requested` then `free_completed` for a free, `oom` for a failed allocation) with the
//! address, size, stream and time in microseconds; `segments` describes what is still allocated
//! at the end of the log, one segment per live allocation (a log of a resource's clients does
//! not see how a pool carves its upstream memory, so no segment events are invented). Frames
//! (Python stack traces in PyTorch's snapshots) are empty.

use super::record::{LogAction, LogRecord};
use crate::error::{MemoryError, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Serialize)]
struct Frame {
    filename: String,
    line: i64,
    name: String,
}

#[derive(Serialize)]
struct TraceEntry {
    action: &'static str,
    addr: u64,
    size: u64,
    stream: u64,
    time_us: i64,
    frames: Vec<Frame>,
}

#[derive(Serialize)]
struct Block {
    address: u64,
    size: u64,
    requested_size: u64,
    state: &'static str,
    frames: Vec<Frame>,
}

#[derive(Serialize)]
struct Segment {
    device: i64,
    address: u64,
    total_size: u64,
    allocated_size: u64,
    active_size: u64,
    requested_size: u64,
    stream: u64,
    segment_type: &'static str,
    is_expandable: bool,
    frames: Vec<Frame>,
    blocks: Vec<Block>,
}

#[derive(Serialize)]
struct Snapshot {
    segments: Vec<Segment>,
    device_traces: Vec<Vec<TraceEntry>>,
}

/// Microseconds of a log's `HH:MM:SS.ffffff` time of day; `None` when it is not one.
fn micros_of_day(time: &str) -> Option<i64> {
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let (secs, frac) = s.split_once('.').unwrap_or((s, "0"));
    let frac: i64 = format!("{frac:0<6}")[..6].parse().ok()?;
    Some(
        ((h.parse::<i64>().ok()? * 60 + m.parse::<i64>().ok()?) * 60 + secs.parse::<i64>().ok()?)
            * 1_000_000
            + frac,
    )
}

/// The snapshot of `records` (a log of one device's resource, as [`super::parse_log`] reads it)
/// for device number `device`, pickled.
///
/// ```
/// use rmm_core::adaptors::{memory_viz_snapshot, parse_log, LoggingAdaptor};
/// use rmm_core::{CudaResource, Device, MemoryResource};
/// use std::io::Write;
///
/// #[derive(Clone, Default)]
/// struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
/// impl Write for Buf {
///     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { self.0.lock().unwrap().extend_from_slice(b); Ok(b.len()) }
///     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
/// }
///
/// let device = Device::simulated(1 << 30);
/// let log = Buf::default();
/// let r = LoggingAdaptor::with_writer(CudaResource::new(&device), log.clone())?;
/// let stream = device.new_stream()?;
/// let p = r.allocate(1 << 20, &stream)?;
/// unsafe { r.deallocate(p, 1 << 20, &stream)? };
/// r.flush()?;
/// let records = parse_log(&log.0.lock().unwrap()[..])?;
/// let pickle = memory_viz_snapshot(&records, 0)?; // what torch.cuda.memory._dump_snapshot writes
/// std::fs::write(std::env::temp_dir().join("snapshot.pickle"), pickle)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn memory_viz_snapshot(records: &[LogRecord], device: usize) -> Result<Vec<u8>> {
    const DAY_US: i64 = 86_400_000_000;
    let mut trace = Vec::with_capacity(records.len() + records.len() / 2);
    let mut live: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let (mut last, mut days) = (None::<i64>, 0i64);
    for (k, r) in records.iter().enumerate() {
        let of_day = micros_of_day(&r.time).ok_or_else(|| {
            MemoryError::InvalidArgument(format!(
                "allocation log record {}: time {:?} is not HH:MM:SS.ffffff",
                k + 1,
                r.time
            ))
        })?;
        // A log that runs past midnight keeps counting up.
        if last.is_some_and(|l| of_day + days * DAY_US < l) {
            days += 1;
        }
        let time_us = of_day + days * DAY_US;
        last = Some(time_us);
        let entry = |action| TraceEntry {
            action,
            addr: r.ptr,
            size: r.size as u64,
            stream: r.stream,
            time_us,
            frames: Vec::new(),
        };
        match r.action {
            LogAction::Allocate => {
                live.insert(r.ptr, (r.size as u64, r.stream));
                trace.push(entry("alloc"));
            }
            LogAction::Free => {
                live.remove(&r.ptr);
                trace.push(entry("free_requested"));
                trace.push(entry("free_completed"));
            }
            LogAction::AllocateFailure => trace.push(entry("oom")),
        }
    }
    let segments = live
        .into_iter()
        .map(|(address, (size, stream))| Segment {
            device: device as i64,
            address,
            total_size: size,
            allocated_size: size,
            active_size: size,
            requested_size: size,
            stream,
            segment_type: "large",
            is_expandable: false,
            frames: Vec::new(),
            blocks: vec![Block {
                address,
                size,
                requested_size: size,
                state: "active_allocated",
                frames: Vec::new(),
            }],
        })
        .collect();
    let mut device_traces: Vec<Vec<TraceEntry>> = (0..device).map(|_| Vec::new()).collect();
    device_traces.push(trace);
    serde_pickle::to_vec(
        &Snapshot {
            segments,
            device_traces,
        },
        serde_pickle::SerOptions::new(),
    )
    .map_err(|e| MemoryError::InvalidArgument(format!("pickling the memory snapshot: {e}")))
}

/// Writes [`memory_viz_snapshot`] of `records` to `path`.
///
/// ```
/// use rmm_core::adaptors::{parse_log, write_memory_viz_snapshot};
/// let log = "Thread,Time,Action,Pointer,Size,Stream
/// 0,12:00:00.000001,allocate,0x7f00,1024,0x0
/// ";
/// let path = std::env::temp_dir().join(format!("rmm_doc_snapshot_{}.pickle", std::process::id()));
/// // Opens in PyTorch's memory visualizer (pytorch.org/memory_viz).
/// write_memory_viz_snapshot(&parse_log(log.as_bytes())?, 0, &path)?;
/// assert!(std::fs::metadata(&path)?.len() > 0);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_memory_viz_snapshot(
    records: &[LogRecord],
    device: usize,
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, memory_viz_snapshot(records, device)?)
        .map_err(|e| MemoryError::InvalidArgument(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_pickle::{HashableValue as K, Value as V};

    fn rec(time: &str, action: LogAction, ptr: u64, size: usize) -> LogRecord {
        LogRecord {
            thread: 0,
            time: time.into(),
            action,
            ptr,
            size,
            stream: 0x7,
        }
    }

    fn get<'a>(d: &'a V, key: &str) -> &'a V {
        match d {
            V::Dict(m) => &m[&K::String(key.into())],
            other => panic!("not a dict: {other:?}"),
        }
    }

    fn list(v: &V) -> &Vec<V> {
        match v {
            V::List(l) => l,
            other => panic!("not a list: {other:?}"),
        }
    }

    #[test]
    fn a_log_becomes_pytorchs_trace_and_live_segments() {
        let records = vec![
            rec("23:59:59.999990", LogAction::Allocate, 0x1000, 512),
            rec("23:59:59.999995", LogAction::Allocate, 0x2000, 256),
            rec("00:00:00.000004", LogAction::Free, 0x1000, 512),
            rec("00:00:00.000010", LogAction::AllocateFailure, 0, 1 << 40),
        ];
        let bytes = memory_viz_snapshot(&records, 1).unwrap();
        let v = serde_pickle::value_from_slice(&bytes, Default::default()).unwrap();
        let traces = list(get(&v, "device_traces"));
        assert_eq!(traces.len(), 2, "one list per device up to this one");
        assert!(list(&traces[0]).is_empty());
        let t = list(&traces[1]);
        let actions: Vec<String> = t
            .iter()
            .map(|e| match get(e, "action") {
                V::String(s) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            actions,
            ["alloc", "alloc", "free_requested", "free_completed", "oom"]
        );
        // Past midnight the time keeps growing.
        let times: Vec<i64> = t
            .iter()
            .map(|e| match get(e, "time_us") {
                V::I64(x) => *x,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert_eq!(times[2] - times[0], 14);
        // Only the 256-byte block is live at the end.
        let segs = list(get(&v, "segments"));
        assert_eq!(segs.len(), 1);
        assert_eq!(get(&segs[0], "address"), &V::I64(0x2000));
        assert_eq!(get(&segs[0], "total_size"), &V::I64(256));
        let blocks = list(get(&segs[0], "blocks"));
        assert_eq!(
            get(&blocks[0], "state"),
            &V::String("active_allocated".into())
        );
    }

    #[test]
    fn a_bad_time_is_refused_with_the_record_number() {
        let e = memory_viz_snapshot(&[rec("noon", LogAction::Allocate, 1, 1)], 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("record 1") && e.contains("noon"), "{e}");
    }
}
