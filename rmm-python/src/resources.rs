//! The resources and adaptors as Python classes, named as in RMM's `rmm.mr`. Every class derives
//! from `DeviceMemoryResource`, which holds the shared rmm-core resource; a class that offers
//! more than allocate/deallocate (a pool's size, an adaptor's counters) also keeps its typed
//! handle. An adaptor keeps its upstream's Python object alive (`upstream_mr`). Size arguments
//! take an int or a string with a unit (`"4GiB"`), as `reinitialize` does.

use crate::device::{device_of, stream_of, PyDevice, PyStream};
use crate::errors::OrPy;
use crate::units::{bytes, Bytes};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::PyClass;
use rmm_core::adaptors::Statistics;
use rmm_core::{
    AlignedAdaptor, ArenaOptions, ArenaResource, AsyncResource, AsyncResourceOptions,
    BinningResource, CudaResource, FailureCallbackAdaptor, FixedSizeResource, LimitingAdaptor,
    LoggingAdaptor, ManagedResource, MemoryResource, PoolOptions, PoolResource, PrefetchAdaptor,
    SharedResource, StatisticsAdaptor, SystemResource, TrackingAdaptor,
};
use rmm_cuda::Device;
use std::path::PathBuf;
use std::sync::Arc;

/// A subclass object over its `DeviceMemoryResource` part.
fn init<T: PyClass<BaseType = PyResource>>(sub: T, base: PyResource) -> PyClassInitializer<T> {
    PyClassInitializer::from(base).add_subclass(sub)
}

/// The base of every resource: allocate and deallocate device memory on a stream.
#[pyclass(
    subclass,
    frozen,
    name = "DeviceMemoryResource",
    module = "rmm_core.mr"
)]
pub struct PyResource {
    pub(crate) inner: SharedResource,
    upstream: Option<Py<PyResource>>,
}

impl PyResource {
    pub(crate) fn wrap(inner: SharedResource) -> Self {
        PyResource {
            inner,
            upstream: None,
        }
    }

    fn over(inner: SharedResource, upstream: &Bound<'_, PyResource>) -> Self {
        PyResource {
            inner,
            upstream: Some(upstream.clone().unbind()),
        }
    }
}

#[pymethods]
impl PyResource {
    /// `nbytes` of device memory for use on `stream` (default: the device's default stream);
    /// returns the address. Raises MemoryError when out of memory.
    #[pyo3(signature = (nbytes, stream = None))]
    fn allocate(
        &self,
        py: Python<'_>,
        nbytes: usize,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let stream = stream_of(stream, self.inner.device())?;
        // Without the GIL, as RMM allocates: a thread growing a pool over a
        // CallbackMemoryResource needs it while this one may wait for the pool.
        py.detach(|| self.inner.allocate(nbytes, &stream)).or_py()
    }

    /// Gives back what `allocate` returned, with the same size, ordered after the work queued
    /// on `stream`.
    #[pyo3(signature = (ptr, nbytes, stream = None))]
    fn deallocate(
        &self,
        ptr: u64,
        nbytes: usize,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let stream = stream_of(stream, self.inner.device())?;
        // SAFETY: as in RMM, the caller promises a pointer of this resource with its size; the
        // checked pools and the tracking adaptor refuse a bad one.
        unsafe { self.inner.deallocate(ptr, nbytes, &stream) }.or_py()
    }

    /// True when this resource and `other` can free each other's memory.
    fn is_equal(&self, other: &Bound<'_, PyResource>) -> bool {
        self.inner.is_equal(&other.get().inner)
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name()
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice {
            inner: self.inner.device().clone(),
        }
    }

    /// The resource this one takes its memory from (None for a base resource).
    #[getter]
    fn upstream_mr(&self, py: Python<'_>) -> Option<Py<PyResource>> {
        self.upstream.as_ref().map(|u| u.clone_ref(py))
    }

    fn get_upstream(&self, py: Python<'_>) -> Option<Py<PyResource>> {
        self.upstream_mr(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<rmm_core.mr resource {} on {}>",
            self.inner.name(),
            self.inner.device().id()
        )
    }
}

