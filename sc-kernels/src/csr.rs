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

impl<T> CsrMatrix<T> {
    /// Builds a matrix after checking every invariant.
    pub fn new(
        n_rows: usize,
        n_cols: usize,
        indptr: Vec<u64>,
        indices: Vec<u32>,
        data: Vec<T>,
    ) -> Result<Self, CsrError> {
        let m = CsrMatrix {
            n_rows,
            n_cols,
            indptr,
            indices,
            data,
        };
        m.validate()?;
        Ok(m)
    }

    /// An all-zero matrix.
    pub fn zeros(n_rows: usize, n_cols: usize) -> Self {
        CsrMatrix {
            n_rows,
            n_cols,
            indptr: vec![0; n_rows + 1],
            indices: Vec::new(),
            data: Vec::new(),
        }
    }

    /// Checks the invariants listed on the fields.
    pub fn validate(&self) -> Result<(), CsrError> {
        validate_parts(
            self.n_rows,
            self.n_cols,
            &self.indptr,
            &self.indices,
            self.data.len(),
        )
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

use crate::error::{CsrError, KernelError};
type KResult<T> = crate::error::Result<T>;
use crate::real::Real;
use rayon::prelude::*;

/// Rows per parallel task in the row-parallel loops.
pub(crate) const ROW_BLOCK: usize = 512;

/// Splits `indices`/`data` into the stored ranges of consecutive row blocks, so that blocks can
/// be filled in parallel. Returns `(first_row, indices_part, data_part)` per block.
pub(crate) fn split_row_blocks<'a, T>(
    indptr: &[u64],
    mut indices: &'a mut [u32],
    mut data: &'a mut [T],
    block: usize,
) -> Vec<(usize, &'a mut [u32], &'a mut [T])> {
    let n_rows = indptr.len() - 1;
    let mut out = Vec::with_capacity(n_rows.div_ceil(block.max(1)));
    let mut start = 0;
    while start < n_rows {
        let end = (start + block).min(n_rows);
        let len = (indptr[end] - indptr[start]) as usize;
        let (a, rest_i) = std::mem::take(&mut indices).split_at_mut(len);
        let (b, rest_d) = std::mem::take(&mut data).split_at_mut(len);
        indices = rest_i;
        data = rest_d;
        out.push((start, a, b));
        start = end;
    }
    out
}

/// Builds a CSR matrix row by row in parallel: `count(i)` says how many values row `i` stores and
/// `fill(i, indices, data)` writes them.
pub(crate) fn build_csr<T, C, F>(n_rows: usize, n_cols: usize, count: C, fill: F) -> CsrMatrix<T>
where
    T: Copy + Default + Send + Sync,
    C: Fn(usize) -> usize + Sync,
    F: Fn(usize, &mut [u32], &mut [T]) + Sync,
{
    let counts: Vec<usize> = (0..n_rows).into_par_iter().map(&count).collect();
    let mut indptr = Vec::with_capacity(n_rows + 1);
    let mut acc = 0u64;
    indptr.push(0);
    for c in &counts {
        acc += *c as u64;
        indptr.push(acc);
    }
    let nnz = acc as usize;
    let mut indices = vec![0u32; nnz];
    let mut data = vec![T::default(); nnz];
    split_row_blocks(&indptr, &mut indices, &mut data, ROW_BLOCK)
        .into_par_iter()
        .for_each(|(first, idx, dat)| {
            let base = indptr[first] as usize;
            let last = (first + ROW_BLOCK).min(n_rows);
            for i in first..last {
                let r = indptr[i] as usize - base..indptr[i + 1] as usize - base;
                fill(i, &mut idx[r.clone()], &mut dat[r]);
            }
        });
    CsrMatrix {
        n_rows,
        n_cols,
        indptr,
        indices,
        data,
    }
}

/// A matrix from each row's entries, columns ascending within a row.
pub(crate) fn csr_from_rows<T: Copy + Default + Send + Sync>(
    n_rows: usize,
    n_cols: usize,
    rows: &[Vec<(u32, T)>],
) -> CsrMatrix<T> {
    build_csr(
        n_rows,
        n_cols,
        |i| rows[i].len(),
        |i, ci, vi| {
            for (t, &(j, v)) in rows[i].iter().enumerate() {
                ci[t] = j;
                vi[t] = v;
            }
        },
    )
}

impl<T: Copy + Default + Send + Sync> CsrMatrix<T> {
    /// Row by row, the union of the patterns of `self` and `other` (the same shape, columns
    /// ascending within each row): at each column `combine(x, y)`, a side that lacks the
    /// column giving `T::default()` (zero); `None` leaves the entry out. `A + A^T` and UMAP's
    /// fuzzy union of a graph with its transpose are this with `other` the transpose.
    pub(crate) fn union_with(
        &self,
        other: &CsrMatrix<T>,
        combine: impl Fn(T, T) -> Option<T> + Sync,
    ) -> CsrMatrix<T> {
        let zero = T::default();
        let rows: Vec<Vec<(u32, T)>> = (0..self.n_rows)
            .into_par_iter()
            .map(|i| {
                let (ca, va) = self.row(i);
                let (cb, vb) = other.row(i);
                let mut out = Vec::with_capacity(ca.len() + cb.len());
                let (mut p, mut q) = (0, 0);
                while p < ca.len() || q < cb.len() {
                    let (j, x, y) = if q >= cb.len() || (p < ca.len() && ca[p] < cb[q]) {
                        p += 1;
                        (ca[p - 1], va[p - 1], zero)
                    } else if p >= ca.len() || cb[q] < ca[p] {
                        q += 1;
                        (cb[q - 1], zero, vb[q - 1])
                    } else {
                        p += 1;
                        q += 1;
                        (ca[p - 1], va[p - 1], vb[q - 1])
                    };
                    if let Some(v) = combine(x, y) {
                        out.push((j, v));
                    }
                }
                out
            })
            .collect();
        csr_from_rows(self.n_rows, self.n_cols, &rows)
    }
}

impl<T: Copy + Send + Sync> CsrMatrix<T> {
    /// A copy made by every core (an atlas's graph, 2.5 GB, takes about a second on one).
    pub fn par_clone(&self) -> Self {
        CsrMatrix {
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            indptr: self.indptr.par_iter().copied().collect(),
            indices: self.indices.par_iter().copied().collect(),
            data: self.data.par_iter().copied().collect(),
        }
    }
}

impl<T: Copy + Default + std::ops::AddAssign + Send + Sync> CsrMatrix<T> {
    /// The matrix with each row's values in one column added into one, in storage order, and
    /// each row's columns increasing: how scipy reads a matrix that stores a column twice
    /// (`sum_duplicates`), and so scanpy. A densified row would keep one of the values.
    pub fn with_duplicates_summed(&self) -> Self {
        let rows: Vec<Vec<(u32, T)>> = (0..self.n_rows)
            .into_par_iter()
            .map(|i| {
                let (c, v) = self.row(i);
                let mut pairs: Vec<(u32, usize)> = c.iter().copied().zip(0..).collect();
                pairs.sort_unstable();
                let mut out: Vec<(u32, T)> = Vec::with_capacity(pairs.len());
                for (j, at) in pairs {
                    match out.last_mut() {
                        Some((last, sum)) if *last == j => *sum += v[at],
                        _ => out.push((j, v[at])),
                    }
                }
                out
            })
            .collect();
        csr_from_rows(self.n_rows, self.n_cols, &rows)
    }

