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

/// The pieces of at most [`PIECE_BYTES`] that `range` (or all) of `ds` is read in, each
/// (position in the output, file offset, values), when its values of `S` can be read directly:
/// `S` exactly the dataset's element type in the machine's byte order, at least [`MIN_VALUES`]
/// of them, stored raw. `None`: the library must read them.
fn plan<S: H5Type>(ds: &Dataset, range: &Range<usize>) -> Option<Vec<(usize, u64, usize)>> {
    let elem = std::mem::size_of::<S>();
    let native = if cfg!(target_endian = "little") {
        ByteOrder::LittleEndian
    } else {
        ByteOrder::BigEndian
    };
    let dtype = ds.dtype().ok()?;
    if range.len() < MIN_VALUES
        || dtype.byte_order() != native
        || dtype.to_descriptor().ok()? != S::type_descriptor()
    {
        return None;
    }
    let extents = extents(ds, elem)?;
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
    (pieces.iter().map(|p| p.2).sum::<usize>() == range.len()).then_some(pieces)
}

/// The output's slots cut into the pieces' parts, each with its file offset.
fn slots_of<'a, T>(
    out: &'a mut Vec<T>,
    len: usize,
    pieces: &[(usize, u64, usize)],
) -> Vec<(&'a mut [MaybeUninit<T>], u64)> {
    let mut slots = Vec::with_capacity(pieces.len());
    let mut rest = &mut out.spare_capacity_mut()[..len];
    let mut at = 0;
    for &(pos, offset, n) in pieces {
        let (_, tail) = rest.split_at_mut(pos - at);
        let (slot, tail) = tail.split_at_mut(n);
        slots.push((slot, offset));
        rest = tail;
        at = pos + n;
    }
    slots
}

/// Whether `f` of the library's own reads of `n` values at both ends of `range` equals the
/// directly read `out` there: else the layout was not understood.
fn samples_agree<S: H5Type, T: PartialEq>(
    ds: &Dataset,
    range: &Range<usize>,
    out: &[T],
    f: impl Fn(S) -> T,
) -> Option<bool> {
    let n = 64.min(out.len());
    let lib = |r: Range<usize>| -> Option<Vec<S>> {
        Some(
            ds.read_slice_1d::<S, _>(r)
                .ok()?
                .into_raw_vec_and_offset()
                .0,
        )
    };
    let head = lib(range.start..range.start + n)?;
    let tail = lib(range.end - n..range.end)?;
    let same =
        |lib: Vec<S>, direct: &[T]| lib.into_iter().map(&f).zip(direct).all(|(a, b)| a == *b);
    Some(same(head, &out[..n]) && same(tail, &out[out.len() - n..]))
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
    let pieces = plan::<T>(ds, &range)?;
    let file = std::fs::File::open(path).ok()?;
    let mut out: Vec<T> = Vec::with_capacity(range.len());
    let ok = slots_of(&mut out, range.len(), &pieces)
        .into_par_iter()
        .all(|(slot, offset)| {
            // SAFETY: the slot is plain memory of n values of a Copy type; it is fully written
            // by read_exact_at or the whole result is discarded.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(slot.as_mut_ptr() as *mut u8, slot.len() * elem)
            };
            file.read_exact_at(bytes, offset).is_ok()
        });
    if !ok {
        return None;
    }
    // SAFETY: every value of 0..range.len() was written by the reads above.
    unsafe { out.set_len(range.len()) };
    samples_agree::<T, T>(ds, &range, &out, |v| v)?.then_some(out)
}

/// Values `range` (or all) of `ds`, stored as `S`, converted by `f` into `T` while read
/// directly (each piece read into a buffer its thread reuses, then converted into place), or
/// `None` when the library must read them. `Some(Err(()))`: `valid` refused a piece (the caller
/// finds and names the bad value). What a read of `S` values and a pass converting them would
/// do, without holding both (int64 indices of 2 billion values: 16 GB read, 8 GB kept).
pub(crate) fn read_direct_converted<S, T>(
    path: &Path,
    ds: &Dataset,
    range: Option<Range<usize>>,
    valid: impl Fn(&[S]) -> bool + Sync,
    f: impl Fn(S) -> T + Sync,
) -> Option<Result<Vec<T>, ()>>
where
    S: H5Type + bytemuck::Pod + Send + Sync,
    T: Copy + PartialEq + Send + Sync,
{
    let range = range.unwrap_or(0..ds.size());
    let pieces = plan::<S>(ds, &range)?;
    let file = std::fs::File::open(path).ok()?;
    let mut out: Vec<T> = Vec::with_capacity(range.len());
    let read = slots_of(&mut out, range.len(), &pieces)
        .into_par_iter()
        .map_init(Vec::<S>::new, |buf, (slot, offset)| -> Option<bool> {
            // Zeroed once per thread (the pieces are of one size but the last).
            if buf.len() < slot.len() {
                buf.resize(slot.len(), S::zeroed());
            }
            let buf = &mut buf[..slot.len()];
            file.read_exact_at(bytemuck::cast_slice_mut(buf), offset)
                .ok()?;
            if !valid(buf) {
                return Some(false);
            }
            for (o, &v) in slot.iter_mut().zip(buf.iter()) {
                o.write(f(v));
            }
            Some(true)
        })
        .try_reduce(|| true, |a, b| Some(a && b))?;
    if !read {
        return Some(Err(()));
    }
    // SAFETY: every value of 0..range.len() was written above (a refused piece returns before).
    unsafe { out.set_len(range.len()) };
    samples_agree::<S, T>(ds, &range, &out, f)?.then_some(Ok(out))
}
