//! `GpuContext`: the one value a step's GPU twin is handed.

use super::module_cache::{KernelSource, ModuleCache};
use super::pinned_buffers::PinnedBuffers;
use super::staging::{fill_from, Staging, CHUNK_BYTES};
use crate::error::{KernelError, Result};
use bytemuck::Pod;
use rmm_core::{DeviceVec, SharedResource};
use rmm_cuda::cudarc::cublas::CudaBlas;
use rmm_cuda::cudarc::cusolver::DnHandle;
use rmm_cuda::cudarc::driver::sys::CUfunction_attribute_enum;
use rmm_cuda::cudarc::driver::{CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig};
use rmm_cuda::{Device, Stream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Transfers at least this large go through the pinned staging buffers.
const STAGED_BYTES: usize = 4 << 20;
/// Downloads at least this large go through the staging buffers once they are made: the
/// driver's pageable copy touches the new host array's pages on one thread, the staged copy on
/// every core (QC's per-cell columns at 200,000 cells, 1.6 MB each: about 1 ms each).
const STAGED_DOWNLOAD_BYTES: usize = 256 << 10;

/// Bytes copied between host and device through a context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfers {
    pub host_to_device: u64,
    pub device_to_host: u64,
}

/// Device, stream and memory resource of a step, with the modules and library handles bound to
/// that stream. Every buffer a kernel allocates comes from [`GpuContext::alloc`] and friends.
pub struct GpuContext {
    device: Device,
    stream: Stream,
    resource: SharedResource,
    arch: String,
    multiprocessors: u32,
    /// Dynamic shared memory a block may opt in to, in bytes.
    max_shared_per_block: usize,
    /// Shared with the context's lanes (a module serves every stream of its device).
    modules: Arc<ModuleCache>,
    blas: OnceLock<CudaBlas>,
    solver: OnceLock<DnHandle>,
    /// Pinned buffers for large transfers (made on first use; one transfer at a time).
    staging: Mutex<Option<Staging>>,
    /// Pinned buffers lent to threads downloading at once (made by
    /// [`GpuContext::prepare_write_buffers`]).
    write_buffers: OnceLock<PinnedBuffers>,
    /// A second context on a stream of its own, same device and resource, for uploads that
    /// overlap this stream's work (made on first use; see [`GpuContext::copy_lane`]).
    lane: OnceLock<Box<GpuContext>>,
    /// A context on a third stream for a step that runs beside the others (made on first use;
    /// see [`GpuContext::step_lane`]).
    step_lane: OnceLock<Arc<GpuContext>>,
    /// Bytes moved, shared with the lanes.
    h2d: Arc<AtomicU64>,
    d2h: Arc<AtomicU64>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GpuContext({:?}, {}, {})",
            self.device,
            self.arch,
            self.resource.name()
        )
    }
}

impl GpuContext {
    /// A context on a real device. `resource` must belong to `device` and `stream` to it too.
    pub fn new(device: &Device, stream: &Stream, resource: SharedResource) -> Result<Self> {
        if device.is_simulated() {
            return Err(KernelError::Gpu(
                "a simulated device cannot run kernels; use the CPU implementation".into(),
            ));
        }
        if resource.device() != device || stream.device() != device {
            return Err(KernelError::Gpu(
                "the stream and the resource must belong to the context's device".into(),
            ));
        }
        let (major, minor) = device
            .compute_capability()
            .map_err(|e| KernelError::Gpu(e.to_string()))?;
        let ctx = device.cuda_context().expect("real device");
        let multiprocessors = ctx
            .attribute(rmm_cuda::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| KernelError::Gpu(format!("reading the multiprocessor count: {e:?}")))?
            as u32;
        let max_shared_per_block = ctx
            .attribute(rmm_cuda::cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| KernelError::Gpu(format!("reading the shared memory per block: {e:?}")))?
            as usize;
        Ok(GpuContext {
            device: device.clone(),
            stream: stream.clone(),
            resource,
            arch: format!("sm_{major}{minor}"),
            multiprocessors,
            max_shared_per_block,
            modules: Arc::default(),
            blas: OnceLock::new(),
            solver: OnceLock::new(),
            staging: Mutex::new(None),
            write_buffers: OnceLock::new(),
            lane: OnceLock::new(),
            step_lane: OnceLock::new(),
            h2d: Arc::default(),
            d2h: Arc::default(),
        })
    }

