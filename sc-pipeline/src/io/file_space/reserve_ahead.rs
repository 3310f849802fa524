//! An output file's pages reserved before its data exists. On tmpfs most of the time of writing
//! a large h5ad is fallocate(2) allocating (and zeroing) its pages, one thread at a time per file
//! (see [`super::parallel_fill`]). A GPU run knows a bound on its output's size as soon as it
//! knows its input's, so it creates the output then and reserves that bound on a thread of its
//! own (beside the input's read when the cells are split across GPUs and the write is on the
//! critical path, after it on one GPU, see `run::execute`); the fills later copy into pages already
//! there and reserve only what lies beyond the bound. What the finished file does not use is
//! given back. `SCPIPE_RESERVE_WRITE=0` turns both reservations off.
//!
//! The reservation lies beyond the file's end (`FALLOC_FL_KEEP_SIZE`) from offset 0: HDF5 places
//! the datasets one after another from the start of the file, so wherever they land within the
//! bound, their pages are there.

use super::system::HEADROOM;
use super::system::{fallocate, fallocate_if_supported, free_bytes, switched_on, traced};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Files whose first `bytes` are reserved (the reservation has ended), for [`reserved_bytes`].
static RESERVED: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());

/// Reservations smaller than this are not worth a thread (smaller in tests, to spare the disk).
const MIN_BYTES: u64 = if cfg!(test) { 8 << 20 } else { 64 << 20 };

/// Bytes reserved per fallocate call: a dropped reservation stops within one step (about 0.1 s
/// on tmpfs), rather than going on allocating tens of GB for a file being removed.
const STEP: u64 = 1 << 30;

/// The first bytes of `path` reserved ahead (0 where none were, or the reservation has not
/// ended).
pub(crate) fn reserved_bytes(path: &Path) -> u64 {
    let reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
    reserved
        .iter()
        .find(|(p, _)| p == path)
        .map_or(0, |&(_, bytes)| bytes)
}

/// The first bytes of a file being reserved, or reserved. Dropped, it stops reserving and
/// forgets the reservation (the pages reserved so far stay the file's until
/// [`ReservedAhead::give_back_beyond_end`] or the file's removal).
pub struct ReservedAhead {
    path: PathBuf,
    bytes: u64,
    reserving: Option<JoinHandle<bool>>,
    /// Tells the reserving thread to stop at its next step.
    cancel: Arc<AtomicBool>,
}

impl ReservedAhead {
    /// Starts reserving the first `bytes` of the file at `path` on a thread of its own. Best
    /// effort: `None` when there is too little to matter, when `SCPIPE_RESERVE_WRITE=0`, when the
    /// file system lacks the room, or when its pages would be host memory (tmpfs) and `memory`
    /// (the host's available bytes) is not at least twice `bytes` (the input is in host memory
    /// meanwhile).
    pub(crate) fn start(path: &Path, bytes: u64, memory: Option<u64>) -> Option<Self> {
        let room = free_bytes(path)?;
        let memory_ok = !holds_pages_in_memory(path) || memory.is_some_and(|m| m / 2 >= bytes);
        let wanted = bytes >= MIN_BYTES
            && switched_on("SCPIPE_RESERVE_WRITE")
            && room >= bytes + HEADROOM
            && memory_ok;
        if !wanted {
            return None;
        }
        let file = std::fs::OpenOptions::new().write(true).open(path).ok()?;
        let cancel = Arc::new(AtomicBool::new(false));
        let cancelled = cancel.clone();
        let reserving = std::thread::Builder::new()
            .name("h5ad-reserve".into())
            .spawn(move || {
                (0..bytes).step_by(STEP as usize).all(|offset| {
                    !cancelled.load(Ordering::Relaxed)
                        && reserve_beyond_end(&file, offset, STEP.min(bytes - offset))
                })
            })
            .ok()?;
        Some(ReservedAhead {
            path: path.to_path_buf(),
            bytes,
            reserving: Some(reserving),
            cancel,
        })
    }

    /// Waits for the reservation to end (while fallocate runs, every page fault on a tmpfs file
    /// waits on its lock), then lets the fills of this file skip what it reserved.
    pub(crate) fn wait(&mut self) {
        let Some(h) = self.reserving.take() else {
            return;
        };
        if h.join().unwrap_or(false) {
            let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
            reserved.push((self.path.clone(), self.bytes));
        }
    }

