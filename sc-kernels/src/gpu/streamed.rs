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
use crate::error::{KernelError, Result};
use rmm_cuda::Stream;
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
    rebased(&x.indptr, rows)
}

fn rebased(indptr: &[u64], rows: Range<usize>) -> Vec<u64> {
    let base = indptr[rows.start];
    indptr[rows.start..=rows.end]
        .iter()
        .map(|&p| p - base)
        .collect()
}

impl DeviceCsr {
    /// Rows `rows` of a host matrix as a device matrix of their own (offsets from zero).
    pub fn upload_rows(ctx: &GpuContext, x: &CsrMatrix<f32>, rows: Range<usize>) -> Result<Self> {
        let values = x.indptr[rows.start] as usize..x.indptr[rows.end] as usize;
        Self::upload_block(
            ctx,
            x.n_cols,
            &x.indptr,
            Some(&x.indices),
            rows,
            &x.data[values],
        )
    }

    /// Rows `rows` of the CSR matrix with offsets `indptr` and column indices `indices` (`None`:
    /// none uploaded, an empty array, for kernels that never read them), whose stored values
    /// are `values`.
    fn upload_block(
        ctx: &GpuContext,
        n_cols: usize,
        indptr: &[u64],
        indices: Option<&[u32]>,
        rows: Range<usize>,
        values: &[f32],
    ) -> Result<Self> {
        let span = indptr[rows.start] as usize..indptr[rows.end] as usize;
        Ok(DeviceCsr {
            n_rows: rows.len(),
            n_cols,
            indices: match indices {
                Some(i) => ctx.upload(&i[span])?,
                None => ctx.alloc(0)?,
            },
            indptr: ctx.upload(&rebased(indptr, rows))?,
            data: ctx.upload(values)?,
        })
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

/// A device block made on the copy lane, to be handed to the step's stream.
pub trait DeviceBlock: Send {
    /// Orders the block's later use and its free on `stream` (after the lane's copies).
    fn move_to(&mut self, stream: &Stream) -> Result<()>;
}

impl DeviceBlock for DeviceCsr {
    fn move_to(&mut self, stream: &Stream) -> Result<()> {
        self.indptr.set_stream(stream)?;
        self.indices.set_stream(stream)?;
        self.data.set_stream(stream)?;
        Ok(())
    }
}

impl DeviceBlock for DeviceDense {
    fn move_to(&mut self, stream: &Stream) -> Result<()> {
        Ok(self.data.set_stream(stream)?)
    }
}

/// Runs `work(block, k)` on each block `k` in order while the next one is uploaded:
/// `upload(lane, k)` runs on a helper thread with the context's copy lane (a second stream and
/// its own pinned buffers), so block k+1 crosses the bus while block k's kernels and downloads
/// run on the step's stream. Two blocks are on the device at a time.
pub fn for_each_block<B, U, W>(
    ctx: &GpuContext,
    n_blocks: usize,
    upload: U,
    mut work: W,
) -> Result<()>
where
    B: DeviceBlock,
    U: Fn(&GpuContext, usize) -> Result<B> + Sync,
    W: FnMut(B, usize) -> Result<()>,
{
    if n_blocks == 0 {
        return Ok(());
    }
    let lane = ctx.copy_lane()?;
    let fetch = |k: usize| -> Result<B> {
        lane.bind_to_thread()?;
        upload(lane, k)
    };
    std::thread::scope(|scope| {
        let fetch = &fetch;
        let mut next = Some(scope.spawn(move || fetch(0)));
        for k in 0..n_blocks {
            let handle = next.take().expect("spawned for every block");
            let mut block = handle
                .join()
                .map_err(|_| KernelError::Gpu("the block upload thread panicked".into()))??;
            if k + 1 < n_blocks {
                next = Some(scope.spawn(move || fetch(k + 1)));
            }
            block.move_to(ctx.stream())?;
            if let Err(e) = work(block, k) {
                // Let the upload in flight finish before its memory goes.
                if let Some(h) = next.take() {
                    let _ = h.join();
                }
                return Err(e);
            }
        }
        Ok(())
    })
}

/// The row blocks of a matrix that is not on the device, made there one at a time: a host
/// matrix's rows uploaded ([`HostRows`]), or cells generated (and transformed) on the device.
pub trait RowBlocks: Sync {
    fn n_rows(&self) -> usize;
    fn n_cols(&self) -> usize;
    /// The blocks' row ranges, in order, covering `0..n_rows`.
    fn ranges(&self) -> &[Range<usize>];
    /// Block `k` on `lane` (the copy lane: [`for_each_row_block`] hands it to the step's
    /// stream).
    fn make(&self, lane: &GpuContext, k: usize) -> Result<DeviceCsr>;
}

/// The row blocks of a host CSR matrix, uploaded through the pinned staging buffers.
pub struct HostRows<'a> {
    pub x: &'a CsrMatrix<f32>,
    pub ranges: Vec<Range<usize>>,
}

impl<'a> HostRows<'a> {
    /// `x` cut by [`csr_blocks`] into blocks of at most `block_bytes` of device memory.
    pub fn new(x: &'a CsrMatrix<f32>, block_bytes: usize) -> Self {
        HostRows {
            x,
            ranges: csr_blocks(x, block_bytes),
        }
    }
}

impl RowBlocks for HostRows<'_> {
    fn n_rows(&self) -> usize {
        self.x.n_rows
    }

