//! Logging (RMM's `logging_resource_adaptor`): one CSV line per allocation, failure and free, for
//! post-mortems, for replaying a workload against another resource ([`replay_log`]) and for
//! PyTorch's memory visualizer ([`memory_viz_snapshot`]).

mod memory_viz;
mod record;
mod replay;

pub use memory_viz::{memory_viz_snapshot, write_memory_viz_snapshot};
pub use record::{parse_log, LogAction, LogRecord, LOG_HEADER};
pub use replay::{replay_file, replay_log, replay_log_observed, ReplayReport};

use crate::error::{MemoryError, Result};
use crate::resource::{MemoryResource, SharedResource};
use crate::thread_index::thread_index;
use parking_lot::Mutex;
use record::time_of_day;
use rmm_cuda::Stream;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

struct Sink {
    out: BufWriter<Box<dyn Write + Send>>,
    /// The first write error; reported by `flush` (an allocation does not fail because its log
    /// line could not be written).
    error: Option<io::Error>,
}

/// Logs what goes through it as CSV (`Thread,Time,Action,Pointer,Size,Stream`). Buffered; flushed
/// by [`LoggingAdaptor::flush`], after every line with auto-flush, and when dropped.
///
/// ```
/// use rmm_core::adaptors::{parse_log, LoggingAdaptor};
/// use rmm_core::{CudaResource, Device, MemoryResource};
/// let device = Device::simulated(1 << 30);
/// let path = std::env::temp_dir().join(format!("rmm_doc_log_{}.csv", std::process::id()));
/// let logged = LoggingAdaptor::new(CudaResource::new(&device), &path)?;
/// let stream = device.new_stream()?;
/// let ptr = logged.allocate(4096, &stream)?;
/// // SAFETY: allocated just above with this size, unused.
/// unsafe { logged.deallocate(ptr, 4096, &stream)? };
/// logged.flush()?;
/// let records = parse_log(std::io::BufReader::new(std::fs::File::open(&path)?))?;
/// assert_eq!(records.len(), 2); // one allocate, one free
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LoggingAdaptor<U: MemoryResource = SharedResource> {
    upstream: U,
    sink: Mutex<Sink>,
    path: Option<PathBuf>,
    auto_flush: bool,
}

impl<U: MemoryResource> fmt::Debug for LoggingAdaptor<U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoggingAdaptor")
            .field("upstream", &self.upstream)
            .field("path", &self.path)
            .finish()
    }
}

impl<U: MemoryResource> LoggingAdaptor<U> {
    /// Logs to a new file at `path` (replacing one that exists).
    pub fn new(upstream: U, path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| {
            MemoryError::InvalidArgument(format!(
                "cannot create the allocation log {}: {e}",
                path.display()
            ))
        })?;
        let mut adaptor = Self::with_writer(upstream, file)?;
        adaptor.path = Some(path.to_path_buf());
        Ok(adaptor)
    }

    /// Logs to any writer (a file, a pipe, a buffer).
    pub fn with_writer(upstream: U, writer: impl Write + Send + 'static) -> Result<Self> {
        let mut out: BufWriter<Box<dyn Write + Send>> = BufWriter::new(Box::new(writer));
        writeln!(out, "{LOG_HEADER}").map_err(|e| {
            MemoryError::InvalidArgument(format!("cannot write the allocation log header: {e}"))
        })?;
        Ok(LoggingAdaptor {
            upstream,
            sink: Mutex::new(Sink { out, error: None }),
            path: None,
            auto_flush: false,
        })
    }

    /// Flush after every line (slower; nothing is lost if the process dies).
    pub fn with_auto_flush(mut self, auto_flush: bool) -> Self {
        self.auto_flush = auto_flush;
        self
    }

    /// The log file, when logging to one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes out buffered lines; reports the first write error met since the last call.
    pub fn flush(&self) -> io::Result<()> {
        let mut sink = self.sink.lock();
        if let Some(e) = sink.error.take() {
            return Err(e);
        }
        sink.out.flush()
    }

    pub fn upstream(&self) -> &U {
        &self.upstream
    }

    fn log(&self, action: LogAction, ptr: u64, size: usize, stream: &Stream) {
        let record = LogRecord {
            thread: thread_index(),
            time: time_of_day(),
            action,
            ptr,
            size,
            stream: stream.id().0,
        };
        let mut sink = self.sink.lock();
        let mut result = writeln!(sink.out, "{record}");
        if self.auto_flush && result.is_ok() {
            result = sink.out.flush();
        }
        if let Err(e) = result {
            sink.error.get_or_insert(e);
        }
    }
}

impl<U: MemoryResource> MemoryResource for LoggingAdaptor<U> {
    fn allocate(&self, bytes: usize, stream: &Stream) -> Result<u64> {
        match self.upstream.allocate(bytes, stream) {
            Ok(ptr) => {
                self.log(LogAction::Allocate, ptr, bytes, stream);
                Ok(ptr)
            }
            Err(e) => {
                self.log(LogAction::AllocateFailure, 0, bytes, stream);
                Err(e)
            }
        }
    }

    unsafe fn deallocate(&self, ptr: u64, bytes: usize, stream: &Stream) -> Result<()> {
        self.log(LogAction::Free, ptr, bytes, stream);
        self.upstream.deallocate(ptr, bytes, stream)
    }

    pass_through!(device, kind, name = "logging");
}

impl<U: MemoryResource> Drop for LoggingAdaptor<U> {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            eprintln!(
                "rmm-core: the allocation log {} is incomplete: {e}",
                self.path
                    .as_deref()
                    .map_or("(writer)".into(), |p| p.display().to_string())
            );
        }
    }
}
