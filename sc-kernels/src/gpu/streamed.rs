//! Streamed (out-of-core) execution: a matrix that stays in host memory goes through the device
//! one block of rows at a time, so a step needs device memory for one block, not the matrix.
//!
//! The steps' `*_streamed` functions split the rows with [`csr_blocks`] / [`dense_blocks`],
//! upload each block ([`DeviceCsr::upload_rows`], through the pinned staging buffers), run
//! their in-memory kernels on it, and either combine the block's partial result (sums per gene,
//! the Gram matrix) or write the block back into the host matrix
//! ([`GpuContext::download_into`]). Row-wise
//! steps therefore give the in-memory result bit for bit; reductions differ only by the order
//! of their floating-point sums.

use super::{DeviceCsr, DeviceDense, GpuContext};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::Result;
use std::ops::Range;

/// Device bytes a CSR row block takes: offsets (8 bytes per row and one more), then 4 bytes of
/// column index and 4 of value per stored value.
pub fn csr_block_bytes(rows: usize, stored: usize) -> usize {
    (rows + 1) * 8 + stored * 8
}

/// Consecutive row ranges covering `x`, each as many rows as fit `block_bytes` of device memory
/// (at least one row, whatever its size).
pub fn csr_blocks(x: &CsrMatrix<f32>, block_bytes: usize) -> Vec<Range<usize>> {
    csr_blocks_with_output(x, block_bytes, 0)
}

/// As [`csr_blocks`] for a step that also makes `output_row_bytes` of device output per row
/// (a dense row of the scaled matrix).
pub fn csr_blocks_with_output(
    x: &CsrMatrix<f32>,
    block_bytes: usize,
    output_row_bytes: usize,
) -> Vec<Range<usize>> {
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < x.n_rows {
        let mut end = start + 1;
        // Grow by doubling, then shrink back by bisection: O(log n) probes per block.
        let fits = |end: usize| {
            csr_block_bytes(end - start, (x.indptr[end] - x.indptr[start]) as usize)
                + (end - start) * output_row_bytes
                <= block_bytes
        };
        let mut step = 1;
        while end < x.n_rows && fits((end + step).min(x.n_rows)) {
            end = (end + step).min(x.n_rows);
            step *= 2;
        }
        let mut hi = (end + step).min(x.n_rows);
        while hi > end + 1 {
            let mid = (end + hi) / 2;
            if fits(mid) {
                end = mid;
            } else {
                hi = mid;
            }
        }
        blocks.push(start..end);
        start = end;
    }
    blocks
}

/// Consecutive row ranges of an `n_rows x n_cols` f32 dense matrix, each within `block_bytes`
/// and a multiple of `align` rows (except the last; at least `align` rows).
pub fn dense_blocks(
    n_rows: usize,
    n_cols: usize,
    block_bytes: usize,
    align: usize,
) -> Vec<Range<usize>> {
    let align = align.max(1);
    let per_row = (n_cols * 4).max(1);
    let rows = (block_bytes / per_row / align).max(1) * align;
    (0..n_rows)
        .step_by(rows)
        .map(|s| s..(s + rows).min(n_rows))
        .collect()
}

/// The row offsets of rows `rows` of `x`, rebased to start at zero.
pub fn block_indptr(x: &CsrMatrix<f32>, rows: Range<usize>) -> Vec<u64> {
    let base = x.indptr[rows.start];
    x.indptr[rows.start..=rows.end]
        .iter()
        .map(|&p| p - base)
        .collect()
}

impl DeviceCsr {
    /// Rows `rows` of a host matrix as a device matrix of their own (offsets from zero).
    pub fn upload_rows(ctx: &GpuContext, x: &CsrMatrix<f32>, rows: Range<usize>) -> Result<Self> {
        let values = x.indptr[rows.start] as usize..x.indptr[rows.end] as usize;
        Ok(DeviceCsr {
            n_rows: rows.len(),
            n_cols: x.n_cols,
            indptr: ctx.upload(&block_indptr(x, rows))?,
            indices: ctx.upload(&x.indices[values.clone()])?,
            data: ctx.upload(&x.data[values])?,
        })
    }

