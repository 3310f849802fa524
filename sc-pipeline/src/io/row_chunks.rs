//! `X` read by blocks of rows from an input larger than memory: what every format's reader by
//! rows gives ([`RowChunks`]; `open_rows` picks the reader by the input's format).

use crate::anndata::{DataFrame, DenseMatrix, Matrix};
use crate::{Error, Result};
use sc_kernels::CsrMatrix;
use std::ops::Range;

/// What a reader of X by rows holds for the whole input: `obs` and `var` (checked to match
/// X's shape, so they give it), and the row offsets of a CSR X (8 bytes a cell; `None` for a
/// dense X).
pub struct RowIndex {
    pub(super) obs: DataFrame,
    pub(super) var: DataFrame,
    pub(super) indptr: Option<Vec<u64>>,
}

impl RowIndex {
    /// The stored values of `rows` of a CSR X: a range of its `data` and `indices`.
    pub(super) fn csr_range(&self, rows: &Range<usize>) -> Range<u64> {
        let indptr = self.indptr.as_deref().expect("a CSR X has row offsets");
        indptr[rows.start]..indptr[rows.end]
    }

    /// Rows `rows` of X from the values read for them: with their column indices for a CSR X
    /// (the values of [`RowIndex::csr_range`]), without for a dense one.
    pub(super) fn block(
        &self,
        rows: Range<usize>,
        data: Vec<f32>,
        indices: Option<Vec<u32>>,
    ) -> Matrix {
        let n_cols = self.var.n_rows();
        match indices {
            Some(indices) => {
                let indptr = self.indptr.as_deref().expect("a CSR X has row offsets");
                let start = indptr[rows.start];
                let offsets = indptr[rows.start..=rows.end].iter().map(|&p| p - start);
                Matrix::Sparse(CsrMatrix {
                    n_rows: rows.len(),
                    n_cols,
                    indptr: offsets.collect(),
                    indices,
                    data,
                })
            }
            None => Matrix::Dense(DenseMatrix {
                n_rows: rows.len(),
                n_cols,
                data,
            }),
        }
    }
}

/// An open input whose `X` is read block by block.
pub trait RowChunks: Sync {
    fn index(&self) -> &RowIndex;
    /// Bytes the input stores a value in (with its column index for a CSR X), uncompressed.
    fn value_bytes(&self) -> u64;
    /// Rows `rows` of X, checked to lie in X by the caller ([`RowChunks::read_rows`]).
    fn read_checked(&self, rows: Range<usize>) -> Result<Matrix>;

    fn n_obs(&self) -> usize {
        self.index().obs.n_rows()
    }
    fn n_vars(&self) -> usize {
        self.index().var.n_rows()
    }
    fn obs(&self) -> &DataFrame {
        &self.index().obs
    }
    fn var(&self) -> &DataFrame {
        &self.index().var
    }
    /// Stored values in `rows` (all values for a dense X): what reading them costs in memory.
    fn stored_values(&self, rows: Range<usize>) -> u64 {
        match &self.index().indptr {
            Some(indptr) => indptr[rows.end] - indptr[rows.start],
            None => (rows.len() * self.n_vars()) as u64,
        }
    }
    /// Bytes the input stores for `rows` (values and, for CSR, column indices, uncompressed).
    fn stored_bytes(&self, rows: Range<usize>) -> u64 {
        self.stored_values(rows) * self.value_bytes()
    }
    /// Rows `rows` of X; a column stored twice in a row has its values added, as the whole
    /// reads add them (and scipy): a block holds whole rows.
    fn read_rows(&self, rows: Range<usize>) -> Result<Matrix> {
        if rows.start > rows.end || rows.end > self.n_obs() {
            return Err(Error::param(
                "read_rows",
                format!("rows {rows:?} outside 0..{}", self.n_obs()),
            ));
        }
        Ok(match self.read_checked(rows)? {
            Matrix::Sparse(m) => Matrix::Sparse(m.into_duplicates_summed().0),
            other => other,
        })
    }
}
