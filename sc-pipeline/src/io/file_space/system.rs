//! The file system calls and switches that the fills of a file ([`super::parallel_fill`]) and
//! its reservation ahead ([`super::reserve_ahead`]) share: the room left, fallocate(2), the
//! environment's switches and the write's timings.

use std::path::Path;

/// Free space kept beyond the dataset (HDF5's metadata, written at close).
pub(crate) const HEADROOM: u64 = 64 << 20;

/// False when the environment variable `var` is set to `0` (a switch that is on by default).
pub(crate) fn switched_on(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v != "0")
}

/// Whether `SCPIPE_TRACE_WRITE` asks for the write's timings on standard error.
pub(crate) fn tracing_writes() -> bool {
    std::env::var_os("SCPIPE_TRACE_WRITE").is_some()
}

/// Runs `f`, printing how long it took (as `what: S s`) when the write's timings are asked for
/// (see [`tracing_writes`]).
pub(crate) fn traced<R>(what: impl FnOnce() -> String, f: impl FnOnce() -> R) -> R {
    let t0 = std::time::Instant::now();
    let r = f();
    if tracing_writes() {
        eprintln!("{}: {:.3} s", what(), t0.elapsed().as_secs_f64());
    }
    r
}

/// Bytes free to this user on the file system holding `path`.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` is written by statvfs before it is read.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// [`fallocate`], doing nothing on a file system that does not support it.
pub(crate) fn fallocate_if_supported(
    file: &std::fs::File,
    mode: libc::c_int,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    match fallocate(file, mode, offset, len) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) =>
        {
            Ok(())
        }
        done => done,
    }
}

/// fallocate(2) of `[offset, offset + len)` with `mode`, asked again when a signal interrupts it
/// (what was reserved by then stays reserved).
pub(crate) fn fallocate(
    file: &std::fs::File,
    mode: libc::c_int,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: fallocate on an open descriptor; it reads no memory of ours.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}
