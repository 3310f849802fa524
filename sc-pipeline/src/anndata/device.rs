//! A matrix that lives on the GPU, with the context (device, stream, memory resource) it was
//! made with: steps given such an X run their GPU twins on that context.

use sc_kernels::gpu::{DeviceCsr, DeviceDense, GpuContext};
use std::sync::Arc;

/// The storage of a device matrix.
#[derive(Debug)]
pub enum DeviceData {
    Csr(DeviceCsr),
    Dense(DeviceDense),
}

/// X (or `raw.X`) on the GPU.
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

    pub fn shape(&self) -> (usize, usize) {
        match &self.data {
            DeviceData::Csr(m) => (m.n_rows, m.n_cols),
            DeviceData::Dense(m) => (m.n_rows, m.n_cols),
        }
    }

    pub fn stored_values(&self) -> usize {
        match &self.data {
            DeviceData::Csr(m) => m.nnz(),
            DeviceData::Dense(m) => m.data.len(),
        }
    }

    /// The host copy, in the same layout.
    pub fn download(&self) -> sc_kernels::Result<super::Matrix> {
        Ok(match &self.data {
            DeviceData::Csr(m) => super::Matrix::Sparse(m.download(&self.ctx)?),
            DeviceData::Dense(m) => super::Matrix::Dense(m.download(&self.ctx)?),
        })
    }

    /// A deep copy on the device.
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
            },
        })
    }
}

/// Two device matrices are equal when they are the same storage (contents are not compared:
/// that would need a download).
impl PartialEq for DeviceMatrix {
    fn eq(&self, other: &Self) -> bool {
        let ptr = |d: &DeviceMatrix| match &d.data {
            DeviceData::Csr(m) => m.data.ptr(),
            DeviceData::Dense(m) => m.data.ptr(),
        };
        self.shape() == other.shape() && ptr(self) == ptr(other)
    }
}
