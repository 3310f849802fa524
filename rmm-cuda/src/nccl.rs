//! NCCL communicators (through `cudarc`'s NCCL bindings, loaded at run time): the collectives a
//! computation split across GPUs needs, on raw device pointers and our streams. One
//! communicator per rank; the ranks of one process are made together by
//! [`NcclComm::for_devices`], the ranks of several processes (started by `mpirun`, `srun`,
//! `torchrun` or by hand) each by [`NcclComm::join`] with the same [`NcclId`].

use crate::{CudaError, Device, DeviceId, Result, Stream};
use cudarc::nccl::sys;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The identifier every rank of a group passes to [`NcclComm::join`]. Rank 0 makes it with
/// [`NcclId::new`] and hands it to the others; or, with `NCCL_COMM_ID=host:port` set for every
/// process, each process makes the same one itself (NCCL's own bootstrap then runs at that
/// address).
///
/// ```no_run
/// use rmm_cuda::{Device, NcclComm, NcclId};
/// // Rank 0 makes the id and hands its bytes to the other processes (or every process sets
/// // NCCL_COMM_ID=host:port and makes the same id itself).
/// let id = NcclId::new()?;
/// let bytes = id.to_bytes();
/// let comm = NcclComm::join(&Device::cuda(0)?, NcclId::from_bytes(bytes), 0, 1)?;
/// assert_eq!(comm.size(), 1);
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
#[derive(Clone, Copy)]
pub struct NcclId(sys::ncclUniqueId);

impl NcclId {
    pub fn new() -> Result<NcclId> {
        check_library()?;
        let mut id = std::mem::MaybeUninit::uninit();
        // SAFETY: ncclGetUniqueId writes the whole id.
        unsafe { check("ncclGetUniqueId", sys::ncclGetUniqueId(id.as_mut_ptr()))? };
        Ok(NcclId(unsafe { id.assume_init() }))
    }

    /// The id's 128 bytes (to send to the other ranks).
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0.internal.map(|c| c as u8)
    }

    pub fn from_bytes(bytes: [u8; 128]) -> NcclId {
        NcclId(sys::ncclUniqueId {
            internal: bytes.map(|b| b as std::ffi::c_char),
        })
    }
}

/// One rank of an NCCL group, bound to one device.
///
/// ```no_run
/// use rmm_cuda::{Device, NcclComm};
/// let devices = vec![Device::cuda(0)?, Device::cuda(1)?];
/// let comms = NcclComm::for_devices(&devices)?; // one rank per GPU of this process
/// assert_eq!((comms[1].rank(), comms[1].size()), (1, 2));
/// # Ok::<(), rmm_cuda::CudaError>(())
/// ```
pub struct NcclComm {
    comm: sys::ncclComm_t,
    rank: usize,
    size: usize,
    device: Device,
    /// Set by [`NcclComm::abort`]: an aborted communicator must not be destroyed.
    aborted: AtomicBool,
}

// SAFETY: an NCCL communicator may be used from any thread, one call at a time; the owner
// (`&mut`-free collectives below are issued by one rank's thread) keeps calls serial.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

/// Whether libnccl could be loaded, as an error naming where it is looked for.
fn check_library() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    Err(CudaError::Library {
        call: "loading libnccl",
        problem: "NCCL was not found: put the directory of libnccl.so on LD_LIBRARY_PATH (the \
                  nvidia-nccl-cu13 wheel ships lib/libnccl.so.2; a link named libnccl.so next \
                  to it will do)"
            .into(),
    })
}

fn check(call: &'static str, r: sys::ncclResult_t) -> Result<()> {
    match r {
        sys::ncclResult_t::ncclSuccess => Ok(()),
        other => {
            // SAFETY: ncclGetErrorString returns a static string.
            let text = unsafe { CStr::from_ptr(sys::ncclGetErrorString(other)) };
            Err(CudaError::Library {
                call,
                problem: format!("{other:?}: {}", text.to_string_lossy()),
            })
        }
    }
}

fn ordinal(device: &Device) -> Result<i32> {
    match device.id() {
        DeviceId::Cuda(n) => Ok(n as i32),
        DeviceId::Simulated(_) => Err(CudaError::invalid(
            "NcclComm",
            "NCCL runs on CUDA devices, not on the simulated one",
        )),
    }
}

