//! Row-major dense matrices (numpy's C order, the layout h5ad files store).

use crate::error::{KernelError, Result};
use crate::real::Real;

/// A dense matrix; element `(i, j)` is `data[i * n_cols + j]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseMatrix<T> {
    pub n_rows: usize,
    pub n_cols: usize,
    pub data: Vec<T>,
}

impl<T: Copy + Default> DenseMatrix<T> {
    /// Wraps `data` after checking its length.
    pub fn new(n_rows: usize, n_cols: usize, data: Vec<T>) -> Result<Self> {
        if data.len() != n_rows * n_cols {
            return Err(KernelError::Shape(format!(
                "dense matrix {n_rows} x {n_cols} needs {} values, got {}",
                n_rows * n_cols,
                data.len()
            )));
        }
        Ok(DenseMatrix {
            n_rows,
            n_cols,
            data,
        })
    }

    /// An all-zero matrix.
    pub fn zeros(n_rows: usize, n_cols: usize) -> Self {
        DenseMatrix {
            n_rows,
            n_cols,
            data: vec![T::default(); n_rows * n_cols],
        }
    }

    /// Row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.n_cols..(i + 1) * self.n_cols]
    }

    /// Row `i`, mutable.
    #[inline]
    pub fn row_mut(&mut self, i: usize) -> &mut [T] {
        let c = self.n_cols;
        &mut self.data[i * c..(i + 1) * c]
    }

    /// Element `(i, j)`.
    #[inline]
    pub fn get(&self, i: usize, j: usize) -> T {
        self.data[i * self.n_cols + j]
    }

    /// The rows whose mask entry is true.
    pub fn select_rows(&self, mask: &[bool]) -> Result<Self> {
        if mask.len() != self.n_rows {
            return Err(KernelError::Shape(format!(
                "row mask has {} entries for {} rows",
                mask.len(),
                self.n_rows
            )));
        }
        let mut data = Vec::with_capacity(mask.iter().filter(|&&m| m).count() * self.n_cols);
        for (i, _) in mask.iter().enumerate().filter(|(_, &m)| m) {
            data.extend_from_slice(self.row(i));
        }
        let n = data.len() / self.n_cols.max(1);
        let n_rows = if self.n_cols == 0 {
            mask.iter().filter(|&&m| m).count()
        } else {
            n
        };
        Ok(DenseMatrix {
            n_rows,
            n_cols: self.n_cols,
            data,
        })
    }

    /// The columns whose mask entry is true.
    pub fn select_cols(&self, mask: &[bool]) -> Result<Self> {
        if mask.len() != self.n_cols {
            return Err(KernelError::Shape(format!(
                "column mask has {} entries for {} columns",
                mask.len(),
                self.n_cols
            )));
        }
        let keep: Vec<usize> = (0..self.n_cols).filter(|&j| mask[j]).collect();
        let mut data = Vec::with_capacity(self.n_rows * keep.len());
        for i in 0..self.n_rows {
            let r = self.row(i);
            data.extend(keep.iter().map(|&j| r[j]));
        }
        Ok(DenseMatrix {
            n_rows: self.n_rows,
            n_cols: keep.len(),
            data,
        })
    }
}

impl<T: Real> DenseMatrix<T> {
    /// Fails on the first NaN or infinite value (in row order), found on every core.
    pub fn check_finite(&self) -> Result<()> {
        check_finite_rows(&self.data, self.n_cols)
    }
}

/// [`DenseMatrix::check_finite`] of row-major `values` in rows of `n_cols`, for a step that
/// holds them as a slice: the first NaN or infinite value named by row and column.
pub fn check_finite_rows<T: Real>(values: &[T], n_cols: usize) -> Result<()> {
    let d = n_cols.max(1);
    match crate::first_match::par_position_first(values, |v| !v.is_finite()) {
        Some(p) => Err(KernelError::NonFinite {
            row: p / d,
            col: p % d,
            value: values[p].to_f64(),
        }),
        None => Ok(()),
    }
}