    /// Rows `rows` of a host matrix with their offsets and values but **no column indices**
    /// (an empty array), for the row-wise kernels that never read them (log1p, normalize with a
    /// target sum): half the bytes over the bus. Only for such kernels.
    pub fn upload_rows_without_indices(
        ctx: &GpuContext,
        x: &CsrMatrix<f32>,
        rows: Range<usize>,
    ) -> Result<Self> {
        let values = x.indptr[rows.start] as usize..x.indptr[rows.end] as usize;
        Ok(DeviceCsr {
            n_rows: rows.len(),
            n_cols: x.n_cols,
            indptr: ctx.upload(&block_indptr(x, rows))?,
            indices: ctx.alloc(0)?,
            data: ctx.upload(&x.data[values])?,
        })
    }

    /// Writes this block's values back into rows `rows` of `x`, the matrix it was uploaded
    /// from by [`DeviceCsr::upload_rows`] (a row-wise step keeps the sparsity).
    pub fn download_values_into(
        &self,
        ctx: &GpuContext,
        x: &mut CsrMatrix<f32>,
        rows: Range<usize>,
    ) -> Result<()> {
        let values = x.indptr[rows.start] as usize..x.indptr[rows.end] as usize;
        ctx.download_into(&self.data, &mut x.data[values])
    }
}

impl DeviceDense {
    /// Rows `rows` of a host matrix as a device matrix of their own.
    pub fn upload_rows(ctx: &GpuContext, x: &DenseMatrix<f32>, rows: Range<usize>) -> Result<Self> {
        let g = x.n_cols;
        Ok(DeviceDense {
            n_rows: rows.len(),
            n_cols: g,
            data: ctx.upload(&x.data[rows.start * g..rows.end * g])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ragged(rows: usize) -> CsrMatrix<f32> {
        let mut indptr = vec![0u64];
        let mut indices = Vec::new();
        for i in 0..rows {
            let len = (i * 7919) % 13;
            for c in 0..len {
                indices.push(c as u32);
            }
            indptr.push(indices.len() as u64);
        }
        let data = vec![1.0; indices.len()];
        CsrMatrix {
            n_rows: rows,
            n_cols: 13,
            indptr,
            indices,
            data,
        }
    }

    #[test]
    fn csr_blocks_cover_the_rows_in_order_within_the_budget() {
        let x = ragged(1000);
        for budget in [1usize, 40, 100, 1000, 10_000, 1 << 30] {
            let blocks = csr_blocks(&x, budget);
            assert_eq!(blocks.first().map(|b| b.start), Some(0));
            assert_eq!(blocks.last().map(|b| b.end), Some(1000));
            for w in blocks.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for b in &blocks {
                assert!(!b.is_empty());
                let bytes =
                    csr_block_bytes(b.len(), (x.indptr[b.end] - x.indptr[b.start]) as usize);
                // Over budget only as a single row; maximal: one more row would not fit.
                assert!(bytes <= budget || b.len() == 1, "{b:?} at {budget}");
                if b.end < 1000 {
                    let more = csr_block_bytes(
                        b.len() + 1,
                        (x.indptr[b.end + 1] - x.indptr[b.start]) as usize,
                    );
                    assert!(more > budget, "{b:?} could take another row at {budget}");
                }
            }
        }
        assert!(csr_blocks(&ragged(0), 100).is_empty());
    }

    #[test]
    fn dense_blocks_are_aligned_and_within_the_budget() {
        let blocks = dense_blocks(10_000, 50, 4096 * 200 * 3 + 17, 4096 / 8);
        assert!(blocks.iter().all(|b| b.start % 512 == 0));
        assert!(blocks.iter().all(|b| b.len() * 200 <= 4096 * 200 * 3 + 17));
        assert_eq!(blocks.last().unwrap().end, 10_000);
        // A budget below one aligned group still makes progress.
        assert_eq!(dense_blocks(5, 1000, 1, 4), vec![0..4, 4..5]);
    }

    #[test]
    fn block_offsets_start_at_zero_and_keep_row_lengths() {
        let x = ragged(50);
        let p = block_indptr(&x, 10..20);
        assert_eq!(p.len(), 11);
        assert_eq!(p[0], 0);
        for k in 0..10 {
            assert_eq!((p[k + 1] - p[k]) as usize, x.row_range(10 + k).len());
        }
    }
}
