//! File formats: h5ad (read, write, read in row chunks), zarr (read, write, read in row
//! chunks) and 10x Genomics HDF5 matrices.

mod detect;
mod device_write;
mod direct_read;
mod h5ad_chunks;
mod h5ad_read;
mod h5ad_stream_write;
mod h5ad_write;
pub(crate) mod hdf5_access;
mod notices;
mod output_file;
mod parallel_fill;
mod rec_array;
mod reserve_ahead;
mod row_chunks;
mod staged_file;
mod tenx;
mod writer_priority;
mod zarr_chunk_read;
mod zarr_chunks;
mod zarr_files;
mod zarr_read;
mod zarr_records;
mod zarr_store;
mod zarr_write;

pub use detect::is_10x_h5;
pub(crate) use device_write::prepare_device_write;
pub use h5ad_chunks::{x_extent, H5adRowChunks};
pub use h5ad_read::h5ad_x_size;
pub use h5ad_read::{read_h5ad, read_h5ad_with_notices};
pub use h5ad_stream_write::H5adStreamWriter;
pub use h5ad_write::{
    create_h5ad, write_h5ad, write_h5ad_staged, write_h5ad_staged_without_x, H5adWrite,
};
pub use output_file::{write_output_staged, OutputFormat, OutputWrite};
pub(crate) use parallel_fill::switched_on;
pub use row_chunks::{open_row_chunks, row_chunks_extent, RowChunks, RowIndex};
pub use staged_file::{commit_all, exit_interrupted, PartialFile, StagedFile};
pub use tenx::{read_10x_h5, read_10x_h5_with_notices};
pub use zarr_chunks::{zarr_x_extent, ZarrRowChunks};
pub use zarr_read::{read_zarr, read_zarr_with_notices};
pub use zarr_store::{is_zarr, ZarrCompression};
pub(crate) use zarr_write::{prepare_zarr_buffers, prepare_zarr_write};
pub use zarr_write::{write_zarr, write_zarr_staged, ZarrWrite};
