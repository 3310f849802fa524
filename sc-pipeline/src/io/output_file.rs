//! The run's output by its name: an h5ad file (the default) or a zarr store (`-o OUT.zarr`),
//! written whole or in the two parts [`OutputWrite`] takes from two threads.

use super::file_space::staged_file::StagedFile;
use super::h5ad::write::{
    create_h5ad, write_h5ad_staged, write_h5ad_staged_without_x, H5adWrite, RowNames,
};
use super::zarr::store::ZarrCompression;
use super::zarr::write::{write_zarr_staged, ZarrWrite};
use crate::anndata::{AnnData, Matrix, Raw};
use crate::Result;
use std::path::Path;

/// The format of an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    H5ad,
    Zarr(ZarrCompression),
}

impl OutputFormat {
    /// A zarr store for a path ending in `.zarr` (compressed by `compression`), else h5ad.
    pub fn for_path(path: &Path, compression: ZarrCompression) -> OutputFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("zarr") => OutputFormat::Zarr(compression),
            _ => OutputFormat::H5ad,
        }
    }

    /// The format's name, as the step table says it ("write h5ad", "write zarr").
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::H5ad => "h5ad",
            OutputFormat::Zarr(_) => "zarr",
        }
    }
}

/// An output written in parts, possibly at once from several threads: X and `.raw`, the cell
/// names (h5ad only), and the rest (see [`H5adWrite`] and [`ZarrWrite`]).
pub enum OutputWrite {
    H5ad(H5adWrite),
    Zarr(ZarrWrite),
}

impl OutputWrite {
    /// Creates the output that becomes `path` (no reservation ahead: see [`create_h5ad`]).
    pub fn create(path: &Path, format: OutputFormat) -> Result<OutputWrite> {
        Ok(match format {
            OutputFormat::H5ad => OutputWrite::H5ad(create_h5ad(path, 0, None)?),
            OutputFormat::Zarr(c) => OutputWrite::Zarr(ZarrWrite::create(path, c)?),
        })
    }

    /// Whether pages are being reserved ahead for the output (h5ad only).
    pub fn reserves(&self) -> bool {
        matches!(self, OutputWrite::H5ad(w) if w.reserves())
    }

    pub fn write_x_and_raw(&self, x: &Matrix, raw: Option<&Raw>) -> Result<()> {
        match self {
            OutputWrite::H5ad(w) => w.write_x_and_raw(x, raw),
            OutputWrite::Zarr(w) => w.write_x_and_raw(x, raw),
        }
    }

    /// The cell names ahead of the rest ([`H5adWrite::write_obs_names`]); a zarr store writes
    /// them with the rest.
    pub fn write_obs_names(&self, names: RowNames) -> Result<()> {
        match self {
            OutputWrite::H5ad(w) => w.write_obs_names(names),
            OutputWrite::Zarr(_) => Ok(()),
        }
    }

    pub fn write_rest(&self, adata: &AnnData) -> Result<()> {
        match self {
            OutputWrite::H5ad(w) => w.write_rest(adata),
            OutputWrite::Zarr(w) => w.write_rest(adata),
        }
    }

    /// The written output, still under its temporary name.
    pub fn close(self) -> Result<StagedFile> {
        match self {
            OutputWrite::H5ad(w) => w.close(),
            OutputWrite::Zarr(w) => w.close(),
        }
    }
}

/// Writes `adata` whole (`with_x: false`: without X, a generated run's result) under a
/// temporary name that becomes `path` once committed.
pub fn write_output_staged(
    adata: &AnnData,
    path: &Path,
    format: OutputFormat,
    with_x: bool,
) -> Result<StagedFile> {
    match (format, with_x) {
        (OutputFormat::H5ad, true) => write_h5ad_staged(adata, path),
        (OutputFormat::H5ad, false) => write_h5ad_staged_without_x(adata, path),
        (OutputFormat::Zarr(c), _) => write_zarr_staged(adata, path, c, with_x),
    }
}