/// A base resource whose constructor takes only `device` (default: the current device):
/// `$make` builds the rmm-core resource from `&Device` (a `Result`, as some need the GPU's
/// support).
macro_rules! device_resource {
    ($(#[$doc:meta])* $class:ident, $name:literal, $make:expr) => {
        $(#[$doc])*
        #[pyclass(extends = PyResource, frozen, name = $name, module = "rmm_core.mr")]
        pub struct $class;

        #[pymethods]
        impl $class {
            #[new]
            #[pyo3(signature = (device = None))]
            fn new(device: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
                let device = device_of(device)?;
                let make = $make;
                let resource: SharedResource = make(&device).or_py()?;
                Ok(init($class, PyResource::wrap(resource)))
            }
        }
    };
}

device_resource!(
    /// Plain device memory (cuMemAlloc / cuMemFree).
    PyCuda,
    "CudaMemoryResource",
    |d: &Device| rmm_core::Result::Ok(Arc::new(CudaResource::new(d)) as SharedResource)
);

device_resource!(
    /// Managed (unified) memory, which may exceed the GPU's memory.
    PyManaged,
    "ManagedMemoryResource",
    |d: &Device| rmm_core::Result::Ok(Arc::new(ManagedResource::new(d)) as SharedResource)
);

device_resource!(
    /// System (pageable host) memory the GPU reads directly (HMM/ATS); an error where the
    /// machine does not support it.
    PySystem,
    "SystemMemoryResource",
    |d: &Device| SystemResource::new(d).map(|r| Arc::new(r) as SharedResource)
);

device_resource!(
    /// The device's default memory pool (the one cudaMallocAsync and CuPy's or PyTorch's async
    /// allocators use), so that memory is shared with them.
    PyAsyncView,
    "CudaAsyncViewMemoryResource",
    |d: &Device| AsyncResource::view_default_pool(d).map(|r| Arc::new(r) as SharedResource)
);

/// A stream-ordered pool of the driver (cuMemAllocAsync) of its own.
#[pyclass(extends = PyResource, frozen, name = "CudaAsyncMemoryResource", module = "rmm_core.mr")]
pub struct PyAsync;

#[pymethods]
impl PyAsync {
    #[new]
    #[pyo3(signature = (initial_pool_size = None, release_threshold = None, maximum_pool_size = None, device = None))]
    fn new(
        initial_pool_size: Option<Bytes>,
        release_threshold: Option<Bytes>,
        maximum_pool_size: Option<Bytes>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let device = device_of(device)?;
        let options = AsyncResourceOptions {
            initial_pool_size: bytes(initial_pool_size),
            release_threshold: bytes(release_threshold),
            maximum_pool_size: bytes(maximum_pool_size),
        };
        let resource = AsyncResource::new(&device, options).or_py()?;
        Ok(init(PyAsync, PyResource::wrap(Arc::new(resource))))
    }
}

/// What the pool classes report, whatever their upstream.
trait PoolHandle: Send + Sync {
    fn pool_size(&self) -> usize;
    fn free_bytes(&self) -> usize;
    fn release(&self) -> rmm_core::Result<usize>;
}

impl<U: MemoryResource> PoolHandle for PoolResource<U> {
    fn pool_size(&self) -> usize {
        PoolResource::pool_size(self)
    }
    fn free_bytes(&self) -> usize {
        PoolResource::free_bytes(self)
    }
    fn release(&self) -> rmm_core::Result<usize> {
        PoolResource::release(self)
    }
}

/// A coalescing pool over `upstream_mr`: `initial_pool_size` bytes up front (default: half of
/// the free device memory), growing up to `maximum_pool_size` (default: no limit).
#[pyclass(extends = PyResource, subclass, frozen, name = "PoolMemoryResource", module = "rmm_core.mr")]
pub struct PyPool {
    pool: Arc<dyn PoolHandle>,
}

#[pymethods]
impl PyPool {
    #[new]
    /// `upstream_mr` (RMM's name) or `upstream` (the name RMM's Python guide uses): exactly one.
    #[pyo3(signature = (upstream_mr = None, initial_pool_size = None, maximum_pool_size = None, *, upstream = None))]
    fn new(
        upstream_mr: Option<&Bound<'_, PyResource>>,
        initial_pool_size: Option<Bytes>,
        maximum_pool_size: Option<Bytes>,
        upstream: Option<&Bound<'_, PyResource>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let upstream_mr = match (upstream_mr, upstream) {
            (Some(u), None) | (None, Some(u)) => u,
            (None, None) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "PoolMemoryResource needs an upstream resource (upstream_mr= or upstream=)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "PoolMemoryResource takes one upstream resource: give upstream_mr= or upstream=, not both",
                ))
            }
        };
        let options = PoolOptions {
            initial_pool_size: bytes(initial_pool_size),
            maximum_pool_size: bytes(maximum_pool_size),
            ..Default::default()
        };
        let pool = Arc::new(PoolResource::new(upstream_mr.get().inner.clone(), options).or_py()?);
        Ok(init(
            PyPool { pool: pool.clone() },
            PyResource::over(pool, upstream_mr),
        ))
    }

    /// Bytes the pool holds (in use or free).
    fn pool_size(&self) -> usize {
        self.pool.pool_size()
    }

    /// Bytes the pool holds that are free.
    fn free_bytes(&self) -> usize {
        self.pool.free_bytes()
    }

    /// Gives what is free back to the upstream (where it can); returns the bytes given back.
    fn release(&self) -> PyResult<usize> {
        self.pool.release().or_py()
    }
}

