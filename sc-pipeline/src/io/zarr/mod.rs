//! zarr: the store (arrays and groups of either zarr format, written chunk by chunk through
//! files of its own), reading (whole or in row chunks, chunks decoded straight into place) and
//! writing (whole, in two parts at once, from GPU memory).

mod chunk_read;
pub(super) mod chunks;
mod files;
pub(super) mod read;
mod read_arrays;
mod read_matrices;
mod records;
pub(super) mod store;
pub(super) mod write;
mod writer_priority;
