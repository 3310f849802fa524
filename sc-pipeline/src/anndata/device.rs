//! A matrix of a GPU run, with the context (device, stream, memory resource) it was made with:
//! steps given such an X run their GPU twins on that context. It lives in device memory, or,
//! when it is larger than the run's device memory budget, in host memory, and the steps stream
//! it through the device in row blocks (`sc_kernels::gpu::streamed`).

use sc_kernels::dense::DenseMatrix;
use sc_kernels::gpu::{DeviceCsr, DeviceDense, GpuContext};
use sc_kernels::CsrMatrix;
use std::sync::Arc;

/// The storage of a device matrix.
#[derive(Debug)]
pub enum DeviceData {
    Csr(DeviceCsr),
    Dense(DeviceDense),
    /// In host memory, streamed through the device in blocks of at most `block_bytes`.
    StreamedCsr(Streamed<CsrMatrix<f32>>),
    StreamedDense(Streamed<DenseMatrix<f32>>),
    /// Blocks of rows one under the other, each on its own GPU (the ranks' results of a split
    /// run, stacked without a download): all CSR or all dense. Downloading gathers every GPU's
    /// rows at once; writing copies them from each GPU straight into the file.
    Rows(Vec<DeviceMatrix>),
}

/// A host matrix whose steps run on the device one row block at a time.
#[derive(Debug, Clone)]
pub struct Streamed<M> {
    pub host: M,
    /// Device bytes a block of input may take.
    pub block_bytes: usize,
}

/// X (or `raw.X`) of a GPU run.
#[derive(Debug)]
pub struct DeviceMatrix {
    pub ctx: Arc<GpuContext>,
    pub data: DeviceData,
}

impl DeviceMatrix {
    pub fn csr(ctx: &Arc<GpuContext>, m: DeviceCsr) -> Self {
        DeviceMatrix {
            ctx: ctx.clone(),
            data: DeviceData::Csr(m),
        }
    }

    pub fn dense(ctx: &Arc<GpuContext>, m: DeviceDense) -> Self {
        DeviceMatrix {
            ctx: ctx.clone(),
            data: DeviceData::Dense(m),
        }
    }

    pub fn streamed_csr(ctx: &Arc<GpuContext>, host: CsrMatrix<f32>, block_bytes: usize) -> Self {
        DeviceMatrix {
            ctx: ctx.clone(),
            data: DeviceData::StreamedCsr(Streamed { host, block_bytes }),
        }
    }

    pub fn streamed_dense(
        ctx: &Arc<GpuContext>,
        host: DenseMatrix<f32>,
        block_bytes: usize,
    ) -> Self {
        DeviceMatrix {
            ctx: ctx.clone(),
            data: DeviceData::StreamedDense(Streamed { host, block_bytes }),
        }
    }

    /// Device blocks of rows stacked in order, left on their GPUs (`ctx` is the first block's).
    /// The blocks must be all CSR or all dense, in device memory, with the same columns.
    pub fn rows(blocks: Vec<DeviceMatrix>) -> crate::Result<Self> {
        if let Some(why) = rows_refusal(&blocks.iter().collect::<Vec<_>>()) {
            return Err(crate::Error::invalid("stack", why));
        }
        Ok(DeviceMatrix {
            ctx: blocks[0].ctx.clone(),
            data: DeviceData::Rows(blocks),
        })
    }

    /// Whether `blocks` can be stacked as blocks of rows ([`DeviceMatrix::rows`]).
    pub fn stack_as_rows(blocks: &[&DeviceMatrix]) -> bool {
        rows_refusal(blocks).is_none()
    }

    /// The blocks of rows: those of a stacked matrix, else the matrix itself.
    pub fn blocks(&self) -> &[DeviceMatrix] {
        match &self.data {
            DeviceData::Rows(b) => b,
            _ => std::slice::from_ref(self),
        }
    }

    /// Whether the matrix stays in host memory and is streamed through the device.
    pub fn is_streamed(&self) -> bool {
        matches!(
            self.data,
            DeviceData::StreamedCsr(_) | DeviceData::StreamedDense(_)
        )
    }

    pub fn shape(&self) -> (usize, usize) {
        match &self.data {
            DeviceData::Csr(m) => (m.n_rows, m.n_cols),
            DeviceData::Dense(m) => (m.n_rows, m.n_cols),
            DeviceData::StreamedCsr(m) => (m.host.n_rows, m.host.n_cols),
            DeviceData::StreamedDense(m) => (m.host.n_rows, m.host.n_cols),
            DeviceData::Rows(b) => (
                b.iter().map(|m| m.shape().0).sum(),
                b.first().map_or(0, |m| m.shape().1),
            ),
        }
    }