    /// `self`, or [`Self::with_duplicates_summed`] when a row stores a column twice (found on
    /// every core); and whether it was summed.
    pub fn into_duplicates_summed(self) -> (Self, bool) {
        match first_row_with_a_column_twice(&self.indptr, &self.indices) {
            Some(_) => (self.with_duplicates_summed(), true),
            None => (self, false),
        }
    }
}

/// The first row that stores a column twice, on every core: a row in increasing column order
/// (the usual) costs a comparison a value, another is sorted on the side. The offsets are
/// valid ([`validate_parts`]).
pub fn first_row_with_a_column_twice(indptr: &[u64], indices: &[u32]) -> Option<usize> {
    (0..indptr.len().saturating_sub(1))
        .into_par_iter()
        .find_first(|&r| {
            let row = &indices[indptr[r] as usize..indptr[r + 1] as usize];
            // Without early exit, so that it vectorizes: 28 ms against 47 for 100 M stored
            // values in sorted rows of 100, on 2 cores (as fast as `validate_parts`' pass).
            if row.windows(2).fold(true, |ok, w| ok & (w[0] < w[1])) {
                return false;
            }
            let mut sorted = row.to_vec();
            sorted.sort_unstable();
            sorted.windows(2).any(|w| w[0] == w[1])
        })
}

impl<T: Real> CsrMatrix<T> {
    /// Fails on the first NaN or infinite stored value.
    pub fn check_finite(&self) -> KResult<()> {
        self.find_bad(|v| !v.is_finite())
            .map_or(Ok(()), |(row, col, v)| {
                Err(KernelError::NonFinite { row, col, value: v })
            })
    }

