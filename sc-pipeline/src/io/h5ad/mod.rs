//! h5ad: reading (whole, in row chunks, straight from the file), writing (whole, in two parts
//! at once, streamed in blocks of rows, from GPU memory) and anndata's elements in HDF5.

pub(super) mod chunks;
pub(super) mod compressed;
pub(super) mod device_write;
mod direct_read;
mod elements;
pub(crate) mod hdf5_access;
pub(super) mod read;
mod rec_array;
pub(super) mod stream_write;
pub(super) mod write;