    /// The copy lane: a context on a second stream of the same device, with the same resource,
    /// staging buffers of its own and the same transfer counters. An upload on the lane (from
    /// another thread) overlaps the kernels and downloads queued on this context's stream;
    /// move what it made to this stream (`DeviceVec::set_stream`) before using it here.
    pub fn copy_lane(&self) -> Result<&GpuContext> {
        if let Some(l) = self.lane.get() {
            return Ok(l);
        }
        let lane = self.sibling("the copy stream")?;
        Ok(self.lane.get_or_init(|| Box::new(lane)))
    }

    /// The step lane: a context on a stream of its own (not the copy lane's, whose downloads
    /// must not queue behind a step's kernels), with the same device, resource, modules and
    /// transfer counters, for a step that runs on another thread beside the steps on this
    /// context (`sc_pipeline`'s runner).
    pub fn step_lane(&self) -> Result<Arc<GpuContext>> {
        if let Some(l) = self.step_lane.get() {
            return Ok(l.clone());
        }
        let lane = Arc::new(self.sibling("the step lane's stream")?);
        Ok(self.step_lane.get_or_init(|| lane).clone())
    }

    /// A context on a new stream of this one's device, sharing its resource, modules and
    /// transfer counters; staging buffers and library handles of its own.
    fn sibling(&self, what: &str) -> Result<GpuContext> {
        let stream = self
            .device
            .new_stream()
            .map_err(|e| KernelError::Gpu(format!("creating {what}: {e}")))?;
        let mut lane = GpuContext::new(&self.device, &stream, self.resource.clone())?;
        lane.modules = self.modules.clone();
        lane.h2d = self.h2d.clone();
        lane.d2h = self.d2h.clone();
        Ok(lane)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    pub fn resource(&self) -> &SharedResource {
        &self.resource
    }

    /// `sm_XY` of the device.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn multiprocessors(&self) -> u32 {
        self.multiprocessors
    }

    /// A grid-stride launch over `items` of 256 threads a block, at most enough blocks to fill
    /// the device a few times over (the kernel loops over the rest).
    pub fn filling_grid(&self, items: usize) -> LaunchConfig {
        let blocks = (items.div_ceil(256) as u32).clamp(1, self.multiprocessors * 16);
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// One block of 256 threads per row, at most enough blocks to fill the device a few times
    /// over (the kernels' grid-stride loops over the rows do the rest).
    pub fn filling_rows(&self, rows: usize) -> LaunchConfig {
        blocks_for_rows(rows.clamp(1, self.multiprocessors as usize * 32), 256)
    }

    /// The most dynamic shared memory one block may use, in bytes (with
    /// [`GpuContext::function_with_shared`]'s opt-in).
    pub fn max_shared_per_block(&self) -> usize {
        self.max_shared_per_block
    }

    pub(crate) fn cuda_stream(&self) -> &Arc<CudaStream> {
        self.stream.cuda().expect("real device")
    }

    /// `len` uninitialised values from the context's resource, on its stream.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceVec<T>> {
        Ok(DeviceVec::with_resource(
            len,
            &self.stream,
            self.resource.clone(),
        )?)
    }

    /// `len` zeros from the context's resource.
    pub fn zeros<T: Pod>(&self, len: usize) -> Result<DeviceVec<T>> {
        Ok(DeviceVec::zeros_with_resource(
            len,
            &self.stream,
            self.resource.clone(),
        )?)
    }

    /// Makes the pinned staging buffers now, if they are not made yet. Pinning host memory
    /// waits for the work queued on the device, on every stream, and holds up other streams'
    /// copies meanwhile (`benches/benches/copy_overlap.rs spin-pin`: 1.5 s behind a 1.5 s
    /// kernel): a context about to download while long kernels run on another stream (the
    /// output written while neighbors runs) makes its buffers before those kernels are queued.
    pub fn prepare_transfers(&self) -> Result<()> {
        self.with_staging(|_| Ok(()))
    }

    /// Makes `count` pinned buffers of `bytes` for threads that download at once, each into a
    /// buffer of its own ([`GpuContext::write_buffers`], [`GpuContext::download_bytes_direct`]),
    /// if none are made yet: like the staging buffers, before long kernels are queued.
    pub fn prepare_write_buffers(&self, count: usize, bytes: usize) -> Result<()> {
        if self.write_buffers.get().is_none() {
            let made = PinnedBuffers::new(&self.device, &self.stream, count, bytes)?;
            let _ = self.write_buffers.set(made);
        }
        Ok(())
    }

