//! Reading large uncompressed 1-D datasets straight from the file with parallel positioned reads.
//!
//! The HDF5 library serialises every call behind one lock, so a 100-million-value array is read
//! by a single thread. When a dataset is stored raw (contiguous, or chunked without filters) in
//! the machine's byte order, its bytes can be copied from their file offsets by several threads
//! at once. Anything else, or any doubt (unallocated chunks, a sample that does not match what
//! HDF5 reads), falls back to the library.

use hdf5::datatype::ByteOrder;
use hdf5::{Dataset, H5Type};
use rayon::prelude::*;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes per parallel read.
const PIECE_BYTES: usize = 32 << 20;
/// Below this many values the library is fast enough.
const MIN_VALUES: usize = 1 << 20;

/// Where runs of the dataset's values lie in the file: (first value, file offset, values).
fn extents(ds: &Dataset, elem_size: usize) -> Option<Vec<(usize, u64, usize)>> {
    if ds.ndim() != 1 || !ds.filters().is_empty() {
        return None;
    }
    let len = ds.size();
    if !ds.is_chunked() {
        return Some(vec![(0, ds.offset()?, len)]);
    }
    let chunk = *ds.chunk()?.first()?;
    // One pass over the chunk index (H5Dchunk_iter); fetching chunk i by its number costs a walk
    // of the index each time, quadratic in the chunks (anndata writes ~4,000 per 100 M values).
    let mut out = Vec::new();
    let mut ok = true;
    ds.chunks_visit(|info| {
        let start = info.offset.first().copied().unwrap_or(0) as usize;
        match len.checked_sub(start) {
            Some(left) if info.filter_mask == 0 && info.size as usize == chunk * elem_size => {
                out.push((start, info.addr, chunk.min(left)));
                0
            }
            _ => {
                ok = false;
                1 // stop: this dataset is read by the library
            }
        }
    })
    .ok()?;
    if !ok {
        return None;
    }
    out.sort_unstable_by_key(|e| e.0);
    let covered = out
        .iter()
        .try_fold(0usize, |next, &(s, _, n)| (s == next).then_some(next + n))?;
    (covered == len).then_some(out)
}

/// Values `range` (or all) of `ds`, read directly, or `None` when the library must do it.
/// Only when `T` is exactly the dataset's element type, in the machine's byte order.
pub(crate) fn read_direct<T: H5Type + Copy + PartialEq + Send + Sync>(
    path: &Path,
    ds: &Dataset,
    range: Option<Range<usize>>,
) -> Option<Vec<T>> {
    let elem = std::mem::size_of::<T>();
    let range = range.unwrap_or(0..ds.size());
    let native = if cfg!(target_endian = "little") {
        ByteOrder::LittleEndian
    } else {
        ByteOrder::BigEndian
    };
    let dtype = ds.dtype().ok()?;
    if range.len() < MIN_VALUES
        || dtype.byte_order() != native
        || dtype.to_descriptor().ok()? != T::type_descriptor()
    {
        return None;
    }
    let extents = extents(ds, elem)?;
    let file = std::fs::File::open(path).ok()?;
    // Pieces of at most PIECE_BYTES, each (position in the output, file offset, values).
    let piece_values = (PIECE_BYTES / elem).max(1);
    let mut pieces = Vec::new();
    for (start, offset, n) in extents {
        let (lo, hi) = (start.max(range.start), (start + n).min(range.end));
        let mut v = lo;
        while v < hi {
            let take = piece_values.min(hi - v);
            pieces.push((v - range.start, offset + ((v - start) * elem) as u64, take));
            v += take;
        }
    }
    let mut out: Vec<T> = Vec::with_capacity(range.len());
    {
        let spare = &mut out.spare_capacity_mut()[..range.len()];
        let mut slots: Vec<(&mut [MaybeUninit<T>], u64)> = Vec::with_capacity(pieces.len());
        let mut rest = spare;
        let mut at = 0;
        for &(pos, offset, n) in &pieces {
            let (_, tail) = rest.split_at_mut(pos - at);
            let (slot, tail) = tail.split_at_mut(n);
            slots.push((slot, offset));
            rest = tail;
            at = pos + n;
        }
        let ok = slots.into_par_iter().all(|(slot, offset)| {
            // SAFETY: the slot is plain memory of n values of a Copy type; it is fully written by
            // read_exact_at or the whole result is discarded.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(slot.as_mut_ptr() as *mut u8, slot.len() * elem)
            };
            file.read_exact_at(bytes, offset).is_ok()
        });
        if !ok || pieces.iter().map(|p| p.2).sum::<usize>() != range.len() {
            return None;
        }
    }
    // SAFETY: every value of 0..range.len() was written by the reads above.
    unsafe { out.set_len(range.len()) };
    // Samples read by the library at both ends must agree, or the layout was not understood.
    let n = 64.min(out.len());
    let head: Vec<T> = ds
        .read_slice_1d::<T, _>(range.start..range.start + n)
        .ok()?
        .into_raw_vec_and_offset()
        .0;
    let tail: Vec<T> = ds
        .read_slice_1d::<T, _>(range.end - n..range.end)
        .ok()?
        .into_raw_vec_and_offset()
        .0;
    (head[..] == out[..n] && tail[..] == out[out.len() - n..]).then_some(out)
}
