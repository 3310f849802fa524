//! Compressed sparse row matrices with 64-bit row offsets, so matrices with more than 2^31
//! stored values work.

/// A CSR matrix: row `i` holds the values `data[indptr[i]..indptr[i+1]]` in the columns
/// `indices[indptr[i]..indptr[i+1]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrMatrix<T> {
    pub n_rows: usize,
    pub n_cols: usize,
    /// `n_rows + 1` offsets, starting at 0, non-decreasing, ending at `data.len()`.
    pub indptr: Vec<u64>,
    /// Column of each stored value, `< n_cols`.
    pub indices: Vec<u32>,
    pub data: Vec<T>,
}

/// Why a CSR matrix is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("indptr has {got} entries, expected n_rows + 1 = {expected}")]
    IndptrLength { got: usize, expected: usize },
    #[error("indptr must start at 0, starts at {0}")]
    IndptrStart(u64),
    #[error("indptr decreases at row {row}: {from} -> {to}")]
    IndptrDecreasing { row: usize, from: u64, to: u64 },
    #[error("indptr ends at {end} but there are {nnz} stored values (indices: {indices})")]
    IndptrEnd { end: u64, nnz: usize, indices: usize },
    #[error("column index {index} out of range at stored value {position} (n_cols = {n_cols})")]
    IndexOutOfRange { position: usize, index: u32, n_cols: usize },
    #[error("n_cols = {0} does not fit 32-bit column indices")]
    TooManyColumns(usize),
}

impl<T> CsrMatrix<T> {
    /// Builds a matrix after checking every invariant.
    pub fn new(n_rows: usize, n_cols: usize, indptr: Vec<u64>, indices: Vec<u32>, data: Vec<T>) -> Result<Self, CsrError> {
        let m = CsrMatrix { n_rows, n_cols, indptr, indices, data };
        m.validate()?;
        Ok(m)
    }

    /// An all-zero matrix.
    pub fn zeros(n_rows: usize, n_cols: usize) -> Self {
        CsrMatrix { n_rows, n_cols, indptr: vec![0; n_rows + 1], indices: Vec::new(), data: Vec::new() }
    }

    /// Checks the invariants listed on the fields.
    pub fn validate(&self) -> Result<(), CsrError> {
        if self.n_cols > u32::MAX as usize + 1 {
            return Err(CsrError::TooManyColumns(self.n_cols));
        }
        if self.indptr.len() != self.n_rows + 1 {
            return Err(CsrError::IndptrLength { got: self.indptr.len(), expected: self.n_rows + 1 });
        }
        if self.indptr[0] != 0 {
            return Err(CsrError::IndptrStart(self.indptr[0]));
        }
        for (row, w) in self.indptr.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(CsrError::IndptrDecreasing { row, from: w[0], to: w[1] });
            }
        }
        let end = *self.indptr.last().unwrap();
        if end as usize != self.data.len() || self.indices.len() != self.data.len() {
            return Err(CsrError::IndptrEnd { end, nnz: self.data.len(), indices: self.indices.len() });
        }
        if let Some((position, &index)) = self.indices.iter().enumerate().find(|(_, &c)| c as usize >= self.n_cols) {
            return Err(CsrError::IndexOutOfRange { position, index, n_cols: self.n_cols });
        }
        Ok(())
    }

    /// Number of stored values.
    pub fn nnz(&self) -> usize {
        self.data.len()
    }

    /// The stored range of row `i`.
    pub fn row_range(&self, i: usize) -> std::ops::Range<usize> {
        self.indptr[i] as usize..self.indptr[i + 1] as usize
    }

    /// Columns and values of row `i`.
    pub fn row(&self, i: usize) -> (&[u32], &[T]) {
        let r = self.row_range(i);
        (&self.indices[r.clone()], &self.data[r])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_valid_matrix_and_reads_rows() {
        let m = CsrMatrix::new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 2.0, 3.0]).unwrap();
        assert_eq!(m.nnz(), 3);
        assert_eq!(m.row(0), (&[0u32, 2][..], &[1.0f32, 2.0][..]));
        assert_eq!(m.row(1), (&[1u32][..], &[3.0f32][..]));
    }

    #[test]
    fn names_each_malformation() {
        assert!(matches!(CsrMatrix::new(2, 3, vec![0, 1], vec![0], vec![1.0]), Err(CsrError::IndptrLength { .. })));
        assert!(matches!(CsrMatrix::new(1, 3, vec![1, 1], vec![], Vec::<f32>::new()), Err(CsrError::IndptrStart(1))));
        assert!(matches!(CsrMatrix::new(2, 3, vec![0, 2, 1], vec![0, 1], vec![1.0, 2.0]), Err(CsrError::IndptrDecreasing { .. })));
        assert!(matches!(CsrMatrix::new(1, 3, vec![0, 2], vec![0], vec![1.0]), Err(CsrError::IndptrEnd { .. })));
        assert!(matches!(CsrMatrix::new(1, 3, vec![0, 1], vec![3], vec![1.0]), Err(CsrError::IndexOutOfRange { index: 3, .. })));
    }
}
