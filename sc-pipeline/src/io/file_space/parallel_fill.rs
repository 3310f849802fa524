//! Large datasets copied into the file by several threads. HDF5 reserves a dataset's place
//! (contiguous, allocated when created, never filled) and the bytes are copied into a shared
//! memory map of that place, piece by piece on rayon's threads. HDF5 writes from one thread,
//! and Linux serialises write(2) calls to one file (the inode lock: writing the pieces with
//! pwrite from several threads was measured no faster), while page faults on a shared map run
//! in parallel; the copy and the page faults (tmpfs pages, a VM's memory on first use) are most
//! of the time of writing a large h5ad.
//!
//! The dataset's place is reserved by fallocate(2) before the copy. On tmpfs, allocating the
//! pages inside the copy's faults is serialised: 4.2 to 5.6 GB/s on the H100 hosts whatever the
//! threads (4 to 32), where fallocate reserves at 8.5 to 11 GB/s and 16 threads then copy into
//! the reserved pages at 22 to 29 GB/s (`scripts/device/experiments/tmpfs_write_bench.py`). Reserving in
//! steps with the copy following behind was no faster than no reservation (and slower in a whole
//! run): while fallocate runs, every page fault on the file takes the inode's spinlock. The
//! reservation also turns a file system that runs out of room into an error (ENOSPC) rather than
//! a SIGBUS in the copy. `SCPIPE_RESERVE_WRITE=0` leaves it out.

use super::reserve_ahead::reserved_bytes;
use super::system::{fallocate_if_supported, free_bytes, switched_on, tracing_writes, HEADROOM};
use crate::{Error, Result};
use rayon::prelude::*;
use std::path::Path;

/// Datasets of at least this many bytes are filled in parallel. Tests use a smaller size, so
/// they take the parallel path without writing hundreds of megabytes to a CI machine's disk.
pub(crate) const PARALLEL_FILL_BYTES: usize = if cfg!(test) { 8 << 20 } else { 64 << 20 };

/// Bytes one thread copies at a time.
const PIECE: usize = 4 << 20;

/// Bytes written per call where the file system has no shared maps.
const UNMAPPED_PIECE: usize = 64 << 20;

/// Whether a dataset of `len` bytes goes through [`fill`]: large enough, not turned off by
/// `SCPIPE_PARALLEL_WRITE=0`, and the file system has room for it. A write through a map that
/// finds the disk full kills the process (SIGBUS) where write(2) would return an error, so
/// without the room HDF5 writes it and reports the error.
pub(crate) fn wanted(path: &Path, len: usize) -> bool {
    len >= PARALLEL_FILL_BYTES
        && switched_on("SCPIPE_PARALLEL_WRITE")
        && free_bytes(path).is_some_and(|free| {
            // Space this run reserved ahead for the file counts as room (it is taken already).
            free + reserved_bytes(path) >= len as u64 + HEADROOM
        })
}

/// Copies `bytes` to `offset` of the file at `path` (the place HDF5 reserved for a dataset),
/// growing the file to hold them.
pub(crate) fn fill(path: &Path, offset: u64, bytes: &[u8]) -> Result<()> {
    fill_with(path, offset, bytes.len(), |start, dst| {
        let src = &bytes[start..start + dst.len()];
        let mut copy = || {
            dst.par_chunks_mut(PIECE)
                .zip(src.par_chunks(PIECE))
                .for_each(|(d, s)| d.copy_from_slice(s))
        };
        match writers() {
            Some(pool) => pool.install(copy),
            None => copy(),
        }
        Ok(())
    })
}

/// Writes `len` bytes at `offset` of the file at `path` (the place HDF5 reserved for a
/// dataset), growing the file to hold them: `copy(start, dst)` puts the source's bytes
/// `start..start + dst.len()` into `dst`. It is called once, on a shared map of the whole place
/// (reserved first, see the module's documentation), or, where the file system has no shared
/// maps, piece by piece on a buffer that one thread then writes.
pub(crate) fn fill_with(
    path: &Path,
    offset: u64,
    len: usize,
    copy: impl Fn(usize, &mut [u8]) -> Result<()>,
) -> Result<()> {
    let err = |what: &str, e: std::io::Error| Error::File {
        path: path.to_path_buf(),
        message: format!("{what}: {e}"),
    };
    if len == 0 {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| err("opening the file to fill a dataset", e))?;
    let end = offset + len as u64;
    // The file must reach `end` before it is mapped. Writing the place's last byte grows it
    // where it is shorter and never shrinks it, as setting its length could: HDF5 and other
    // fills may be writing further on meanwhile (see `H5adWrite`). HDF5 sets the file's final
    // length (at least `end`: the place is inside the space it allocated) when it closes it.
    {
        use std::os::unix::fs::FileExt;
        file.write_all_at(&[0], end - 1)
            .map_err(|e| err("growing the file", e))?;
    }
    let page = page_size();
    let start = offset - offset % page;
    let lead = (offset - start) as usize;
    // SAFETY: the file is this run's staged output, which no other process writes; the map
    // covers only bytes inside the file's length and is dropped before this returns.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len(lead + len)
            .map_mut(&file)
    };
    let Ok(mut map) = map else {
        // A file system without shared maps: one thread writes the bytes.
        return write_in_pieces(&file, offset, len, UNMAPPED_PIECE, &copy).map_err(|e| match e {
            Unmapped::Io(e) => err("writing a dataset", e),
            Unmapped::Source(e) => e,
        });
    };
    let t0 = std::time::Instant::now();
    // What this run reserved ahead for the file (see `reserve_ahead`) is not reserved again.
    let from = reserved_bytes(path).clamp(offset, end);
    if switched_on("SCPIPE_RESERVE_WRITE") && from < end {
        reserve(&file, from, (end - from) as usize)
            .map_err(|e| err("reserving the dataset's place in the file", e))?;
    }
    let t1 = std::time::Instant::now();
    // The pages reach the file as write(2)'s would: the kernel writes them back (no fsync
    // either way).
    let copied = copy(0, &mut map[lead..]);
    if tracing_writes() {
        static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let first = *FIRST.get_or_init(|| t0);
        eprintln!(
            "fill {len} bytes at {offset}: from +{:.3} s, reserve {:.3} s, copy {:.3} s",
            (t0 - first).as_secs_f64(),
            (t1 - t0).as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
    }
    copied
}