    /// Fails on the first stored value that is not a finite non-negative number (what counts must be).
    pub fn check_counts(&self) -> KResult<()> {
        // Two passes: one pass testing both took 54-58 ms against 47-48 ms for 200,000 cells
        // (`benches split_host`).
        self.check_finite()?;
        self.find_bad(|v| v < T::ZERO)
            .map_or(Ok(()), |(row, col, v)| {
                Err(KernelError::Negative { row, col, value: v })
            })
    }

    /// The first stored value (in row order) for which `bad` holds.
    fn find_bad(&self, bad: impl Fn(T) -> bool + Sync) -> Option<(usize, usize, f64)> {
        let p = crate::first_match::par_position_first(&self.data, |&v| bad(v))?;
        let row = self.indptr.partition_point(|&o| o as usize <= p) - 1;
        Some((row, self.indices[p] as usize, self.data[p].to_f64()))
    }

    /// The rows whose mask entry is true (AnnData's `adata[mask]`).
    pub fn select_rows(&self, mask: &[bool]) -> KResult<Self> {
        if mask.len() != self.n_rows {
            return Err(KernelError::Shape(format!(
                "row mask has {} entries for {} rows",
                mask.len(),
                self.n_rows
            )));
        }
        let rows: Vec<usize> = (0..self.n_rows).filter(|&i| mask[i]).collect();
        Ok(self.take_rows(&rows))
    }

    /// The listed rows, in the given order.
    pub fn take_rows(&self, rows: &[usize]) -> Self {
        build_csr(
            rows.len(),
            self.n_cols,
            |k| self.row_range(rows[k]).len(),
            |k, idx, dat| {
                let (c, v) = self.row(rows[k]);
                idx.copy_from_slice(c);
                dat.copy_from_slice(v);
            },
        )
    }

    /// The columns whose mask entry is true (AnnData's `adata[:, mask]`), keeping the order of the
    /// stored values within each row.
    pub fn select_cols(&self, mask: &[bool]) -> KResult<Self> {
        if mask.len() != self.n_cols {
            return Err(KernelError::Shape(format!(
                "column mask has {} entries for {} columns",
                mask.len(),
                self.n_cols
            )));
        }
        let mut new_index = vec![u32::MAX; self.n_cols];
        let mut n = 0u32;
        for (j, &m) in mask.iter().enumerate() {
            if m {
                new_index[j] = n;
                n += 1;
            }
        }
        Ok(build_csr(
            self.n_rows,
            n as usize,
            |i| self.row(i).0.iter().filter(|&&c| mask[c as usize]).count(),
            |i, idx, dat| {
                let (c, v) = self.row(i);
                let mut k = 0;
                for (&cc, &vv) in c.iter().zip(v) {
                    let ni = new_index[cc as usize];
                    if ni != u32::MAX {
                        idx[k] = ni;
                        dat[k] = vv;
                        k += 1;
                    }
                }
            },
        ))
    }

    /// The dense row-major form.
    pub fn to_dense(&self) -> crate::dense::DenseMatrix<T> {
        let mut out = crate::dense::DenseMatrix::zeros(self.n_rows, self.n_cols);
        let nc = self.n_cols;
        if nc > 0 {
            out.data
                .par_chunks_mut(nc)
                .enumerate()
                .for_each(|(i, row)| {
                    let (c, v) = self.row(i);
                    for (&cc, &vv) in c.iter().zip(v) {
                        row[cc as usize] = vv;
                    }
                });
        }
        out
    }

    /// A CSR matrix from a dense one, storing the non-zero values.
    pub fn from_dense(m: &crate::dense::DenseMatrix<T>) -> Self {
        build_csr(
            m.n_rows,
            m.n_cols,
            |i| m.row(i).iter().filter(|&&v| v != T::ZERO).count(),
            |i, idx, dat| {
                let mut k = 0;
                for (j, &v) in m.row(i).iter().enumerate() {
                    if v != T::ZERO {
                        idx[k] = j as u32;
                        dat[k] = v;
                        k += 1;
                    }
                }
            },
        )
    }