/// A pool on one range of virtual addresses that grows by mapping memory at its end and gives
/// memory back from its end (PyTorch's "expandable segments"): blocks coalesce across growth
/// steps, so it fragments less than a pool of separate chunks.
#[pyclass(extends = PyPool, frozen, name = "ExpandablePoolMemoryResource", module = "rmm_core.mr")]
pub struct PyExpandablePool;

#[pymethods]
impl PyExpandablePool {
    #[new]
    #[pyo3(signature = (initial_pool_size = Bytes(0), maximum_pool_size = None, device = None))]
    fn new(
        initial_pool_size: Bytes,
        maximum_pool_size: Option<Bytes>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let device = device_of(device)?;
        let options = PoolOptions {
            initial_pool_size: Some(initial_pool_size.0),
            maximum_pool_size: bytes(maximum_pool_size),
            ..Default::default()
        };
        let pool = Arc::new(PoolResource::expandable(&device, options).or_py()?);
        Ok(PyClassInitializer::from(PyResource::wrap(pool.clone()))
            .add_subclass(PyPool { pool })
            .add_subclass(PyExpandablePool))
    }
}

/// RMM's arena: per-stream arenas over a global one, for many threads and streams.
#[pyclass(extends = PyResource, frozen, name = "ArenaMemoryResource", module = "rmm_core.mr")]
pub struct PyArena;

#[pymethods]
impl PyArena {
    #[new]
    #[pyo3(signature = (upstream_mr, arena_size = None, dump_log_on_failure = false))]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        arena_size: Option<Bytes>,
        dump_log_on_failure: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        let options = ArenaOptions {
            arena_size: bytes(arena_size),
            dump_on_failure: dump_log_on_failure
                .then(|| PathBuf::from("rmm_arena_memory_dump.log")),
            ..Default::default()
        };
        let arena = ArenaResource::new(upstream_mr.get().inner.clone(), options).or_py()?;
        Ok(init(
            PyArena,
            PyResource::over(Arc::new(arena), upstream_mr),
        ))
    }
}

/// Fixed-size bins of 2^min .. 2^max bytes over `upstream_mr`; larger requests go to it.
#[pyclass(extends = PyResource, frozen, name = "BinningMemoryResource", module = "rmm_core.mr")]
pub struct PyBinning;

#[pymethods]
impl PyBinning {
    #[new]
    #[pyo3(signature = (upstream_mr, min_size_exponent = None, max_size_exponent = None))]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        min_size_exponent: Option<u32>,
        max_size_exponent: Option<u32>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let upstream = upstream_mr.get().inner.clone();
        let binning = match (min_size_exponent, max_size_exponent) {
            (None, None) => BinningResource::new(upstream),
            (Some(min), Some(max)) => BinningResource::with_range(upstream, min, max).or_py()?,
            _ => {
                return Err(PyValueError::new_err(
                    "give both min_size_exponent and max_size_exponent, or neither",
                ))
            }
        };
        Ok(init(
            PyBinning,
            PyResource::over(Arc::new(binning), upstream_mr),
        ))
    }
}

/// Blocks of one size over `upstream_mr`.
#[pyclass(extends = PyResource, frozen, name = "FixedSizeMemoryResource", module = "rmm_core.mr")]
pub struct PyFixedSize;