/// Why [`write_in_pieces`] stopped: the write, or the source.
enum Unmapped {
    Io(std::io::Error),
    Source(Error),
}

/// `len` bytes from `copy` written at `offset` of `file` a piece of at most `piece` bytes at a
/// time, through one buffer.
fn write_in_pieces(
    file: &std::fs::File,
    offset: u64,
    len: usize,
    piece: usize,
    copy: &impl Fn(usize, &mut [u8]) -> Result<()>,
) -> std::result::Result<(), Unmapped> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len.min(piece)];
    for first in (0..len).step_by(piece) {
        let part = &mut buf[..piece.min(len - first)];
        copy(first, part).map_err(Unmapped::Source)?;
        file.write_all_at(part, offset + first as u64)
            .map_err(Unmapped::Io)?;
    }
    Ok(())
}

/// Allocates the file's blocks (tmpfs: its pages) for `[offset, offset + len)`. A file system
/// that cannot reserve leaves it to the copy's page faults.
fn reserve(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<()> {
    fallocate_if_supported(file, 0, offset, len as u64)
}

/// The fills' own threads (half the cores, at most 32): the output is written while harmony and
/// neighbors run, whose host copies use rayon's global pool and must not queue behind a fill.
/// On the 64-core 4-GPU hosts, 32 threads wrote X and `.raw` in 1.69-1.72 s against 1.88-2.00
/// s with 16 (end to end 0.13-0.19 s less on 4 GPUs, the same on one); hosts of up to 32 cores
/// are unchanged. `None` (the global pool then) where the threads could not be started.
pub(crate) fn writers() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        rayon::ThreadPoolBuilder::new()
            .num_threads((cores / 2).clamp(1, 32))
            .thread_name(|i| format!("h5ad-writer-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("parallel-fill-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn fills_a_place_past_the_end_and_keeps_what_is_before() {
        let dir = scratch("fill");
        let path = dir.join("f.bin");
        std::fs::write(&path, vec![7u8; 5000]).unwrap();
        let bytes: Vec<u8> = (0..3 * PIECE + 123).map(|i| (i * 31 % 251) as u8).collect();
        fill(&path, 4321, &bytes).unwrap();
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 4321 + bytes.len());
        assert!(back[..4321].iter().all(|&b| b == 7));
        assert_eq!(&back[4321..], &bytes[..]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn without_a_map_the_pieces_are_written_in_order() {
        let dir = scratch("pieces");
        let path = dir.join("f.bin");
        std::fs::write(&path, vec![7u8; 100]).unwrap();
        let src: Vec<u8> = (0..10_000).map(|i| (i % 253) as u8).collect();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let copy = |start: usize, dst: &mut [u8]| {
            dst.copy_from_slice(&src[start..start + dst.len()]);
            Ok(())
        };
        assert!(write_in_pieces(&file, 50, src.len(), 999, &copy).is_ok());
        let back = std::fs::read(&path).unwrap();
        assert!(back[..50].iter().all(|&b| b == 7));
        assert_eq!(&back[50..], &src[..]);
        let failing = |_: usize, _: &mut [u8]| Err(Error::invalid("source", "gone"));
        assert!(matches!(
            write_in_pieces(&file, 0, 10, 4, &failing),
            Err(Unmapped::Source(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_reservation_that_fails_says_why() {
        let dir = scratch("reserve");
        let path = dir.join("f.bin");
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        // fallocate on a descriptor opened read-only fails (EBADF), as ENOSPC would.
        let read_only = std::fs::File::open(&path).unwrap();
        assert!(reserve(&read_only, 0, 1 << 20).is_err());
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        reserve(&file, 4096, 1 << 20).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn small_datasets_and_missing_room_are_left_to_hdf5() {
        let dir = scratch("room");
        let path = dir.join("f.bin");
        std::fs::write(&path, b"x").unwrap();
        assert!(!wanted(&path, 1000));
        assert!(
            !wanted(&path, usize::MAX / 2),
            "no file system has that much room"
        );
        assert!(free_bytes(&dir.join("no such dir/f")).is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
