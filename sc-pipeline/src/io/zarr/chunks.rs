//! Reading `X` of an AnnData zarr store in blocks of rows, for stores larger than memory (the
//! zarr twin of [`crate::io::H5adRowChunks`]): only the row offsets are held for the whole store;
//! each block reads the part of `data` and `indices` (CSR) or of the dense rows it covers, and
//! `zarrs` decodes only the chunks that part touches.

use super::read::Reader;
use super::store::{child, NodeKind};
use crate::anndata::Matrix;
use crate::io::row_chunks::{RowChunks, RowIndex};
use crate::Result;
use std::ops::Range;
use std::path::Path;
use zarrs::array::Array;
use zarrs::array_subset::ArraySubset;
use zarrs::filesystem::FilesystemStore;

enum Layout {
    Csr {
        data: Array<FilesystemStore>,
        indices: Array<FilesystemStore>,
    },
    Dense(Array<FilesystemStore>),
}

/// The cells, genes and stored values of a zarr store's `X`, from its metadata alone.
pub fn zarr_x_extent(path: impl AsRef<Path>) -> Result<(usize, usize, u64)> {
    let r = Reader::open(path.as_ref())?;
    match r.s.kind("/X") {
        Some(NodeKind::Group) => {
            let (_, n_rows, n_cols) = r.sparse_header("/X")?;
            let nnz = r.s.array(&child("/X", "data"))?.shape().first().copied();
            Ok((n_rows, n_cols, nnz.unwrap_or(0)))
        }
        _ => {
            let (n, m) = r.dense_shape("/X", &r.s.array("/X")?)?;
            Ok((n, m, (n * m) as u64))
        }
    }
}

/// An open zarr store whose `X` is read block by block ([`RowChunks`]).
pub struct ZarrRowChunks {
    reader: std::sync::Mutex<Reader>,
    layout: Layout,
    index: RowIndex,
}

impl ZarrRowChunks {
    /// Opens the store and reads `obs`, `var` and the row offsets of `X`. A CSC `X` cannot be
    /// read by rows without reading it whole, so it is refused with that explanation.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let mut r = Reader::open(path.as_ref())?;
        let (layout, indptr, n_obs, n_vars) = match r.s.kind("/X") {
            Some(NodeKind::Group) => {
                let (csc, n_rows, n_cols) = r.sparse_header("/X")?;
                if csc {
                    return Err(r.s.format(
                        "/X",
                        "X is stored by columns (csc_matrix): reading it by rows needs the whole matrix; use read_zarr",
                    ));
                }
                let data = r.s.array("/X/data")?;
                let indices = r.s.array("/X/indices")?;
                let nnz = data.shape().first().copied().unwrap_or(0) as usize;
                if indices.shape() != data.shape() {
                    return Err(r.s.format(
                        "/X",
                        format!(
                            "data has shape {:?} but indices {:?}",
                            data.shape(),
                            indices.shape()
                        ),
                    ));
                }
                let indptr = r.offsets("/X/indptr")?;
                r.check_indptr("/X/indptr", &indptr, n_rows, nnz)?;
                (Layout::Csr { data, indices }, Some(indptr), n_rows, n_cols)
            }
            _ => {
                let a = r.s.array("/X")?;
                let (n, m) = r.dense_shape("/X", &a)?;
                (Layout::Dense(a), None, n, m)
            }
        };
        let obs = r.dataframe_or_default("/obs", n_obs)?;
        let var = r.dataframe_or_default("/var", n_vars)?;
        Ok(ZarrRowChunks {
            reader: std::sync::Mutex::new(r),
            layout,
            index: RowIndex { obs, var, indptr },
        })
    }
}

impl RowChunks for ZarrRowChunks {
    fn index(&self) -> &RowIndex {
        &self.index
    }

    fn value_bytes(&self) -> u64 {
        let size = |a: &Array<FilesystemStore>| a.data_type().fixed_size().unwrap_or(4) as u64;
        match &self.layout {
            Layout::Csr { data, indices } => size(data) + size(indices),
            Layout::Dense(a) => size(a),
        }
    }

    fn read_checked(&self, rows: Range<usize>) -> Result<Matrix> {
        let n_vars = self.n_vars();
        // The reader collects notices (a float64 X read as float32): one block at a time.
        let mut r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        match &self.layout {
            Layout::Csr { data, indices } => {
                let part = ArraySubset::new_with_ranges(&[self.index.csr_range(&rows)]);
                let values = r.subset("/X/data", data, &part)?;
                let values = r.values_of("/X/data", values)?;
                let cols = r.subset("/X/indices", indices, &part)?;
                let cols = r.indices_of("/X/indices", cols, n_vars)?;
                Ok(self.index.block(rows, values, Some(cols)))
            }
            Layout::Dense(a) => {
                let part = ArraySubset::new_with_ranges(&[
                    rows.start as u64..rows.end as u64,
                    0..n_vars as u64,
                ]);
                let values = r.subset("/X", a, &part)?;
                Ok(self.index.block(rows, r.values_of("/X", values)?, None))
            }
        }
    }
}