    fn n_cols(&self) -> usize {
        self.x.n_cols
    }

    fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }

    fn make(&self, lane: &GpuContext, k: usize) -> Result<DeviceCsr> {
        DeviceCsr::upload_rows(lane, self.x, self.ranges[k].clone())
    }
}

/// [`for_each_block`] over the row blocks of `src`: `work(block, rows)`.
pub fn for_each_row_block<W>(ctx: &GpuContext, src: &dyn RowBlocks, mut work: W) -> Result<()>
where
    W: FnMut(DeviceCsr, Range<usize>) -> Result<()>,
{
    let ranges = src.ranges();
    for_each_block(
        ctx,
        ranges.len(),
        |lane, k| src.make(lane, k),
        |block, k| work(block, ranges[k].clone()),
    )
}

/// [`for_each_block`] over the row blocks of a host CSR matrix.
pub fn for_each_csr_block<W>(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    blocks: &[Range<usize>],
    work: W,
) -> Result<()>
where
    W: FnMut(DeviceCsr, Range<usize>) -> Result<()>,
{
    let src = HostRows {
        x,
        ranges: blocks.to_vec(),
    };
    for_each_row_block(ctx, &src, work)
}

/// A row-wise step over a host CSR matrix, in place: each block is uploaded (with its column
/// indices only when `with_indices`: most row-wise kernels read offsets and values alone),
/// changed by `work` on the device and its values written back, the next block crossing the bus
/// meanwhile ([`for_each_block`]).
pub fn update_values_in_place<W>(
    ctx: &GpuContext,
    x: &mut CsrMatrix<f32>,
    blocks: &[Range<usize>],
    with_indices: bool,
    mut work: W,
) -> Result<()>
where
    W: FnMut(&mut DeviceCsr, Range<usize>) -> Result<()>,
{
    let CsrMatrix {
        n_cols,
        indptr,
        indices,
        data,
        ..
    } = x;
    let (n_cols, indptr, indices) = (*n_cols, &*indptr, &*indices);
    // Each block's values as a slice of its own: the helper thread reads block k+1's while
    // block k's are written back.
    let slots: Vec<_> = split_values(indptr, blocks, data)
        .into_iter()
        .map(std::sync::Mutex::new)
        .collect();
    for_each_block(
        ctx,
        blocks.len(),
        |lane, k| {
            let values = slots[k].lock().expect("not poisoned");
            let indices = with_indices.then_some(&indices[..]);
            DeviceCsr::upload_block(lane, n_cols, indptr, indices, blocks[k].clone(), &values)
        },
        |mut block, k| {
            work(&mut block, blocks[k].clone())?;
            let mut values = slots[k].lock().expect("not poisoned");
            ctx.download_into(&block.data, &mut values)
        },
    )
}

/// The values of each of `blocks` (consecutive row ranges) as disjoint slices of `data`.
fn split_values<'a>(
    indptr: &[u64],
    blocks: &[Range<usize>],
    data: &'a mut [f32],
) -> Vec<&'a mut [f32]> {
    let mut slots = Vec::with_capacity(blocks.len());
    let mut at = blocks.first().map_or(0, |b| indptr[b.start] as usize);
    let mut rest = &mut data[at..];
    for b in blocks {
        let end = indptr[b.end] as usize;
        let (mine, tail) = rest.split_at_mut(end - at);
        slots.push(mine);
        rest = tail;
        at = end;
    }
    slots
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
    fn each_block_gets_exactly_its_rows_values() {
        let mut x = ragged(300);
        for (k, v) in x.data.iter_mut().enumerate() {
            *v = k as f32;
        }
        let blocks = csr_blocks(&x, 500);
        assert!(blocks.len() > 5);
        let indptr = x.indptr.clone();
        let slots = split_values(&indptr, &blocks, &mut x.data);
        assert_eq!(slots.len(), blocks.len());
        for (b, s) in blocks.iter().zip(&slots) {
            let want: Vec<f32> = (indptr[b.start]..indptr[b.end]).map(|k| k as f32).collect();
            assert_eq!(&s[..], &want[..]);
        }
        // A tail of the rows only.
        let tail = vec![120..200, 200..300];
        let slots = split_values(&indptr, &tail, &mut x.data);
        assert_eq!(slots[0].first().copied(), Some(indptr[120] as f32));
        assert_eq!(slots[1].len() as u64, indptr[300] - indptr[200]);
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