impl NcclComm {
    /// One communicator per device, rank `i` on `devices[i]`, for the ranks of this process.
    pub fn for_devices(devices: &[Device]) -> Result<Vec<NcclComm>> {
        check_library()?;
        let list = devices.iter().map(ordinal).collect::<Result<Vec<i32>>>()?;
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one communicator per device of `list`.
        unsafe {
            check(
                "ncclCommInitAll",
                sys::ncclCommInitAll(comms.as_mut_ptr(), list.len() as i32, list.as_ptr()),
            )?
        };
        Ok(comms
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (comm, d))| NcclComm {
                comm,
                rank,
                size: devices.len(),
                device: d.clone(),
                aborted: AtomicBool::new(false),
            })
            .collect())
    }

    /// Joins the group `id` as `rank` of `size` on `device`; returns once every rank has joined.
    pub fn join(device: &Device, id: NcclId, rank: usize, size: usize) -> Result<NcclComm> {
        check_library()?;
        ordinal(device)?;
        if rank >= size {
            return Err(CudaError::invalid(
                "ncclCommInitRank",
                format!("rank {rank} outside a group of {size}"),
            ));
        }
        device.bind()?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` receives the new communicator.
        unsafe {
            check(
                "ncclCommInitRank",
                sys::ncclCommInitRank(&mut comm, size as i32, id.0, rank as i32),
            )?
        };
        Ok(NcclComm {
            comm,
            rank,
            size,
            device: device.clone(),
            aborted: AtomicBool::new(false),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// In-place element-wise sum of `count` f64 values at `ptr`, over the ranks, on `stream`.
    ///
    /// # Safety
    /// `ptr` must hold `count` f64 values on this communicator's device, alive until `stream`
    /// has run the reduction.
    pub unsafe fn all_reduce_sum_f64(&self, ptr: u64, count: usize, stream: &Stream) -> Result<()> {
        check(
            "ncclAllReduce",
            sys::ncclAllReduce(
                ptr as *const _,
                ptr as *mut _,
                count,
                sys::ncclDataType_t::ncclFloat64,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                stream.as_raw() as _,
            ),
        )
    }

    /// Overwrites `count` f64 values at `ptr` with `root`'s, on `stream`.
    ///
    /// # Safety
    /// As [`NcclComm::all_reduce_sum_f64`].
    pub unsafe fn broadcast_f64(
        &self,
        ptr: u64,
        count: usize,
        root: usize,
        stream: &Stream,
    ) -> Result<()> {
        check(
            "ncclBroadcast",
            sys::ncclBroadcast(
                ptr as *const _,
                ptr as *mut _,
                count,
                sys::ncclDataType_t::ncclFloat64,
                root as i32,
                self.comm,
                stream.as_raw() as _,
            ),
        )
    }

    /// Gathers `count` bytes from each rank at `send` into `recv` (`size * count` bytes, rank
    /// order), on `stream`.
    ///
    /// # Safety
    /// `send` must hold `count` bytes and `recv` `size * count` bytes on this device, alive
    /// until `stream` has run the gather.
    pub unsafe fn all_gather_bytes(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        stream: &Stream,
    ) -> Result<()> {
        check(
            "ncclAllGather",
            sys::ncclAllGather(
                send as *const _,
                recv as *mut _,
                count,
                sys::ncclDataType_t::ncclUint8,
                self.comm,
                stream.as_raw() as _,
            ),
        )
    }

    /// Ends this rank's part in the group at once: collectives the other ranks are waiting in
    /// fail instead of hanging.
    pub fn abort(&self) {
        if !self.aborted.swap(true, Ordering::SeqCst) {
            // SAFETY: the communicator is valid and aborted once (Drop then skips destroy).
            unsafe {
                let _ = sys::ncclCommAbort(self.comm);
            }
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.aborted.load(Ordering::SeqCst) {
            return;
        }
        let _ = self.device.bind();
        // SAFETY: the communicator is valid and no longer used.
        unsafe {
            let _ = sys::ncclCommDestroy(self.comm);
        }
    }
}
