//! Device-resident matrices: CSR with 64-bit row offsets, 32-bit column indices and f32 values,
//! and dense row-major f32; their storage is `rmm-core` [`DeviceVec`]s from the context.

use super::module_cache::KernelSource;
use super::{blocks_for_rows, GpuContext};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use rmm_core::DeviceVec;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "matrix",
    source: include_str!("matrix.cu"),
};

/// Blocks of `csr_duplicates` at most, each with its own bit map of the columns, and the
/// device bytes their maps take at most (a matrix of millions of columns gets fewer blocks, each
/// going over more rows).
const DUPLICATE_BLOCKS: usize = 1024;
const DUPLICATE_MAP_BYTES: usize = 64 << 20;

/// What [`DeviceCsr::structure_problem`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StructureProblem {
    /// The row offsets do not go from 0 to the values' count in order.
    Offsets,
    /// The first row with a column index at or past the columns.
    ColumnPast { row: usize },
    /// The first row that holds a column twice.
    ColumnTwice { row: usize },
}

/// A CSR matrix on the device (the layout of [`CsrMatrix`]).
#[derive(Debug)]
pub struct DeviceCsr {
    pub n_rows: usize,
    pub n_cols: usize,
    /// `n_rows + 1` offsets.
    pub indptr: DeviceVec<u64>,
    pub indices: DeviceVec<u32>,
    pub data: DeviceVec<f32>,
}

impl DeviceCsr {
    /// A device copy of a (valid) host matrix.
    pub fn upload(ctx: &GpuContext, m: &CsrMatrix<f32>) -> Result<Self> {
        Ok(DeviceCsr {
            n_rows: m.n_rows,
            n_cols: m.n_cols,
            indptr: ctx.upload(&m.indptr)?,
            indices: ctx.upload(&m.indices)?,
            data: ctx.upload(&m.data)?,
        })
    }

    /// The host copy.
    pub fn download(&self, ctx: &GpuContext) -> Result<CsrMatrix<f32>> {
        Ok(CsrMatrix {
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            indptr: ctx.download(&self.indptr)?,
            indices: ctx.download(&self.indices)?,
            data: ctx.download(&self.data)?,
        })
    }

    /// Stored values.
    pub fn nnz(&self) -> usize {
        self.data.len()
    }

    /// The dense row-major copy (`toarray()`), made on the device.
    pub fn to_dense(&self, ctx: &GpuContext) -> Result<DeviceDense> {
        let mut out = ctx.alloc::<f32>(self.n_rows * self.n_cols)?;
        self.rows_to_dense_into(ctx, 0, self.n_rows, &mut out)?;
        Ok(DeviceDense {
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            data: out,
        })
    }

