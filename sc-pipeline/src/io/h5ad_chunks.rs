//! Reading `X` of an h5ad file in blocks of rows, for files larger than memory.
//!
//! Only the row offsets (8 bytes per cell) are held for the whole file; each block reads one
//! contiguous hyperslab of `data` and `indices` (CSR) or of the dense rows.

use super::h5ad_read::{encoding_type, read_dataframe, SparseFormat, SparseGroup};
use super::hdf5_access::H5Ctx;
use crate::anndata::{DataFrame, DenseMatrix, Matrix};
use crate::{Error, Result};
use hdf5::{Dataset, File};
use sc_kernels::CsrMatrix;
use std::ops::Range;
use std::path::Path;

enum Layout {
    Csr {
        data: Dataset,
        indices: Dataset,
        indptr: Vec<u64>,
    },
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
        return Ok((sparse.n_rows, sparse.n_cols, sparse.data.size() as u64));
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

/// An open h5ad file whose `X` is read block by block.
pub struct H5adRowChunks {
    ctx: H5Ctx,
    _file: File,
    layout: Layout,
    n_obs: usize,
    n_vars: usize,
    obs: DataFrame,
    var: DataFrame,
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
        let (layout, n_obs, n_vars) = if let Ok(g) = file.group("X") {
            let sparse = SparseGroup::open(&ctx, &g, "/X")?;
            if sparse.format == SparseFormat::Csc {
                return Err(ctx.format(
                    "/X",
                    "X is stored by columns (csc_matrix): reading it by rows needs the whole matrix; use read_h5ad",
                ));
            }
            let indptr = ctx.matrix_indptr(
                &sparse.indptr,
                sparse.n_rows,
                sparse.data.size(),
                "/X/indptr",
            )?;
            let layout = Layout::Csr {
                data: sparse.data,
                indices: sparse.indices,
                indptr,
            };
            (layout, sparse.n_rows, sparse.n_cols)
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
            (Layout::Dense(ds), shape[0], shape[1])
        };
        let obs = Self::table(&ctx, &file, "obs", n_obs)?;
        let var = Self::table(&ctx, &file, "var", n_vars)?;
        Ok(H5adRowChunks {
            ctx,
            _file: file,
            layout,
            n_obs,
            n_vars,
            obs,
            var,
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

    pub fn n_obs(&self) -> usize {
        self.n_obs
    }

    pub fn n_vars(&self) -> usize {
        self.n_vars
    }

    pub fn obs(&self) -> &DataFrame {
        &self.obs
    }

    pub fn var(&self) -> &DataFrame {
        &self.var
    }

    /// Stored values in `rows` (all values for a dense X): what reading them costs in memory.
    pub fn stored_values(&self, rows: Range<usize>) -> u64 {
        match &self.layout {
            Layout::Csr { indptr, .. } => indptr[rows.end] - indptr[rows.start],
            Layout::Dense(_) => (rows.len() * self.n_vars) as u64,
        }
    }

    /// Bytes of the file that reading `rows` reads (the values and, for CSR, their column
    /// indices, at the sizes they are stored in).
    pub fn stored_bytes(&self, rows: Range<usize>) -> u64 {
        let size = |ds: &Dataset| ds.dtype().map_or(4, |t| t.size()) as u64;
        match &self.layout {
            Layout::Csr { data, indices, .. } => {
                self.stored_values(rows) * (size(data) + size(indices))
            }
            Layout::Dense(ds) => self.stored_values(rows) * size(ds),
        }
    }

    /// Rows `rows` of X.
    pub fn read_rows(&self, rows: Range<usize>) -> Result<Matrix> {
        if rows.start > rows.end || rows.end > self.n_obs {
            return Err(Error::param(
                "read_rows",
                format!("rows {rows:?} outside 0..{}", self.n_obs),
            ));
        }
        match &self.layout {
            Layout::Csr {
                data,
                indices,
                indptr,
            } => {
                let (start, end) = (indptr[rows.start] as usize, indptr[rows.end] as usize);
                let values = self.ctx.matrix_values(data, Some(start..end), "/X/data")?;
                let cols = self.ctx.matrix_indices(
                    indices,
                    Some(start..end),
                    self.n_vars,
                    "/X/indices",
                )?;
                let offsets = indptr[rows.start..=rows.end]
                    .iter()
                    .map(|&p| p - start as u64)
                    .collect();
                Ok(Matrix::Sparse(CsrMatrix {
                    n_rows: rows.len(),
                    n_cols: self.n_vars,
                    indptr: offsets,
                    indices: cols,
                    data: values,
                }))
            }
            Layout::Dense(ds) => {
                let block = ds
                    .read_slice_2d::<f32, _>((rows.clone(), ..))
                    .map_err(self.ctx.h5("/X"))?
                    .into_raw_vec_and_offset()
                    .0;
                Ok(Matrix::Dense(DenseMatrix {
                    n_rows: rows.len(),
                    n_cols: self.n_vars,
                    data: block,
                }))
            }
        }
    }

    /// Blocks of at most `rows_per_chunk` rows covering X in order.
    pub fn chunks(
        &self,
        rows_per_chunk: usize,
    ) -> impl Iterator<Item = Result<(Range<usize>, Matrix)>> + '_ {
        let step = rows_per_chunk.max(1);
        (0..self.n_obs).step_by(step).map(move |start| {
            let rows = start..(start + step).min(self.n_obs);
            self.read_rows(rows.clone()).map(|m| (rows, m))
        })
    }
}
