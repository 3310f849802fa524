//! The [`Communicator`] of ranks on several GPUs: NCCL collectives on buffers from the rank's
//! own memory resource, on the rank's stream. The values come from and go back to the host
//! (the steps' per-gene statistics are host vectors; the largest, a PCA Gram matrix, is
//! g(g+1)/2 values).

use crate::comm::Communicator;
use crate::error::{KernelError, Result};
use crate::gpu::GpuContext;
use rmm_cuda::NcclComm;
use std::sync::Arc;

/// One rank: its NCCL communicator and the context (device, stream, resource) it runs on.
pub struct NcclCommunicator {
    comm: NcclComm,
    ctx: Arc<GpuContext>,
}

impl NcclCommunicator {
    /// `comm` must belong to `ctx`'s device.
    pub fn new(comm: NcclComm, ctx: Arc<GpuContext>) -> Result<Self> {
        if comm.device().id() != ctx.device().id() {
            return Err(KernelError::Comm(format!(
                "the NCCL communicator of {} runs with a context on {}",
                comm.device().id(),
                ctx.device().id()
            )));
        }
        Ok(NcclCommunicator { comm, ctx })
    }

    fn nccl(e: rmm_cuda::CudaError) -> KernelError {
        KernelError::Comm(e.to_string())
    }

    /// Runs an in-place collective on a device copy of `values` (a buffer of `len` f64 at
    /// `ptr`, on this rank's stream) and copies the result back.
    fn in_place(
        &self,
        values: &mut [f64],
        collective: impl FnOnce(u64, usize, &rmm_cuda::Stream) -> rmm_cuda::Result<()>,
    ) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        self.ctx.bind_to_thread()?;
        let buf = self.ctx.upload(values)?;
        collective(buf.ptr(), values.len(), self.ctx.stream()).map_err(Self::nccl)?;
        // The download waits for the stream, so the collective has run.
        values.copy_from_slice(&self.ctx.download(&buf)?);
        Ok(())
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn size(&self) -> usize {
        self.comm.size()
    }

    fn all_reduce_sum(&self, values: &mut [f64]) -> Result<()> {
        // SAFETY: `ptr` holds `len` values on this device (see `in_place`).
        self.in_place(values, |ptr, len, stream| unsafe {
            self.comm.all_reduce_sum_f64(ptr, len, stream)
        })
    }

    fn broadcast(&self, values: &mut [f64], root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(KernelError::Comm(format!(
                "broadcast root {root} outside the group of {} ranks",
                self.size()
            )));
        }
        // SAFETY: as in all_reduce_sum.
        self.in_place(values, |ptr, len, stream| unsafe {
            self.comm.broadcast_f64(ptr, len, root, stream)
        })
    }

    fn all_gather_bytes(&self, local: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.ctx.bind_to_thread()?;
        let n = self.size();
        // The lengths first (NCCL gathers equal counts), then every rank's bytes padded to the
        // longest.
        let mut lens = vec![0.0f64; n];
        lens[self.rank()] = local.len() as f64;
        self.all_reduce_sum(&mut lens)?;
        let max = lens.iter().fold(0.0f64, |a, &b| a.max(b)) as usize;
        if max == 0 {
            return Ok(vec![Vec::new(); n]);
        }
        let mut padded = local.to_vec();
        padded.resize(max, 0);
        let send = self.ctx.upload(&padded)?;
        let recv = self.ctx.alloc::<u8>(n * max)?;
        // SAFETY: `send` holds `max` bytes, `recv` n * max; download waits for the stream.
        unsafe {
            self.comm
                .all_gather_bytes(send.ptr(), recv.ptr(), max, self.ctx.stream())
                .map_err(Self::nccl)?
        };
        let all = self.ctx.download(&recv)?;
        Ok(all
            .chunks(max)
            .zip(&lens)
            .map(|(c, &l)| c[..l as usize].to_vec())
            .collect())
    }

    fn abort(&self, _why: &str) {
        self.comm.abort();
    }

    unsafe fn all_reduce_sum_device_f64(
        &self,
        ptr: u64,
        len: usize,
        stream: &rmm_cuda::Stream,
    ) -> Option<Result<()>> {
        // SAFETY: the caller's contract: `len` f64 at `ptr` on this rank's GPU.
        Some(unsafe { self.comm.all_reduce_sum_f64(ptr, len, stream) }.map_err(Self::nccl))
    }
}
