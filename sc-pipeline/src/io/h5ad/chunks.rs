//! Reading `X` of an h5ad file in blocks of rows, for files larger than memory.
//!
//! Only the row offsets (8 bytes per cell) are held for the whole file; each block reads one
//! contiguous hyperslab of `data` and `indices` (CSR) or of the dense rows.

use super::hdf5_access::H5Ctx;
use super::read::{encoding_type, read_dataframe, SparseFormat, SparseGroup};
use crate::anndata::{DataFrame, Matrix};
use crate::io::row_chunks::{RowChunks, RowIndex};
use crate::Result;
use hdf5::{Dataset, File};
use std::ops::Range;
use std::path::Path;

enum Layout {
    Csr { data: Dataset, indices: Dataset },
    Dense(Dataset),
}

/// The cells, genes and stored values of an h5ad file's `X`, from its metadata alone (nothing
/// of X is read): what holding X in memory would cost.
pub fn x_extent(path: impl AsRef<Path>) -> Result<(usize, usize, u64)> {
    let ctx = H5Ctx::new(path.as_ref());
    let file = ctx.open()?;
    if !file.link_exists("X") {
        return Err(ctx.format("/X", "missing: the h5ad file has no X matrix"));
    }
    if let Ok(g) = file.group("X") {
        let sparse = SparseGroup::open(&ctx, &g, "/X")?;
        return Ok((
            sparse.n_rows,
            sparse.n_cols,
            sparse.arrays.data.size() as u64,
        ));
    }
    let shape = ctx.dataset(&file, "X", "/X")?.shape();
    match shape[..] {
        [n, m] => Ok((n, m, (n * m) as u64)),
        _ => Err(ctx.format(
            "/X",
            format!("a dense matrix must be 2-dimensional, has shape {shape:?}"),
        )),
    }
}

/// An open h5ad file whose `X` is read block by block ([`RowChunks`]).
pub struct H5adRowChunks {
    ctx: H5Ctx,
    _file: File,
    layout: Layout,
    index: RowIndex,
}

impl H5adRowChunks {
    /// Opens the file and reads `obs`, `var` and the row offsets of `X`. A CSC `X` cannot be
    /// read by rows without reading it whole, so it is refused with that explanation.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let ctx = H5Ctx::new(path.as_ref());
        let file = ctx.open()?;
        if !file.link_exists("X") {
            return Err(ctx.format("/X", "missing: the h5ad file has no X matrix"));
        }
        let (layout, indptr, n_obs, n_vars) = if let Ok(g) = file.group("X") {
            let sparse = SparseGroup::open(&ctx, &g, "/X")?;
            if sparse.format == SparseFormat::Csc {
                return Err(ctx.format(
                    "/X",
                    "X is stored by columns (csc_matrix): reading it by rows needs the whole matrix; use read_h5ad",
                ));
            }
            let indptr = ctx.matrix_indptr(
                &sparse.arrays.indptr,
                sparse.n_rows,
                sparse.arrays.data.size(),
                "/X/indptr",
            )?;
            let layout = Layout::Csr {
                data: sparse.arrays.data,
                indices: sparse.arrays.indices,
            };
            (layout, Some(indptr), sparse.n_rows, sparse.n_cols)
        } else {
            let ds = ctx.dataset(&file, "X", "/X")?;
            if ds.ndim() != 2 {
                return Err(ctx.format(
                    "/X",
                    format!(
                        "a dense matrix must be 2-dimensional, has shape {:?}",
                        ds.shape()
                    ),
                ));
            }
            let shape = ds.shape();
            (Layout::Dense(ds), None, shape[0], shape[1])
        };
        let obs = Self::table(&ctx, &file, "obs", n_obs)?;
        let var = Self::table(&ctx, &file, "var", n_vars)?;
        Ok(H5adRowChunks {
            ctx,
            _file: file,
            layout,
            index: RowIndex { obs, var, indptr },
        })
    }

    fn table(ctx: &H5Ctx, file: &File, name: &str, n: usize) -> Result<DataFrame> {
        if !file.link_exists(name) {
            return Ok(DataFrame::with_default_index(n));
        }
        let element = format!("/{name}");
        let g = ctx.group(file, name, &element)?;
        let _ = encoding_type(ctx, &g, &element)?;
        let df = read_dataframe(ctx, &g, &element)?;
        if df.n_rows() != n {
            return Err(ctx.format(&element, format!("has {} rows but X has {n}", df.n_rows())));
        }
        Ok(df)
    }

    /// Blocks of at most `rows_per_chunk` rows covering X in order.
    pub fn chunks(
        &self,
        rows_per_chunk: usize,
    ) -> impl Iterator<Item = Result<(Range<usize>, Matrix)>> + '_ {
        let step = rows_per_chunk.max(1);
        (0..self.n_obs()).step_by(step).map(move |start| {
            let rows = start..(start + step).min(self.n_obs());
            self.read_rows(rows.clone()).map(|m| (rows, m))
        })
    }
}

impl RowChunks for H5adRowChunks {
    fn index(&self) -> &RowIndex {
        &self.index
    }

    fn value_bytes(&self) -> u64 {
        let size = |ds: &Dataset| ds.dtype().map_or(4, |t| t.size()) as u64;
        match &self.layout {
            Layout::Csr { data, indices } => size(data) + size(indices),
            Layout::Dense(ds) => size(ds),
        }
    }

    fn read_checked(&self, rows: Range<usize>) -> Result<Matrix> {
        let n_vars = self.n_vars();
        match &self.layout {
            Layout::Csr { data, indices } => {
                let range = self.index.csr_range(&rows);
                let range = Some(range.start as usize..range.end as usize);
                let values = self.ctx.matrix_values(data, range.clone(), "/X/data")?;
                let cols = self
                    .ctx
                    .matrix_indices(indices, range, n_vars, "/X/indices")?;
                Ok(self.index.block(rows, values, Some(cols)))
            }
            Layout::Dense(ds) => {
                let block = ds
                    .read_slice_2d::<f32, _>((rows.clone(), ..))
                    .map_err(self.ctx.h5("/X"))?
                    .into_raw_vec_and_offset()
                    .0;
                Ok(self.index.block(rows, block, None))
            }
        }
    }
}
