//! The recorders of a run's device memory, in front of its resource: the timeline of
//! `--memory-timeline` and the allocation log of `--memory-snapshot` and `--allocation-log`, and
//! the files they become.

use crate::io::StagedFile;
use crate::{Error, Result};
use rmm_core::adaptors::{parse_log, write_memory_viz_snapshot, LoggingAdaptor, TimelineAdaptor};
use rmm_core::SharedResource;
use std::path::Path;
use std::sync::Arc;

/// The timeline recorder of `--memory-timeline`, in front of the run's resource.
pub type Recorder = Arc<TimelineAdaptor<SharedResource>>;

/// The allocation log, kept in memory until the run ends.
#[derive(Clone, Default)]
pub(crate) struct LogBuffer(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `--memory-snapshot` and `--allocation-log` need at the end: the logging adaptor (to
/// flush) and its buffer.
pub struct AllocationLog {
    pub(crate) adaptor: Arc<LoggingAdaptor<SharedResource>>,
    pub(crate) buffer: LogBuffer,
}

impl AllocationLog {
    /// A logging adaptor over `resource` writing into a new buffer.
    pub(crate) fn over(resource: SharedResource) -> Result<Self> {
        let buffer = LogBuffer::default();
        let adaptor = Arc::new(
            LoggingAdaptor::with_writer(resource, buffer.clone())
                .map_err(|e| Error::Device(format!("the allocation log: {e}")))?,
        );
        Ok(AllocationLog { adaptor, buffer })
    }

    /// The log's CSV so far, and the error of writing `what` to `path`.
    fn contents<'a>(
        &self,
        path: &'a Path,
        what: &'static str,
    ) -> Result<(Vec<u8>, impl Fn(String) -> Error + 'a)> {
        let err = move |e: String| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write the {what}: {e}"),
        };
        self.adaptor.flush().map_err(|e| err(e.to_string()))?;
        Ok((self.buffer.0.lock().clone(), err))
    }

    /// Writes the run's allocations as CSV (RMM's logging format), under a temporary name to
    /// be moved into place with the output.
    pub fn write_csv(&self, path: &Path) -> Result<StagedFile> {
        let (log, err) = self.contents(path, "allocation log")?;
        let staged = StagedFile::new(path);
        std::fs::write(staged.path(), log).map_err(|e| err(e.to_string()))?;
        Ok(staged)
    }

    /// Writes the run's allocations as a PyTorch memory snapshot, under a temporary name to be
    /// moved into place with the output.
    pub fn write_snapshot(&self, path: &Path) -> Result<StagedFile> {
        let (log, err) = self.contents(path, "memory snapshot")?;
        let records = parse_log(&log[..]).map_err(|e| err(e.to_string()))?;
        let staged = StagedFile::new(path);
        write_memory_viz_snapshot(&records, 0, staged.path()).map_err(|e| err(e.to_string()))?;
        Ok(staged)
    }
}

/// A GPU's memory recorders, where the run asked for them.
#[derive(Default)]
pub struct MemoryRecorders {
    pub timeline: Option<Recorder>,
    pub log: Option<AllocationLog>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--memory-snapshot`'s path on the simulated device: the in-memory log of a logging
    /// adaptor becomes a pickle with the allocations in order and the live one as a segment.
    #[test]
    fn the_snapshot_log_holds_every_event_of_the_run() {
        use rmm_core::MemoryResource;
        let device = rmm_core::Device::simulated(1 << 30);
        let upstream: SharedResource = Arc::new(rmm_core::CudaResource::new(&device));
        let log = AllocationLog::over(upstream).unwrap();
        let adaptor = log.adaptor.clone();
        let stream = device.new_stream().unwrap();
        let a = adaptor.allocate(4096, &stream).unwrap();
        let b = adaptor.allocate(1 << 20, &stream).unwrap();
        unsafe { adaptor.deallocate(a, 4096, &stream).unwrap() };
        let dir = std::env::temp_dir().join(format!("scpipe-snap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.pickle");
        log.write_snapshot(&path).unwrap().commit().unwrap();
        let v: serde_pickle::Value = serde_pickle::value_from_reader(
            std::fs::File::open(&path).unwrap(),
            Default::default(),
        )
        .unwrap();
        let text = format!("{v:?}");
        for part in [
            "alloc",
            "free_completed",
            "active_allocated",
            &format!("{b}"),
        ] {
            assert!(text.contains(part), "{part} missing");
        }
        unsafe { adaptor.deallocate(b, 1 << 20, &stream).unwrap() };
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