    /// The transpose (equivalently, this matrix in CSC form), with sorted indices.
    pub fn transpose(&self) -> Self {
        let mut counts = vec![0u64; self.n_cols + 1];
        for &c in &self.indices {
            counts[c as usize + 1] += 1;
        }
        for j in 0..self.n_cols {
            counts[j + 1] += counts[j];
        }
        let indptr = counts.clone();
        let mut next = counts;
        let mut indices = vec![0u32; self.nnz()];
        let mut data = vec![T::ZERO; self.nnz()];
        for i in 0..self.n_rows {
            let (c, v) = self.row(i);
            for (&cc, &vv) in c.iter().zip(v) {
                let p = next[cc as usize] as usize;
                indices[p] = i as u32;
                data[p] = vv;
                next[cc as usize] += 1;
            }
        }
        CsrMatrix {
            n_rows: self.n_cols,
            n_cols: self.n_rows,
            indptr,
            indices,
            data,
        }
    }

    /// Applies `f` to every stored value, in parallel.
    pub fn map_values_inplace(&mut self, f: impl Fn(T) -> T + Sync) {
        self.data
            .par_chunks_mut(1 << 16)
            .for_each(|ch| ch.iter_mut().for_each(|v| *v = f(*v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_stored_twice_is_found_and_summed_as_scipy_reads_it() {
        // Row 0 increasing, row 1 out of order without repeats, row 2 with column 3 twice
        // (apart), row 3 with column 1 twice (side by side).
        let m = CsrMatrix::new(
            4,
            5,
            vec![0, 3, 5, 9, 11],
            vec![0, 2, 4, 3, 1, 3, 0, 4, 3, 1, 1],
            vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
        )
        .unwrap();
        assert_eq!(
            first_row_with_a_column_twice(&m.indptr, &m.indices),
            Some(2)
        );
        let s = m.with_duplicates_summed();
        assert_eq!(s.indptr, vec![0, 3, 5, 8, 9]);
        assert_eq!(s.indices, vec![0, 2, 4, 1, 3, 0, 3, 4, 1]);
        assert_eq!(
            s.data,
            vec![1.0, 2.0, 3.0, 5.0, 4.0, 7.0, 6.0 + 9.0, 8.0, 21.0]
        );
        assert_eq!(
            s.to_dense().data.iter().sum::<f32>(),
            m.data.iter().sum::<f32>()
        );
        assert_eq!(first_row_with_a_column_twice(&s.indptr, &s.indices), None);
        assert_eq!(m.clone().into_duplicates_summed(), (s.clone(), true));
        assert_eq!(s.clone().into_duplicates_summed(), (s, false));
        let (none, rows) = (CsrMatrix::<f32>::zeros(3, 2), &m.indptr[..3]);
        assert_eq!(
            first_row_with_a_column_twice(&none.indptr, &none.indices),
            None
        );
        assert_eq!(first_row_with_a_column_twice(rows, &m.indices[..5]), None);
    }

    #[test]
    fn a_parallel_clone_is_a_clone() {
        let n = 50_000;
        let indptr: Vec<u64> = (0..=n as u64).map(|r| r * 3).collect();
        let indices: Vec<u32> = (0..3 * n as u32).map(|i| (i * 7919) % n as u32).collect();
        let data: Vec<f32> = (0..3 * n).map(|i| i as f32 * 0.5).collect();
        let m = CsrMatrix::new(n, n, indptr, indices, data).unwrap();
        assert_eq!(m.par_clone(), m);
    }

    #[test]
    fn counts_refuse_values_that_are_not_finite_then_negative_ones() {
        let with = |values: [f32; 4]| {
            CsrMatrix::new(2, 3, vec![0, 2, 4], vec![0, 2, 1, 2], values.to_vec()).unwrap()
        };
        assert!(with([1.0, 0.0, 3.0, 2.0]).check_counts().is_ok());
        let first = |values| with(values).check_counts().unwrap_err();
        assert!(matches!(
            first([1.0, -2.0, 3.0, -2.0]),
            KernelError::Negative { row: 0, col: 2, .. }
        ));
        // A value that is not a number is reported before any negative one.
        assert!(matches!(
            first([1.0, -2.0, f32::NAN, 2.0]),
            KernelError::NonFinite { row: 1, col: 1, .. }
        ));
        assert!(matches!(
            first([1.0, 2.0, 3.0, f32::INFINITY]),
            KernelError::NonFinite { row: 1, col: 2, .. }
        ));
    }

    #[test]
    fn find_bad_equals_the_row_by_row_search() {
        use rand::{Rng, SeedableRng};
        // The search before the block scan: first row with a bad value, first bad value in it.
        fn row_by_row(
            x: &CsrMatrix<f32>,
            bad: impl Fn(f32) -> bool,
        ) -> Option<(usize, usize, f64)> {
            (0..x.n_rows).find_map(|i| {
                let (c, v) = x.row(i);
                v.iter()
                    .position(|&a| bad(a))
                    .map(|k| (i, c[k] as usize, v[k] as f64))
            })
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for case in 0..200 {
            let (rows, cols) = (rng.random_range(0..40), rng.random_range(1..3000));
            let mut d = vec![0f32; rows * cols];
            for v in d.iter_mut() {
                if rng.random_bool(0.2) {
                    *v = rng.random_range(1..9) as f32;
                }
            }
            let mut x =
                CsrMatrix::from_dense(&crate::dense::DenseMatrix::new(rows, cols, d).unwrap());
            for _ in 0..case % 4 {
                if x.nnz() > 0 {
                    let p = rng.random_range(0..x.nnz());
                    x.data[p] = [f32::NAN, f32::INFINITY, -2.0][rng.random_range(0..3)];
                }
            }
            let finite = |v: f32| !v.is_finite();
            assert_eq!(
                x.find_bad(finite).map(|b| (b.0, b.1)),
                row_by_row(&x, finite).map(|b| (b.0, b.1))
            );
            let neg = |v: f32| v < 0.0;
            assert_eq!(x.find_bad(neg), row_by_row(&x, neg));
        }
    }

    #[test]
    fn accepts_a_valid_matrix_and_reads_rows() {
        let m = CsrMatrix::new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0f32, 2.0, 3.0]).unwrap();
        assert_eq!(m.nnz(), 3);
        assert_eq!(m.row(0), (&[0u32, 2][..], &[1.0f32, 2.0][..]));
        assert_eq!(m.row(1), (&[1u32][..], &[3.0f32][..]));
    }

    #[test]
    fn names_each_malformation() {
        assert!(matches!(
            CsrMatrix::new(2, 3, vec![0, 1], vec![0], vec![1.0]),
            Err(CsrError::IndptrLength { .. })
        ));
        assert!(matches!(
            CsrMatrix::new(1, 3, vec![1, 1], vec![], Vec::<f32>::new()),
            Err(CsrError::IndptrStart(1))
        ));
        assert!(matches!(
            CsrMatrix::new(2, 3, vec![0, 2, 1], vec![0, 1], vec![1.0, 2.0]),
            Err(CsrError::IndptrDecreasing { .. })
        ));
        assert!(matches!(
            CsrMatrix::new(1, 3, vec![0, 2], vec![0], vec![1.0]),
            Err(CsrError::IndptrEnd { .. })
        ));
        assert!(matches!(
            CsrMatrix::new(1, 3, vec![0, 1], vec![3], vec![1.0]),
            Err(CsrError::IndexOutOfRange { index: 3, .. })
        ));
    }
}

/// The checks of [`CsrMatrix::validate`] on a matrix's parts (`nnz` stored values), for parts
/// held elsewhere (another library's arrays about to be uploaded).
pub fn validate_parts(
    n_rows: usize,
    n_cols: usize,
    indptr: &[u64],
    indices: &[u32],
    nnz: usize,
) -> Result<(), CsrError> {
    if n_cols > u32::MAX as usize + 1 {
        return Err(CsrError::TooManyColumns(n_cols));
    }
    if indptr.len() != n_rows + 1 {
        return Err(CsrError::IndptrLength {
            got: indptr.len(),
            expected: n_rows + 1,
        });
    }
    if indptr[0] != 0 {
        return Err(CsrError::IndptrStart(indptr[0]));
    }
    for (row, w) in indptr.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(CsrError::IndptrDecreasing {
                row,
                from: w[0],
                to: w[1],
            });
        }
    }
    let end = *indptr.last().unwrap();
    if end as usize != nnz || indices.len() != nnz {
        return Err(CsrError::IndptrEnd {
            end,
            nnz,
            indices: indices.len(),
        });
    }
    if let Some(position) = crate::first_match::par_first_index_past(indices, n_cols) {
        return Err(CsrError::IndexOutOfRange {
            position,
            index: indices[position],
            n_cols,
        });
    }
    Ok(())
}

/// A fixed counts pattern (`rows x cols`) the unit tests compare with scanpy's figures, which the
/// same formula gave in Python.
#[cfg(test)]
pub(crate) fn fixed_counts(rows: usize, cols: usize) -> CsrMatrix<f32> {
    let data = (0..rows)
        .flat_map(|i| {
            (0..cols).map(move |j| {
                if (i + 2 * j) % 3 != 0 {
                    (((i * 37 + j * 101 + i * j) % 17) * (j % 7)) as f32
                } else {
                    0.0
                }
            })
        })
        .collect();
    CsrMatrix::from_dense(&crate::dense::DenseMatrix::new(rows, cols, data).unwrap())
}
