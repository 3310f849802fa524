//! File formats: h5ad (read, write, read in row chunks), zarr (read, write, read in row
//! chunks) and 10x Genomics HDF5 matrices; anndata's element encoding that the h5ad and zarr
//! writers share; the space of the files being written (staged, filled, reserved ahead).

mod detect;
mod encoding;
mod file_space;
mod h5ad;
mod notices;
mod open_rows;
mod output_file;
mod row_chunks;
mod tenx;
mod zarr;

pub use detect::is_10x_h5;
pub use file_space::staged_file::{commit_all, exit_interrupted, PartialFile, StagedFile};
pub(crate) use file_space::system::switched_on;
pub use h5ad::chunks::{x_extent, H5adRowChunks};
pub(crate) use h5ad::device_write::prepare_device_write;
pub use h5ad::read::h5ad_x_size;
pub use h5ad::read::{read_h5ad, read_h5ad_with_notices};
pub use h5ad::stream_write::H5adStreamWriter;
pub use h5ad::write::{
    create_h5ad, write_h5ad, write_h5ad_staged, write_h5ad_staged_without_x, H5adWrite, RowNames,
};
pub use open_rows::{open_row_chunks, row_chunks_extent};
pub use output_file::{write_output_staged, OutputFormat, OutputWrite};
pub use row_chunks::{RowChunks, RowIndex};
pub use tenx::{read_10x_h5, read_10x_h5_with_notices};
pub use zarr::chunks::{zarr_x_extent, ZarrRowChunks};
pub use zarr::read::{read_zarr, read_zarr_with_notices};
pub use zarr::store::{is_zarr, ZarrCompression};
pub(crate) use zarr::write::{prepare_zarr_buffers, prepare_zarr_write};
pub use zarr::write::{write_zarr, write_zarr_staged, ZarrWrite};