    /// Rows `first .. first + count` written densely (row-major) into the start of `out`.
    pub fn rows_to_dense_into(
        &self,
        ctx: &GpuContext,
        first: usize,
        count: usize,
        out: &mut DeviceVec<f32>,
    ) -> Result<()> {
        if first + count > self.n_rows || count * self.n_cols > out.len() {
            return Err(KernelError::Shape(format!(
                "rows {first}..{} of {} rows into {} values",
                first + count,
                self.n_rows,
                out.len()
            )));
        }
        if count == 0 || self.n_cols == 0 {
            return Ok(());
        }
        let (first, n, g) = (first as u64, count as u64, self.n_cols as u64);
        let f = ctx.function(SRC, "csr_to_dense")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.indptr)
            .arg(&self.indices)
            .arg(&self.data)
            .arg(&first)
            .arg(&n)
            .arg(&g)
            .arg(out);
        ctx.launch(l, ctx.filling_rows(count), "csr_to_dense")
    }

    /// Int32 row offsets (a CuPy matrix's) widened on the device into the layout's u64.
    pub fn widen_offsets(ctx: &GpuContext, offsets: &DeviceVec<i32>) -> Result<DeviceVec<u64>> {
        let out = ctx.alloc::<u64>(offsets.len())?;
        if !offsets.is_empty() {
            let f = ctx.function(SRC, "offsets_widen")?;
            let n = offsets.len() as u64;
            let mut l = ctx.launcher(&f);
            l.arg(offsets).arg(&n).arg(&out);
            ctx.launch(l, ctx.filling_grid(offsets.len()), "offsets_widen")?;
        }
        Ok(out)
    }

    /// The row offsets as int32 (scipy's and cupyx's choice while the values' count fits),
    /// narrowed on the device; `None` when it does not fit.
    pub fn narrow_offsets(&self, ctx: &GpuContext) -> Result<Option<DeviceVec<i32>>> {
        if self.data.len() > i32::MAX as usize {
            return Ok(None);
        }
        let out = ctx.alloc::<i32>(self.indptr.len())?;
        if !self.indptr.is_empty() {
            let f = ctx.function(SRC, "offsets_narrow")?;
            let n = self.indptr.len() as u64;
            let mut l = ctx.launcher(&f);
            l.arg(&self.indptr).arg(&n).arg(&out);
            ctx.launch(l, ctx.filling_grid(self.indptr.len()), "offsets_narrow")?;
        }
        Ok(Some(out))
    }

    /// What is wrong with the structure the steps trust, checked on the device: row offsets
    /// that do not go from 0 to the values' count in order, a column index at or past the
    /// columns, or a column stored twice in a row (scipy adds such values where a densifying
    /// kernel would keep one). `None` when nothing is. One wait, and a second only for a
    /// matrix whose rows are not in increasing column order.
    pub fn structure_problem(&self, ctx: &GpuContext) -> Result<Option<StructureProblem>> {
        if self.indptr.len() != self.n_rows + 1 {
            return Ok(Some(StructureProblem::Offsets));
        }
        let found = ctx.zeros::<u64>(4)?;
        let (n, g, nnz) = (
            self.n_rows as u64,
            self.n_cols as u64,
            self.data.len() as u64,
        );
        let f = ctx.function(SRC, "csr_structure")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.indptr).arg(&self.indices).arg(&n).arg(&g);
        l.arg(&nnz).arg(&found);
        let cfg = ctx.filling_grid((self.n_rows + 1) * 32);
        ctx.launch(l, cfg, "csr_structure")?;
        let got = ctx.download(&found)?;
        if got[0] != 0 {
            return Ok(Some(StructureProblem::Offsets));
        }
        if got[2] != 0 {
            return Ok(Some(StructureProblem::ColumnPast {
                row: !got[2] as usize,
            }));
        }
        if got[1] == 0 {
            return Ok(None);
        }
        // Rows out of column order: look for a column twice.
        let words = self.n_cols.div_ceil(32).max(1);
        let blocks = self
            .n_rows
            .min(DUPLICATE_BLOCKS)
            .min(DUPLICATE_MAP_BYTES / (words * 4))
            .max(1);
        let seen = ctx.zeros::<u32>(blocks * words)?;
        let f = ctx.function(SRC, "csr_duplicates")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.indptr).arg(&self.indices).arg(&n).arg(&g);
        l.arg(&seen).arg(&found);
        ctx.launch(l, blocks_for_rows(blocks, 256), "csr_duplicates")?;
        let got = ctx.download(&found)?;
        Ok((got[3] != 0).then(|| StructureProblem::ColumnTwice {
            row: !got[3] as usize,
        }))
    }

    /// A deep copy (for `.raw`), from the context's resource.
    pub fn try_clone(&self, ctx: &GpuContext) -> Result<Self> {
        Ok(DeviceCsr {
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            indptr: self.indptr.try_clone_on(ctx.stream())?,
            indices: self.indices.try_clone_on(ctx.stream())?,
            data: self.data.try_clone_on(ctx.stream())?,
        })
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        self.indptr.len() * 8 + self.indices.len() * 4 + self.data.len() * 4
    }
}

/// A dense row-major matrix on the device (the layout of [`DenseMatrix`]).
#[derive(Debug)]
pub struct DeviceDense {
    pub n_rows: usize,
    pub n_cols: usize,
    pub data: DeviceVec<f32>,
}

impl DeviceDense {
    pub fn upload(ctx: &GpuContext, m: &DenseMatrix<f32>) -> Result<Self> {
        Ok(DeviceDense {
            n_rows: m.n_rows,
            n_cols: m.n_cols,
            data: ctx.upload(&m.data)?,
        })
    }

    pub fn download(&self, ctx: &GpuContext) -> Result<DenseMatrix<f32>> {
        Ok(DenseMatrix {
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            data: ctx.download(&self.data)?,
        })
    }

    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}