    /// Gives back what lies beyond the end of the finished (closed) file.
    pub(crate) fn give_back_beyond_end(mut self) -> std::io::Result<()> {
        self.wait();
        let what = || {
            let bytes = self.bytes;
            format!("reserved ahead {bytes} bytes; what lay beyond the end given back in")
        };
        traced(what, || release_beyond_end(&self.path))
    }
}

impl Drop for ReservedAhead {
    fn drop(&mut self) {
        // Stopped and waited for: it would go on reserving for a file being removed (its own
        // descriptor keeps the pages until it ends).
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(h) = self.reserving.take() {
            let _ = h.join();
        }
        let mut reserved = RESERVED.lock().unwrap_or_else(|p| p.into_inner());
        reserved.retain(|(p, _)| p != &self.path);
    }
}

/// Reserves `[offset, offset + len)` of `file` beyond its end (its size unchanged); false when
/// the file system refused.
fn reserve_beyond_end(file: &std::fs::File, offset: u64, len: u64) -> bool {
    fallocate(file, libc::FALLOC_FL_KEEP_SIZE, offset, len).is_ok()
}

/// Gives back the blocks of the file at `path` that lie beyond its end.
fn release_beyond_end(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let meta = file.metadata()?;
    // Whatever lies beyond the end is within the file's allocated bytes past it.
    let (end, allocated) = (meta.len(), meta.blocks() * 512);
    if allocated == 0 {
        return Ok(());
    }
    fallocate_if_supported(
        &file,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        end,
        allocated,
    )?;
    // Some file systems (ext4) punch nothing past the end but free it on a truncation, even to
    // the same length (on tmpfs the punch has freed it already).
    file.set_len(end)
}

/// Whether the file system holding `path` keeps its files in host memory (tmpfs, ramfs).
fn holds_pages_in_memory(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    /// ramfs's `f_type` (libc names tmpfs's, not this one).
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` is written by statfs before it is read.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let kind = unsafe { st.assume_init() }.f_type;
    kind == libc::TMPFS_MAGIC || kind == RAMFS_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The temporary directory's file system, and tmpfs where there is one.
    fn dirs(name: &str) -> Vec<PathBuf> {
        let mut dirs = vec![std::env::temp_dir()];
        if Path::new("/dev/shm").is_dir() {
            dirs.push("/dev/shm".into());
        }
        dirs.into_iter()
            .map(|d| d.join(format!("reserve-ahead-{}-{name}", std::process::id())))
            .filter(|d| std::fs::create_dir_all(d).is_ok())
            .collect()
    }

    #[test]
    fn space_reserved_ahead_is_covered_then_given_back_beyond_the_end() {
        for dir in dirs("back") {
            let path = dir.join("f.bin");
            std::fs::write(&path, vec![1u8; 5000]).unwrap();
            let bytes = 2 * MIN_BYTES;
            let mut ahead = ReservedAhead::start(&path, bytes, Some(u64::MAX))
                .expect("room for twice the smallest reservation");
            ahead.wait();
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                5000,
                "the end stays"
            );
            assert_eq!(reserved_bytes(&path), bytes);
            ahead.give_back_beyond_end().unwrap();
            assert_eq!(reserved_bytes(&path), 0, "forgotten once given back");
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 5000]);
            assert!(
                meta.blocks() * 512 < bytes / 2,
                "the reservation was given back: {} bytes held",
                meta.blocks() * 512
            );
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn too_little_no_room_or_no_memory_reserves_nothing() {
        for dir in dirs("none") {
            let path = dir.join("f.bin");
            std::fs::write(&path, b"x").unwrap();
            assert!(ReservedAhead::start(&path, 1000, Some(u64::MAX)).is_none());
            assert!(ReservedAhead::start(&path, u64::MAX / 4, Some(u64::MAX)).is_none());
            assert!(ReservedAhead::start(&dir.join("missing"), MIN_BYTES, None).is_none());
            if holds_pages_in_memory(&path) {
                assert!(ReservedAhead::start(&path, MIN_BYTES, Some(MIN_BYTES)).is_none());
                assert!(ReservedAhead::start(&path, MIN_BYTES, None).is_none());
            }
            // Dropped while reserving: nothing is left registered.
            drop(ReservedAhead::start(&path, MIN_BYTES, Some(u64::MAX)));
            assert_eq!(reserved_bytes(&path), 0);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