#[pymethods]
impl PyFixedSize {
    #[new]
    #[pyo3(signature = (upstream_mr, block_size = Bytes(1 << 20), blocks_to_preallocate = 128))]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        block_size: Bytes,
        blocks_to_preallocate: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
        let fixed = FixedSizeResource::new(
            upstream_mr.get().inner.clone(),
            block_size.0,
            blocks_to_preallocate,
        )
        .or_py()?;
        Ok(init(
            PyFixedSize,
            PyResource::over(Arc::new(fixed), upstream_mr),
        ))
    }
}

/// Refuses (MemoryError) any allocation that would take more than `allocation_limit` bytes in
/// all.
#[pyclass(extends = PyResource, frozen, name = "LimitingResourceAdaptor", module = "rmm_core.mr")]
pub struct PyLimiting {
    limiting: Arc<LimitingAdaptor<SharedResource>>,
}

#[pymethods]
impl PyLimiting {
    #[new]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        allocation_limit: Bytes,
    ) -> PyClassInitializer<Self> {
        let limiting = Arc::new(LimitingAdaptor::new(
            upstream_mr.get().inner.clone(),
            allocation_limit.0,
        ));
        init(
            PyLimiting {
                limiting: limiting.clone(),
            },
            PyResource::over(limiting, upstream_mr),
        )
    }

    fn get_allocated_bytes(&self) -> usize {
        self.limiting.allocated_bytes()
    }

    fn get_allocation_limit(&self) -> usize {
        self.limiting.allocation_limit()
    }
}

/// Counts bytes and allocations (current, peak, total), in nested scopes.
#[pyclass(extends = PyResource, frozen, name = "StatisticsResourceAdaptor", module = "rmm_core.mr")]
pub struct PyStatistics {
    statistics: Arc<StatisticsAdaptor<SharedResource>>,
}

fn counts<'py>(py: Python<'py>, s: Statistics) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("current_bytes", s.bytes.value)?;
    d.set_item("current_count", s.allocations.value)?;
    d.set_item("peak_bytes", s.bytes.peak)?;
    d.set_item("peak_count", s.allocations.peak)?;
    d.set_item("total_bytes", s.bytes.total)?;
    d.set_item("total_count", s.allocations.total)?;
    Ok(d)
}

#[pymethods]
impl PyStatistics {
    #[new]
    fn new(upstream_mr: &Bound<'_, PyResource>) -> PyClassInitializer<Self> {
        let statistics = Arc::new(StatisticsAdaptor::new(upstream_mr.get().inner.clone()));
        init(
            PyStatistics {
                statistics: statistics.clone(),
            },
            PyResource::over(statistics, upstream_mr),
        )
    }

    /// The innermost scope's counters: a dict of current/peak/total bytes and counts.
    #[getter]
    fn allocation_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts(py, self.statistics.statistics())
    }

    /// Starts a new scope (counters from zero); returns the enclosing scope's counters.
    fn push_counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts(py, self.statistics.push_counters())
    }

    /// Ends the innermost scope (adding it to the enclosing one); returns its counters.
    fn pop_counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts(py, self.statistics.pop_counters().or_py()?)
    }
}

/// Tracks every live allocation (with its stack when asked) and refuses bad frees.
#[pyclass(extends = PyResource, frozen, name = "TrackingResourceAdaptor", module = "rmm_core.mr")]
pub struct PyTracking {
    tracking: Arc<TrackingAdaptor<SharedResource>>,
}

#[pymethods]
impl PyTracking {
    #[new]
    #[pyo3(signature = (upstream_mr, capture_stacks = false))]
    fn new(upstream_mr: &Bound<'_, PyResource>, capture_stacks: bool) -> PyClassInitializer<Self> {
        let tracking = Arc::new(TrackingAdaptor::new(
            upstream_mr.get().inner.clone(),
            capture_stacks,
        ));
        init(
            PyTracking {
                tracking: tracking.clone(),
            },
            PyResource::over(tracking, upstream_mr),
        )
    }

    fn get_allocated_bytes(&self) -> usize {
        self.tracking.allocated_bytes()
    }

    fn get_outstanding_allocations_str(&self) -> String {
        self.tracking.leak_report()
    }

