//! The output's chunk writers run beside the cell-graph steps (X and `.raw` are written while
//! neighbors, UMAP and Leiden run), one writer per core. Their lz4 encoding then took the cores
//! the steps' host phases need: on 2 H200s with 32 cores, neighbors took 1.1-1.3 s at 1 M cells
//! with a zarr output against 0.35-0.42 s with an h5ad one. A writer thread lowers its own
//! scheduling priority, so it takes the cores the steps leave idle; the write's work is the same.

/// The niceness a writer thread takes (0 is the default; 19 the lowest).
const WRITER_NICENESS: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`WRITER_NICENESS`] (Linux; elsewhere
/// nothing). Lowering needs no privilege; if the system refuses, the thread keeps its priority.
pub(crate) fn yield_to_the_steps() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` and `setpriority` take no pointers; on Linux PRIO_PROCESS with a thread id
    // sets that thread's niceness only.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, WRITER_NICENESS);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn own_niceness() -> i32 {
        // SAFETY: as above.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn a_writer_thread_lowers_its_own_priority_only() {
        let before = own_niceness();
        let writer = std::thread::spawn(|| {
            yield_to_the_steps();
            own_niceness()
        })
        .join()
        .unwrap();
        assert_eq!(writer, WRITER_NICENESS.max(before));
        assert_eq!(
            own_niceness(),
            before,
            "the calling thread keeps its priority"
        );
    }
}
