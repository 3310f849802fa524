//! `X` opened by blocks of rows whatever the input's format: an h5ad file
//! ([`H5adRowChunks`]), a zarr store ([`ZarrRowChunks`]) or a 10x file (read whole).

use super::detect::is_10x_h5;
use super::h5ad::chunks::{x_extent, H5adRowChunks};
use super::row_chunks::RowChunks;
use super::zarr::chunks::{zarr_x_extent, ZarrRowChunks};
use super::zarr::store::is_zarr;
use crate::Result;
use std::path::Path;

/// Opens `path`, a zarr store or an h5ad file, to read its `X` by rows.
pub fn open_row_chunks(path: &Path) -> Result<Box<dyn RowChunks>> {
    Ok(match is_zarr(path) {
        true => Box::new(ZarrRowChunks::open(path)?),
        false => Box::new(H5adRowChunks::open(path)?),
    })
}

/// The cells, genes and stored values of the `X` of an input that can be read by rows (an h5ad
/// file or a zarr store), from its metadata alone; `None` for other inputs (10x matrices).
pub fn row_chunks_extent(path: &Path) -> Result<Option<(usize, usize, u64)>> {
    if is_zarr(path) {
        return zarr_x_extent(path).map(Some);
    }
    if is_10x_h5(path) {
        return Ok(None);
    }
    x_extent(path).map(Some)
}