    fn log_outstanding_allocations(&self) {
        eprintln!("{}", self.tracking.leak_report());
    }
}

/// Logs every allocation and free to a CSV file in RMM's format (replayable, and readable by
/// rmm_core's timeline and memory_viz exports). `log_file_name` defaults to $RMM_LOG_FILE.
#[pyclass(extends = PyResource, frozen, name = "LoggingResourceAdaptor", module = "rmm_core.mr")]
pub struct PyLogging {
    logging: Arc<LoggingAdaptor<SharedResource>>,
}

#[pymethods]
impl PyLogging {
    #[new]
    #[pyo3(signature = (upstream_mr, log_file_name = None))]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        log_file_name: Option<PathBuf>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let path = match log_file_name
            .or_else(|| std::env::var_os("RMM_LOG_FILE").map(PathBuf::from))
        {
            Some(path) => path,
            None => return Err(PyValueError::new_err(
                "LoggingResourceAdaptor needs log_file_name (or RMM_LOG_FILE in the environment)",
            )),
        };
        let logging = Arc::new(LoggingAdaptor::new(upstream_mr.get().inner.clone(), path).or_py()?);
        Ok(init(
            PyLogging {
                logging: logging.clone(),
            },
            PyResource::over(logging, upstream_mr),
        ))
    }

    fn flush(&self) -> PyResult<()> {
        self.logging
            .flush()
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
    }

    fn get_file_name(&self) -> Option<String> {
        self.logging
            .path()
            .map(|p| p.to_string_lossy().into_owned())
    }
}

/// Calls `callback(nbytes)` when `upstream_mr` is out of memory; the allocation is tried again
/// while the callback returns True (it may free memory: spill, collect garbage). An exception
/// in the callback counts as False and is reported as unraisable.
#[pyclass(extends = PyResource, frozen, name = "FailureCallbackResourceAdaptor", module = "rmm_core.mr")]
pub struct PyFailureCallback;

#[pymethods]
impl PyFailureCallback {
    #[new]
    fn new(upstream_mr: &Bound<'_, PyResource>, callback: Py<PyAny>) -> PyClassInitializer<Self> {
        let retry = move |bytes: usize, _: &rmm_core::OutOfMemory| {
            Python::attach(|py| match callback.call1(py, (bytes,)) {
                Ok(answer) => answer.is_truthy(py).unwrap_or(false),
                Err(error) => {
                    error.write_unraisable(py, None);
                    false
                }
            })
        };
        let adaptor = FailureCallbackAdaptor::new(upstream_mr.get().inner.clone(), retry);
        init(
            PyFailureCallback,
            PyResource::over(Arc::new(adaptor), upstream_mr),
        )
    }
}

/// Device memory from two Python functions (RMM's `CallbackMemoryResource`):
/// `allocate_func(size, stream)` returns the address of `size` bytes (0 or None when it has
/// none: out of memory), `deallocate_func(ptr, size, stream)` takes them back; `stream` is an
/// `rmm_core.Stream`. An exception in `allocate_func` is the allocation's error (`MemoryError`
/// stays one); one in `deallocate_func` is reported as unraisable. The functions run with the
/// GIL, which rmm_core's own allocating calls release first. CuPy's, Numba's and PyTorch's
/// allocations hold it: under a pool that several threads grow, a thread holding the GIL can
/// wait for the pool while the thread growing it waits for the GIL (as with RMM's).
#[pyclass(extends = PyResource, frozen, name = "CallbackMemoryResource", module = "rmm_core.mr")]
pub struct PyCallback;

#[pymethods]
impl PyCallback {
    #[new]
    #[pyo3(signature = (allocate_func, deallocate_func, device = None))]
    fn new(
        allocate_func: Py<PyAny>,
        deallocate_func: Py<PyAny>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let resource = PythonCallbacks {
            device: device_of(device)?,
            allocate: allocate_func,
            deallocate: deallocate_func,
        };
        Ok(init(PyCallback, PyResource::wrap(Arc::new(resource))))
    }
}

/// The resource behind `CallbackMemoryResource`.
#[derive(Debug)]
struct PythonCallbacks {
    device: Device,
    allocate: Py<PyAny>,
    deallocate: Py<PyAny>,
}

