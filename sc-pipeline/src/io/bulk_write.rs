//! Large numeric arrays written in parallel, outside HDF5: the dataset is created contiguous and
//! allocated at once (no fill), HDF5 writes the file's metadata, and once it has closed the file
//! every thread of the pool writes a share of the arrays' bytes at their offsets in the file.
//! HDF5 alone writes one array at a time on one thread, a few GB/s; an output of tens of
//! gigabytes then takes as long as the whole GPU pipeline.

use super::hdf5_access::H5Ctx;
use crate::{Error, Result};
use hdf5::types::TypeDescriptor;
use hdf5::{Dataset, Extents, Group, H5Type};
use parking_lot::Mutex;
use rayon::prelude::*;
use std::path::Path;

/// Arrays smaller than this are written by HDF5 at once.
const MIN_BYTES: usize = 64 << 20;
/// Bytes per parallel write.
const PIECE: usize = 64 << 20;

/// An array's bytes waiting for their place in the file.
struct Pending {
    offset: u64,
    data: *const u8,
    len: usize,
}

// SAFETY: `data` points at an array the writer borrows for as long as the pending writes live
// (see `BulkWrites::defer`), only ever read.
unsafe impl Send for Pending {}
unsafe impl Sync for Pending {}

/// The pending writes of one file.
#[derive(Default)]
pub(crate) struct BulkWrites {
    pending: Mutex<Vec<Pending>>,
}

/// Whether an array of `T` is plain numbers (its bytes in memory are its bytes in the file:
/// HDF5 stores the native little-endian types as they are).
fn numeric<T: H5Type>() -> bool {
    matches!(
        T::type_descriptor(),
        TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) | TypeDescriptor::Float(_)
    )
}

impl BulkWrites {
    /// Creates the dataset `name` of `values` under `parent`. A large numeric array is left for
    /// [`BulkWrites::write`], which must run before `values` is dropped or changed (the writer
    /// holds the object it writes borrowed throughout); a small one, or one HDF5 gives no
    /// offset for, is written now.
    pub(crate) fn dataset<T: H5Type>(
        &self,
        ctx: &H5Ctx,
        parent: &Group,
        name: &str,
        extents: Extents,
        values: &[T],
        element: &str,
    ) -> Result<Dataset> {
        let len = std::mem::size_of_val(values);
        if len < MIN_BYTES || !numeric::<T>() {
            let ds = parent
                .new_dataset::<T>()
                .shape(extents)
                .create(name)
                .map_err(ctx.h5(element))?;
            if !values.is_empty() {
                ds.write_raw(values).map_err(ctx.h5(element))?;
            }
            return Ok(ds);
        }
        let ds = parent
            .new_dataset::<T>()
            .shape(extents)
            .no_chunk()
            .alloc_time(Some(hdf5::plist::dataset_create::AllocTime::Early))
            .fill_time(hdf5::plist::dataset_create::FillTime::Never)
            .create(name)
            .map_err(ctx.h5(element))?;
        match ds.offset() {
            Some(offset) => self.pending.lock().push(Pending {
                offset,
                data: values.as_ptr() as *const u8,
                len,
            }),
            None => ds.write_raw(values).map_err(ctx.h5(element))?,
        }
        Ok(ds)
    }

    /// Writes every pending array into the closed file at `path`, in pieces, on every thread.
    pub(crate) fn write(self, path: &Path) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let pending = self.pending.into_inner();
        if pending.is_empty() {
            return Ok(());
        }
        let err = |e: std::io::Error| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write the arrays' data: {e}"),
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(err)?;
        let pieces: Vec<(u64, &[u8])> = pending
            .iter()
            .flat_map(|p| {
                // SAFETY: see `Pending`: the array is alive and unchanged while this runs.
                let bytes = unsafe { std::slice::from_raw_parts(p.data, p.len) };
                bytes
                    .chunks(PIECE)
                    .enumerate()
                    .map(move |(i, c)| (p.offset + (i * PIECE) as u64, c))
            })
            .collect();
        pieces
            .into_par_iter()
            .try_for_each(|(offset, bytes)| file.write_all_at(bytes, offset))
            .map_err(err)
    }
}
