//! Large host buffers given back off the critical path. Freeing GBs of host memory is the
//! kernel unmapping and freeing every page (the 16 GB input X of a million cells took about a
//! second on the H100 host), time that the next step would otherwise wait for.

/// Drops `value` on a thread of its own (inline when no thread can be started). Only for data
/// nothing else needs: the memory goes back to the system a moment later than an inline drop.
pub(crate) fn drop_in_background<T: Send + 'static>(value: T) {
    // A thread that cannot be started drops its closure, and `value` with it, right here.
    let _ = std::thread::Builder::new()
        .name("release".into())
        .spawn(move || drop(value));
}

/// [`drop_in_background`] for large arrays, whose pages are given back in pieces before the
/// arrays are freed. Unmapping gigabytes in one `munmap` holds the process's address-space lock
/// throughout (about 0.1 s for 3 GB of 4 KiB pages, as after another process has fragmented
/// the host's memory and no huge pages are left), and every `mmap` of another thread waits for
/// it: the QC step's downloads at 200,000 cells, right after X's upload, took 8-23 ms instead of
/// 4-7. `madvise(MADV_DONTNEED)` a piece at a time lets those waits end between pieces.
pub(crate) fn release_in_background<T: Release + Send + 'static>(mut value: T) {
    let _ = std::thread::Builder::new()
        .name("release".into())
        .spawn(move || {
            value.give_back_pages();
            drop(value)
        });
}

/// Values whose large buffers can give their pages back before they are dropped (their
/// contents read as zeros afterwards, so only values about to be dropped).
pub(crate) trait Release {
    fn give_back_pages(&mut self);
}

impl<T: Copy> Release for Vec<T> {
    fn give_back_pages(&mut self) {
        let bytes = self.capacity() * std::mem::size_of::<T>();
        give_back(self.as_mut_ptr().cast(), bytes);
    }
}

impl<T: sc_kernels::Real> Release for sc_kernels::CsrMatrix<T> {
    fn give_back_pages(&mut self) {
        self.data.give_back_pages();
        self.indices.give_back_pages();
        self.indptr.give_back_pages();
    }
}

/// The whole pages inside `len` bytes at `ptr`, given back a piece at a time; buffers under
/// [`crate::huge_pages::LARGE_BYTES`] are left to `free`.
fn give_back(ptr: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    const PIECE: usize = 64 << 20;
    if ptr.is_null() || len < crate::huge_pages::LARGE_BYTES {
        return;
    }
    let end = (ptr as usize + len) / PAGE * PAGE;
    let mut at = (ptr as usize).next_multiple_of(PAGE);
    while at < end {
        let n = PIECE.min(end - at);
        // SAFETY: the range lies inside a buffer its owner is about to free; MADV_DONTNEED only
        // drops its pages (later reads see zeros), which nothing reads before the free.
        unsafe { libc::madvise(at as *mut libc::c_void, n, libc::MADV_DONTNEED) };
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_array_gives_its_pages_back_and_is_dropped() {
        let mut v = vec![7u32; (crate::huge_pages::LARGE_BYTES / 4) + 1000];
        let ptr = v.as_ptr() as usize;
        let first_whole = (ptr.next_multiple_of(4096) - ptr) / 4;
        let past_whole = ((ptr + v.len() * 4) / 4096 * 4096 - ptr) / 4;
        v.give_back_pages();
        // The whole pages read as zeros now; the partial pages at either end keep their values.
        assert!(v[first_whole..past_whole].iter().all(|&x| x == 0));
        assert!(v[..first_whole].iter().all(|&x| x == 7));
        assert!(v[past_whole..].iter().all(|&x| x == 7));
        release_in_background(v);
        let mut small = vec![7u8; 4096 * 4];
        small.give_back_pages();
        assert!(small.iter().all(|&b| b == 7), "small buffers are left alone");
    }

    #[test]
    fn the_value_is_dropped() {
        struct Flag(std::sync::mpsc::Sender<()>);
        impl Drop for Flag {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop_in_background(Flag(tx));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("dropped on the background thread");
    }
}
