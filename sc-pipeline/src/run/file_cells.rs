//! The input file as a [`CellSource`]: a run whose X is larger than the host memory it may use
//! (`--host-memory-limit`) reads its cells' rows from the h5ad file or zarr store block by
//! block, for every pass ([`RowChunks`]: one part of `data` and `indices` per block, only the
//! row offsets held for the whole file), and counts what it read, so that each step's note
//! says how much its passes read and how fast.

use crate::anndata::Matrix;
use crate::io::RowChunks;
use crate::steps::generated_blocks::CellSource;
use crate::Result;
use sc_kernels::gpu::{DeviceCsr, GpuContext};
use sc_kernels::{CsrMatrix, KernelError};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// An h5ad file's or zarr store's X, read by rows for every pass.
pub struct FileCells {
    path: PathBuf,
    chunks: Box<dyn RowChunks>,
    /// Bytes read and nanoseconds spent reading since [`FileCells::reads_note`] last took them.
    bytes: AtomicU64,
    nanos: AtomicU64,
}

impl FileCells {
    /// Opens `path` (its obs, var and X's row offsets are read now).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(FileCells {
            path: path.to_path_buf(),
            chunks: crate::io::open_row_chunks(path)?,
            bytes: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
        })
    }

    pub fn chunks(&self) -> &dyn RowChunks {
        self.chunks.as_ref()
    }
}

impl CellSource for FileCells {
    fn n_genes(&self) -> usize {
        self.chunks.n_vars()
    }

    fn stored_values(&self, cells: Range<usize>) -> u64 {
        self.chunks.stored_values(cells)
    }

    /// The bytes read since the last call and their rate.
    fn reads_note(&self) -> String {
        let bytes = self.bytes.swap(0, Ordering::Relaxed);
        let secs = self.nanos.swap(0, Ordering::Relaxed) as f64 * 1e-9;
        match bytes {
            0 => String::new(),
            b => format!(
                "; read {:.2} GB of X from the file at {:.2} GB/s",
                b as f64 * 1e-9,
                b as f64 * 1e-9 / secs.max(1e-9)
            ),
        }
    }

    fn again(&self) -> &'static str {
        "read again from the file"
    }

    fn block(&self, lane: &GpuContext, cells: Range<usize>) -> sc_kernels::Result<DeviceCsr> {
        let start = Instant::now();
        let read = self.chunks.read_rows(cells.clone()).map_err(|e| {
            KernelError::Unsupported(format!(
                "reading cells {cells:?} of X from {}: {e}",
                self.path.display()
            ))
        })?;
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.bytes
            .fetch_add(self.chunks.stored_bytes(cells), Ordering::Relaxed);
        let csr = match read {
            Matrix::Sparse(m) => m,
            Matrix::Dense(m) => CsrMatrix::from_dense(&m),
            Matrix::Device(_) => unreachable!("the file's rows are read to the host"),
        };
        DeviceCsr::upload(lane, &csr)
    }
}