    /// The buffers [`GpuContext::prepare_write_buffers`] made, if it ran.
    pub fn write_buffers(&self) -> Option<&PinnedBuffers> {
        self.write_buffers.get()
    }

    /// Copies the bytes `offset..offset + dst.len()` of `v`'s values straight into `dst` and
    /// waits for that copy alone (queued on this context's stream after the work queued
    /// before): no staging buffer, so several threads may download at once. At the bus's speed
    /// when `dst` is pinned (a buffer of [`GpuContext::write_buffers`]); correct, but slower,
    /// into any other memory.
    pub fn download_bytes_direct<T: Pod + Send + Sync>(
        &self,
        v: &DeviceVec<T>,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        self.bytes_out(v, offset, dst, |src, dst| {
            let gpu = |e: rmm_cuda::CudaError| KernelError::Gpu(format!("direct download: {e}"));
            let done = self.device.new_event().map_err(gpu)?;
            // SAFETY: the range lies inside `v` (checked by `bytes_out`); `dst` stays borrowed
            // until the event recorded after the copy has fired.
            unsafe { self.stream.copy_to_host_async(dst, src) }.map_err(gpu)?;
            self.stream.record(&done).map_err(gpu)?;
            done.synchronize().map_err(gpu)
        })
    }

    /// Checks that the bytes `offset..offset + dst.len()` lie inside `v`'s values, has
    /// `copy(address, dst)` copy them (unless there are none) and counts them.
    fn bytes_out<T: Pod>(
        &self,
        v: &DeviceVec<T>,
        offset: usize,
        dst: &mut [u8],
        copy: impl FnOnce(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let total = v.len() * std::mem::size_of::<T>();
        if offset.checked_add(dst.len()).is_none_or(|end| end > total) {
            return Err(KernelError::Shape(format!(
                "bytes {offset}..{} of a device array of {total} bytes",
                offset.saturating_add(dst.len())
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        copy(v.ptr() + offset as u64, dst)?;
        self.d2h.fetch_add(dst.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a download of `bytes` goes through the staging buffers: always when large, from
    /// [`STAGED_DOWNLOAD_BYTES`] when they are made already (a context that never needed them,
    /// e.g. a step lane's, does not pin 128 MiB for a small download).
    fn stages_download(&self, bytes: usize) -> bool {
        bytes >= STAGED_BYTES
            || (bytes >= STAGED_DOWNLOAD_BYTES && self.staging.lock().unwrap().is_some())
    }

    /// Runs `f` with the staging buffers (made on first use).
    fn with_staging<R>(&self, f: impl FnOnce(&Staging) -> Result<R>) -> Result<R> {
        let mut guard = self.staging.lock().unwrap();
        if guard.is_none() {
            *guard = Some(Staging::new(&self.device, &self.stream, CHUNK_BYTES)?);
        }
        f(guard.as_ref().expect("made above"))
    }

    /// A device copy of `values` (counted in [`GpuContext::transfers`]); large arrays go
    /// through the pinned staging buffers.
    pub fn upload<T: Pod + Send + Sync>(&self, values: &[T]) -> Result<DeviceVec<T>> {
        let bytes = std::mem::size_of_val(values);
        let v = if bytes >= STAGED_BYTES {
            self.upload_with(values.len(), fill_from(values))?
        } else {
            DeviceVec::from_host_with_resource(values, &self.stream, self.resource.clone())?
        };
        self.count_h2d(bytes);
        Ok(v)
    }

    /// A new device array of `len` values produced chunk by chunk by `fill(first, chunk)` into
    /// pinned memory, each chunk copied while the next is produced (e.g. read from a file).
    pub fn upload_with<T: Pod + Send + Sync>(
        &self,
        len: usize,
        fill: impl FnMut(usize, &mut [T]) -> Result<()>,
    ) -> Result<DeviceVec<T>> {
        let v = self.alloc::<T>(len)?;
        // SAFETY: `v` is a fresh allocation of `len` values on the context's stream, which the
        // staging copies are queued on.
        self.with_staging(|s| unsafe { s.upload(v.ptr(), len, fill) })?;
        Ok(v)
    }

    /// The values of `v`, copied to the host (waits for the stream); large arrays go through
    /// the pinned staging buffers.
    pub fn download<T: Pod + Send + Sync>(&self, v: &DeviceVec<T>) -> Result<Vec<T>> {
        let bytes = v.len() * std::mem::size_of::<T>();
        let out = if self.stages_download(bytes) {
            // SAFETY: `v` holds `len` values; the copies are queued on the context's stream.
            self.with_staging(|s| unsafe { s.download(v.ptr(), v.len()) })?
        } else {
            v.to_host()?
        };
        self.d2h.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Values `range` of `v`, copied to the host (waits for the stream) through the pinned
    /// staging buffers: e.g. one column of a device array of several, without a host copy of
    /// the whole array to cut it from.
    pub fn download_range<T: Pod + Send + Sync>(
        &self,
        v: &DeviceVec<T>,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<T>> {
        if range.start > range.end || range.end > v.len() {
            return Err(KernelError::Shape(format!(
                "values {range:?} of a device array of {}",
                v.len()
            )));
        }
        let len = range.len();
        let src = v.ptr() + (range.start * std::mem::size_of::<T>()) as u64;
        // SAFETY: `src .. src + len` lies inside `v` (checked above); the copies are queued on
        // the context's stream.
        let out = self.with_staging(|s| unsafe { s.download(src, len) })?;
        self.d2h
            .fetch_add((len * std::mem::size_of::<T>()) as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Copies `v` into `dst` (of the same length; waits for the stream), through the pinned
    /// staging buffers when large: no host array is allocated on the way.
    pub fn download_into<T: Pod + Send + Sync>(
        &self,
        v: &DeviceVec<T>,
        dst: &mut [T],
    ) -> Result<()> {
        self.download_uninit(v, as_uninit(dst))
    }

    /// Copies the bytes `offset..offset + dst.len()` of `v`'s values into `dst` (waits for the
    /// stream), through the pinned staging buffers: e.g. a block of rows into its place in a
    /// memory-mapped file, which need not be aligned for `T`.
    pub fn download_bytes_into<T: Pod + Send + Sync>(
        &self,
        v: &DeviceVec<T>,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        self.bytes_out(v, offset, dst, |src, dst| {
            // SAFETY: the range lies inside `v` (checked by `bytes_out`); the copies are queued
            // on the context's stream.
            self.with_staging(|s| unsafe { s.download_to(src, as_uninit(dst)) })
        })
    }

    /// As [`GpuContext::download_into`], into memory not written yet (e.g. the spare capacity of
    /// a new `Vec`, whose pages are then touched once, by the copy, instead of being zeroed
    /// first); every slot is written when it returns `Ok`.
    pub fn download_uninit<T: Pod + Send + Sync>(
        &self,
        v: &DeviceVec<T>,
        dst: &mut [std::mem::MaybeUninit<T>],
    ) -> Result<()> {
        if v.len() != dst.len() {
            return Err(KernelError::Shape(format!(
                "{} device values into {} host slots",
                v.len(),
                dst.len()
            )));
        }
        let bytes = std::mem::size_of_val(dst);
        if self.stages_download(bytes) {
            // SAFETY: `v` holds dst.len() values; the copies are queued on the context's stream.
            self.with_staging(|s| unsafe { s.download_to(v.ptr(), dst) })?;
        } else {
            for (d, s) in dst.iter_mut().zip(v.to_host()?) {
                d.write(s);
            }
        }
        self.d2h.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn count_h2d(&self, bytes: usize) {
        self.h2d.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes moved between host and device so far.
    pub fn transfers(&self) -> Transfers {
        Transfers {
            host_to_device: self.h2d.load(Ordering::Relaxed),
            device_to_host: self.d2h.load(Ordering::Relaxed),
        }
    }

    /// Module `src`, loaded on first use (built in, from the disk cache, or compiled).
    pub fn load_module(&self, src: KernelSource) -> Result<Arc<CudaModule>> {
        let ctx = self.device.cuda_context().expect("real device");
        self.modules
            .get(ctx, &self.arch, src)
            .map_err(KernelError::Gpu)
    }

    /// Module `src` and each of its kernels loaded now. CUDA loads a kernel's code lazily, when
    /// its handle is first asked for, and that load waits for the kernels running on the
    /// device, holding up the copies on every other stream meanwhile (a handle first asked for
    /// behind neighbors' 4 s kNN stalled the output's write for that long:
    /// benches/benches/copy_overlap.rs). Loading everything up front keeps such loads out of
    /// the steps.
    pub fn load_kernels(&self, src: KernelSource) -> Result<()> {
        for name in src.kernel_names() {
            self.function(src, name)?;
        }
        Ok(())
    }

    /// The kernel `name` of module `src` (its module loaded on first use).
    pub fn function(&self, src: KernelSource, name: &str) -> Result<CudaFunction> {
        let module = self.load_module(src)?;
        module
            .load_function(name)
            .map_err(|e| KernelError::Gpu(format!("kernel `{}::{name}`: {e:?}", src.name)))
    }

    /// [`GpuContext::function`], allowed `bytes` of dynamic shared memory per block (beyond the
    /// default 48 KiB needs this opt-in).
    pub fn function_with_shared(
        &self,
        src: KernelSource,
        name: &str,
        bytes: usize,
    ) -> Result<CudaFunction> {
        let f = self.function(src, name)?;
        f.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(|e| KernelError::Gpu(format!("{name}: {bytes} bytes of shared memory: {e:?}")))?;
        Ok(f)
    }

    /// A launch of `f` on the context's stream; push the arguments, then [`GpuContext::launch`].
    pub fn launcher<'a>(&'a self, f: &'a CudaFunction) -> LaunchArgs<'a> {
        self.cuda_stream().launch_builder(f)
    }

    /// Launches (an empty grid launches nothing) and checks the launch.
    pub fn launch(&self, mut args: LaunchArgs<'_>, cfg: LaunchConfig, what: &str) -> Result<()> {
        if cfg.grid_dim.0 == 0 || cfg.grid_dim.1 == 0 || cfg.grid_dim.2 == 0 {
            return Ok(());
        }
        // SAFETY: each kernel's launch code pushes the arguments its CUDA signature declares,
        // with buffers sized for the grid it launches.
        unsafe { args.launch(cfg) }
            .map(|_| ())
            .map_err(|e| KernelError::Gpu(format!("launching `{what}`: {e:?}")))
    }

    /// Waits for everything queued on the stream; surfaces asynchronous kernel faults.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| KernelError::Gpu(format!("synchronizing the step's stream: {e}")))
    }

    /// Makes the CUDA context current on the calling thread (cuBLAS and cuSOLVER calls use
    /// the thread's current context).
    pub fn bind_to_thread(&self) -> Result<()> {
        self.device
            .cuda_context()
            .expect("a GpuContext is on a real device")
            .bind_to_thread()
            .map_err(|e| KernelError::Gpu(format!("binding the CUDA context: {e:?}")))
    }

    /// cuBLAS on the context's stream.
    pub fn blas(&self) -> Result<&CudaBlas> {
        if let Some(b) = self.blas.get() {
            return Ok(b);
        }
        let b = CudaBlas::new(self.cuda_stream().clone())
            .map_err(|e| KernelError::Gpu(format!("creating the cuBLAS handle: {e:?}")))?;
        Ok(self.blas.get_or_init(|| b))
    }

    /// cuSOLVER (dense) on the context's stream.
    pub fn solver(&self) -> Result<&DnHandle> {
        if let Some(s) = self.solver.get() {
            return Ok(s);
        }
        let s = DnHandle::new(self.cuda_stream().clone())
            .map_err(|e| KernelError::Gpu(format!("creating the cuSOLVER handle: {e:?}")))?;
        Ok(self.solver.get_or_init(|| s))
    }
}

/// One thread per item, [`super::BLOCK`] threads a block.
pub fn grid_for(items: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items.div_ceil(super::BLOCK as usize) as u32, 1, 1),
        block_dim: (super::BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A grid-stride launch over `items` (at most 2^16 blocks of [`super::BLOCK`] threads; the
/// kernel loops over the rest).
pub fn grid_stride(items: usize) -> LaunchConfig {
    let mut cfg = grid_for(items.max(1));
    cfg.grid_dim.0 = cfg.grid_dim.0.min(1 << 16);
    cfg
}

/// One block of `threads` per row (grids larger than 2^31 - 1 blocks are folded by the kernels'
/// grid-stride loops).
pub fn blocks_for_rows(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.min(i32::MAX as usize) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Initialised values viewed as slots to overwrite.
fn as_uninit<T: Pod>(dst: &mut [T]) -> &mut [std::mem::MaybeUninit<T>] {
    // SAFETY: T is Pod, so viewing initialised values as possibly-uninitialised ones and
    // overwriting them with values of T is sound.
    unsafe {
        std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut std::mem::MaybeUninit<T>, dst.len())
    }
}