    pub fn stored_values(&self) -> usize {
        match &self.data {
            DeviceData::Csr(m) => m.nnz(),
            DeviceData::Dense(m) => m.data.len(),
            DeviceData::StreamedCsr(m) => m.host.nnz(),
            DeviceData::StreamedDense(m) => m.host.data.len(),
            DeviceData::Rows(b) => b.iter().map(DeviceMatrix::stored_values).sum(),
        }
    }

    /// A host copy, in the same layout.
    pub fn download(&self) -> sc_kernels::Result<super::Matrix> {
        Ok(match &self.data {
            DeviceData::Csr(m) => super::Matrix::Sparse(m.download(&self.ctx)?),
            DeviceData::Dense(m) => super::Matrix::Dense(m.download(&self.ctx)?),
            DeviceData::StreamedCsr(m) => super::Matrix::Sparse(m.host.clone()),
            DeviceData::StreamedDense(m) => super::Matrix::Dense(m.host.clone()),
            DeviceData::Rows(b) => super::gather::gather_blocks(&b.iter().collect::<Vec<_>>())?,
        })
    }

    /// The matrix on the host (a streamed one is moved, not copied).
    pub fn into_host(self) -> sc_kernels::Result<super::Matrix> {
        match self.data {
            DeviceData::StreamedCsr(m) => Ok(super::Matrix::Sparse(m.host)),
            DeviceData::StreamedDense(m) => Ok(super::Matrix::Dense(m.host)),
            _ => self.download(),
        }
    }

    /// A deep copy (on the device, or in host memory for a streamed matrix).
    pub fn try_clone(&self) -> sc_kernels::Result<Self> {
        Ok(DeviceMatrix {
            ctx: self.ctx.clone(),
            data: match &self.data {
                DeviceData::Csr(m) => DeviceData::Csr(m.try_clone(&self.ctx)?),
                DeviceData::Dense(m) => DeviceData::Dense(DeviceDense {
                    n_rows: m.n_rows,
                    n_cols: m.n_cols,
                    data: m.data.try_clone_on(self.ctx.stream())?,
                }),
                DeviceData::StreamedCsr(m) => DeviceData::StreamedCsr(m.clone()),
                DeviceData::StreamedDense(m) => DeviceData::StreamedDense(m.clone()),
                DeviceData::Rows(b) => DeviceData::Rows(
                    b.iter()
                        .map(DeviceMatrix::try_clone)
                        .collect::<sc_kernels::Result<_>>()?,
                ),
            },
        })
    }
}

/// Why `blocks` cannot be blocks of rows of one matrix, if they cannot: they must be all CSR
/// or all dense, in device memory, with the same columns.
fn rows_refusal(blocks: &[&DeviceMatrix]) -> Option<String> {
    let Some(first) = blocks.first() else {
        return Some("needs at least one block".into());
    };
    let kind = |m: &DeviceMatrix| match m.data {
        DeviceData::Csr(_) => "CSR in device memory",
        DeviceData::Dense(_) => "dense in device memory",
        DeviceData::StreamedCsr(_) | DeviceData::StreamedDense(_) => "streamed from the host",
        DeviceData::Rows(_) => "blocks of rows already",
    };
    let (first_kind, n_cols) = (kind(first), first.shape().1);
    let usable = |m: &DeviceMatrix| matches!(m.data, DeviceData::Csr(_) | DeviceData::Dense(_));
    let b = blocks
        .iter()
        .find(|b| !usable(b) || kind(b) != first_kind || b.shape().1 != n_cols)?;
    Some(format!(
        "blocks of rows must be all CSR or all dense in device memory, with the same columns: \
         a block {first_kind} with {n_cols} columns, another {} with {}",
        kind(b),
        b.shape().1
    ))
}

/// Two device matrices are equal when they are the same storage (contents are not compared:
/// that would need a download).
impl PartialEq for DeviceMatrix {
    fn eq(&self, other: &Self) -> bool {
        self.shape() == other.shape() && storage(self) == storage(other)
    }
}

/// Where a matrix's values start (its first block's, for blocks of rows).
fn storage(d: &DeviceMatrix) -> u64 {
    match &d.data {
        DeviceData::Csr(m) => m.data.ptr(),
        DeviceData::Dense(m) => m.data.ptr(),
        DeviceData::StreamedCsr(m) => m.host.data.as_ptr() as u64,
        DeviceData::StreamedDense(m) => m.host.data.as_ptr() as u64,
        DeviceData::Rows(b) => b.first().map_or(0, storage),
    }
}