impl MemoryResource for PythonCallbacks {
    fn allocate(&self, bytes: usize, stream: &rmm_cuda::Stream) -> rmm_core::Result<u64> {
        rmm_core::check_stream(self, stream)?;
        if bytes == 0 {
            return Ok(0);
        }
        let out_of_memory = |detail: String| {
            rmm_core::MemoryError::OutOfMemory(
                rmm_core::OutOfMemory::new("callback", bytes).detail(detail),
            )
        };
        Python::attach(|py| {
            let stream = PyStream {
                inner: stream.clone(),
            };
            match self.allocate.call1(py, (bytes, stream)) {
                Ok(ptr) if ptr.is_none(py) => {
                    Err(out_of_memory("allocate_func returned None".into()))
                }
                Ok(ptr) => match ptr.extract::<u64>(py) {
                    Ok(0) => Err(out_of_memory("allocate_func returned 0".into())),
                    Ok(ptr) => Ok(ptr),
                    Err(_) => Err(rmm_core::MemoryError::InvalidArgument(format!(
                        "allocate_func returned {}, not an address",
                        ptr.bind(py).repr().map_or("?".into(), |r| r.to_string())
                    ))),
                },
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) => {
                    Err(out_of_memory(format!("allocate_func raised {e}")))
                }
                Err(e) => Err(rmm_core::MemoryError::InvalidArgument(format!(
                    "allocate_func raised {e}"
                ))),
            }
        })
    }

    unsafe fn deallocate(
        &self,
        ptr: u64,
        bytes: usize,
        stream: &rmm_cuda::Stream,
    ) -> rmm_core::Result<()> {
        rmm_core::check_stream(self, stream)?;
        if ptr == 0 {
            return Ok(());
        }
        Python::attach(|py| {
            let stream = PyStream {
                inner: stream.clone(),
            };
            if let Err(e) = self.deallocate.call1(py, (ptr, bytes, stream)) {
                e.write_unraisable(py, None);
            }
        });
        Ok(())
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn name(&self) -> String {
        "callback(python)".into()
    }
}

/// Aligns allocations of `alignment_threshold` bytes or more to `alignment` (a power of two,
/// a multiple of 256).
#[pyclass(extends = PyResource, frozen, name = "AlignedResourceAdaptor", module = "rmm_core.mr")]
pub struct PyAligned;

#[pymethods]
impl PyAligned {
    #[new]
    #[pyo3(signature = (upstream_mr, alignment = 256, alignment_threshold = 65536))]
    fn new(
        upstream_mr: &Bound<'_, PyResource>,
        alignment: usize,
        alignment_threshold: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
        let adaptor = AlignedAdaptor::new(
            upstream_mr.get().inner.clone(),
            alignment,
            alignment_threshold,
        )
        .or_py()?;
        Ok(init(
            PyAligned,
            PyResource::over(Arc::new(adaptor), upstream_mr),
        ))
    }
}

/// Prefetches each (managed) allocation to the device on its stream.
#[pyclass(extends = PyResource, frozen, name = "PrefetchResourceAdaptor", module = "rmm_core.mr")]
pub struct PyPrefetch;

#[pymethods]
impl PyPrefetch {
    #[new]
    fn new(upstream_mr: &Bound<'_, PyResource>) -> PyClassInitializer<Self> {
        let adaptor = PrefetchAdaptor::new(upstream_mr.get().inner.clone());
        init(PyPrefetch, PyResource::over(Arc::new(adaptor), upstream_mr))
    }
}

/// Sets the resource `device` (an ordinal or Device) allocates from when none is named.
#[pyfunction]
pub(crate) fn set_per_device_resource(
    device: &Bound<'_, PyAny>,
    mr: &Bound<'_, PyResource>,
) -> PyResult<()> {
    let device = device_of(Some(device))?;
    rmm_core::set_per_device_resource(&device, mr.get().inner.clone()).or_py()?;
    Ok(())
}

/// The resource of `device` (a CudaMemoryResource until one is set), as a DeviceMemoryResource.
#[pyfunction]
#[pyo3(signature = (device = None))]
pub(crate) fn get_per_device_resource(device: Option<&Bound<'_, PyAny>>) -> PyResult<PyResource> {
    let device = device_of(device)?;
    Ok(PyResource::wrap(rmm_core::get_per_device_resource(&device)))
}
