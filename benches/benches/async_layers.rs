//! Where the async resource's time per call goes (issue 11: `AsyncResource` measured up to 0.55x
//! of RMM's `cuda_async` at 1 KiB, one thread). BENCHMARKS.md A's one-thread traces replayed in
//! one process through three layers over the same kind of pool (a driver pool of pinned device
//! memory, release threshold at its maximum, on a non-blocking stream):
//!
//! - `driver`: `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` called straight through cudarc's
//!   `sys` functions (what `benches/rmm/rmm_ra.cu`'s `raw_driver_pool` calls from C++);
//! - `mem_pool`: `rmm_cuda::MemPool::alloc_async` / `free_async` (adds the device checks and the
//!   context binding);
//! - `async_resource`: `rmm_core::AsyncResource` behind `dyn MemoryResource` (what
//!   `random_allocations --only async` measures).
//!
//! With `--rmm-lib PATH` (`benches/rmm/rmm_async_layers.cu` built as a shared library on the GPU
//! machine, `scripts/device/async_layers.sh`), two more layers take their turns in the same
//! process: `runtime` (`cudaMallocFromPoolAsync` / `cudaFreeAsync` on a pool of the same kind,
//! what RMM's resource calls) and `rmm_cuda_async` (RMM's `cuda_async_memory_resource`). The
//! driver's cost per call swings by up to 2x from one process to the next, so only turns taken
//! in one process compare RMM's resource with ours.
//!
//! ```text
//! cargo bench -p benches --bench async_layers -- [--quick] [--json PATH] [--rmm-lib PATH]
//! ```
//!
//! Figure: wall time of the allocate/deallocate loop / events, best of 5 passes after a warm-up,
//! the layers taking turns within each pass so drift hits them alike.

use benches::{describe_device, flag_value, print_table, trace, Trace};
use rmm_core::{AsyncResource, AsyncResourceOptions, MemoryResource, SharedResource};
use rmm_cuda::cudarc::driver::sys;
use rmm_cuda::{Device, MemPoolOptions};
use serde_json::json;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const MAX_SIZES: [usize; 4] = [KIB, 64 * KIB, MIB, 4 * MIB];
const PASSES: usize = 9;

/// One layer: allocate `bytes`, or free a pointer it gave.
trait Layer {
    fn name(&self) -> &'static str;
    fn allocate(&self, bytes: usize) -> u64;
    /// # Safety
    /// `ptr` must come from this layer's `allocate` and not be freed yet.
    unsafe fn free(&self, ptr: u64);
    fn synchronize(&self);
}

fn check(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// The driver's calls with nothing in between.
struct Driver {
    pool: sys::CUmemoryPool,
    stream: sys::CUstream,
}

/// A non-blocking stream of the current context, made straight through the driver.
fn raw_stream() -> sys::CUstream {
    let mut stream = std::ptr::null_mut();
    // SAFETY: the out pointer is valid; the caller made the context current.
    check(
        unsafe {
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            )
        },
        "cuStreamCreate",
    );
    stream
}

impl Driver {
    fn new(device: &Device) -> Driver {
        device.bind().expect("context");
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0; // Device::cuda(0)
        let mut pool = std::ptr::null_mut();
        let mut threshold: u64 = u64::MAX;
        // SAFETY: props is initialised; the out pointers are valid; the context is current.
        unsafe {
            check(sys::cuMemPoolCreate(&mut pool, &props), "cuMemPoolCreate");
            check(
                sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    &mut threshold as *mut u64 as *mut c_void,
                ),
                "cuMemPoolSetAttribute",
            );
        }
        Driver {
            pool,
            stream: raw_stream(),
        }
    }
}

impl Layer for Driver {
    fn name(&self) -> &'static str {
        "driver"
    }
    fn allocate(&self, bytes: usize) -> u64 {
        let mut p = 0;
        // SAFETY: pool and stream are live; the context is current on this thread.
        check(
            unsafe { sys::cuMemAllocFromPoolAsync(&mut p, bytes, self.pool, self.stream) },
            "cuMemAllocFromPoolAsync",
        );
        p
    }
    unsafe fn free(&self, ptr: u64) {
        // SAFETY: the caller's contract.
        check(
            unsafe { sys::cuMemFreeAsync(ptr, self.stream) },
            "cuMemFreeAsync",
        );
    }
    fn synchronize(&self) {
        // SAFETY: the stream is live.
        check(unsafe { sys::cuStreamSynchronize(self.stream) }, "sync");
    }
}

/// rmm_cuda's pool and stream.
struct Pool {
    pool: rmm_cuda::MemPool,
    stream: rmm_cuda::Stream,
}

impl Layer for Pool {
    fn name(&self) -> &'static str {
        "mem_pool"
    }
    fn allocate(&self, bytes: usize) -> u64 {
        self.pool.alloc_async(bytes, &self.stream).expect("alloc")
    }
    unsafe fn free(&self, ptr: u64) {
        // SAFETY: the caller's contract.
        unsafe { self.pool.free_async(ptr, &self.stream) }.expect("free")
    }
    fn synchronize(&self) {
        self.stream.synchronize().expect("sync");
    }
}

/// rmm-core's resource, as the pipeline and random_allocations hold it.
struct Resource {
    r: SharedResource,
    stream: rmm_cuda::Stream,
}

impl Layer for Resource {
    fn name(&self) -> &'static str {
        "async_resource"
    }
    fn allocate(&self, bytes: usize) -> u64 {
        self.r.allocate(bytes, &self.stream).expect("allocate")
    }
    unsafe fn free(&self, ptr: u64) {
        // SAFETY: the caller's contract (the size is not used by this resource).
        unsafe { self.r.deallocate(ptr, 0, &self.stream) }.expect("deallocate")
    }
    fn synchronize(&self) {
        self.stream.synchronize().expect("sync");
    }
}

/// The functions of `rmm_async_layers.cu`, loaded from the shared library.
struct RmmLib {
    _lib: libloading::Library,
    async_new: unsafe extern "C" fn() -> *mut c_void,
    async_allocate: unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> *mut c_void,
    async_deallocate: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void) -> bool,
    runtime_new: unsafe extern "C" fn() -> *mut c_void,
    runtime_allocate: unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> *mut c_void,
    runtime_free: unsafe extern "C" fn(*mut c_void, *mut c_void) -> bool,
}

impl RmmLib {
    fn load(path: &str) -> Result<Arc<RmmLib>, String> {
        // SAFETY: the library is `rmm_async_layers.cu` built by scripts/device/async_layers.sh:
        // its initialisers only set up RMM's and the runtime's statics, and every symbol below
        // has the C signature given for it.
        unsafe {
            let lib = libloading::Library::new(path).map_err(|e| format!("{path}: {e}"))?;
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get($name)
                        .map_err(|e| format!("{path}: {}: {e}", stringify!($name)))?
                };
            }
            Ok(Arc::new(RmmLib {
                async_new: sym!(b"rmm_async_new"),
                async_allocate: sym!(b"rmm_async_allocate"),
                async_deallocate: sym!(b"rmm_async_deallocate"),
                runtime_new: sym!(b"runtime_pool_new"),
                runtime_allocate: sym!(b"runtime_pool_allocate"),
                runtime_free: sym!(b"runtime_pool_free"),
                _lib: lib,
            }))
        }
    }
}

/// RMM's `cuda_async_memory_resource` (its default construction, as RMM's benchmark builds it).
struct RmmAsync {
    lib: Arc<RmmLib>,
    mr: *mut c_void,
    stream: sys::CUstream,
}

impl Layer for RmmAsync {
    fn name(&self) -> &'static str {
        "rmm_cuda_async"
    }
    fn allocate(&self, bytes: usize) -> u64 {
        // SAFETY: `mr` is RMM's resource made by this library, the stream is live.
        let p = unsafe { (self.lib.async_allocate)(self.mr, bytes, self.stream as *mut c_void) };
        assert!(!p.is_null(), "RMM's cuda_async refused {bytes} bytes");
        p as u64
    }
    unsafe fn free(&self, ptr: u64) {
        // SAFETY: the caller's contract; RMM's cuda_async does not use the size.
        let ok = unsafe {
            (self.lib.async_deallocate)(self.mr, ptr as *mut c_void, 0, self.stream as *mut c_void)
        };
        assert!(ok, "RMM's cuda_async deallocate failed");
    }
    fn synchronize(&self) {
        // SAFETY: the stream is live.
        check(unsafe { sys::cuStreamSynchronize(self.stream) }, "sync");
    }
}

/// The driver's pool through the runtime, as RMM's resource calls it, with nothing in between.
struct Runtime {
    lib: Arc<RmmLib>,
    pool: *mut c_void,
    stream: sys::CUstream,
}

impl Layer for Runtime {
    fn name(&self) -> &'static str {
        "runtime"
    }
    fn allocate(&self, bytes: usize) -> u64 {
        // SAFETY: the pool was made by this library, the stream is live.
        let p =
            unsafe { (self.lib.runtime_allocate)(self.pool, bytes, self.stream as *mut c_void) };
        assert!(
            !p.is_null(),
            "cudaMallocFromPoolAsync refused {bytes} bytes"
        );
        p as u64
    }
    unsafe fn free(&self, ptr: u64) {
        // SAFETY: the caller's contract.
        let ok = unsafe { (self.lib.runtime_free)(ptr as *mut c_void, self.stream as *mut c_void) };
        assert!(ok, "cudaFreeAsync failed");
    }
    fn synchronize(&self) {
        // SAFETY: the stream is live.
        check(unsafe { sys::cuStreamSynchronize(self.stream) }, "sync");
    }
}

/// RMM's two layers from the library at `path` (both on device 0, whose primary context, the
/// runtime's, is current: streams made through the driver serve the runtime's calls too).
fn rmm_layers(device: &Device, path: &str) -> Result<Vec<Box<dyn Layer>>, String> {
    let lib = RmmLib::load(path)?;
    device.bind().map_err(|e| e.to_string())?;
    // SAFETY: functions of the loaded library with their C signatures; null means it failed.
    let (mr, pool) = unsafe { ((lib.async_new)(), (lib.runtime_new)()) };
    if mr.is_null() || pool.is_null() {
        return Err(format!(
            "{path}: making RMM's resource or the runtime's pool failed"
        ));
    }
    Ok(vec![
        Box::new(Runtime {
            lib: lib.clone(),
            pool,
            stream: raw_stream(),
        }),
        Box::new(RmmAsync {
            lib,
            mr,
            stream: raw_stream(),
        }),
    ])
}

/// ns per event of one pass of `t` through `layer`.
fn pass(layer: &dyn Layer, t: &Trace, ptrs: &mut [u64]) -> f64 {
    let start = Instant::now();
    for op in &t.ops {
        if op.size == 0 {
            // SAFETY: the slot holds a live block from this layer.
            unsafe { layer.free(ptrs[op.slot as usize]) };
        } else {
            ptrs[op.slot as usize] = layer.allocate(op.size as usize);
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / t.ops.len() as f64;
    layer.synchronize();
    ns
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps = if args.iter().any(|a| a == "--quick") {
        10_000
    } else {
        100_000
    };
    let device = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("async_layers needs a GPU: {e}");
            std::process::exit(2);
        }
    };
    let mut layers: Vec<Box<dyn Layer>> = vec![
        Box::new(Driver::new(&device)),
        Box::new(Pool {
            pool: device
                .create_mem_pool(MemPoolOptions {
                    release_threshold: None,
                    maximum_size: None,
                })
                .expect("pool"),
            stream: device.new_stream().expect("stream"),
        }),
        Box::new(Resource {
            r: Arc::new(
                AsyncResource::new(&device, AsyncResourceOptions::default()).expect("resource"),
            ),
            stream: device.new_stream().expect("stream"),
        }),
    ];
    if let Some(path) = flag_value(&args, "--rmm-lib") {
        match rmm_layers(&device, &path) {
            Ok(more) => layers.extend(more),
            Err(e) => {
                eprintln!("async_layers: --rmm-lib: {e}");
                std::process::exit(2);
            }
        }
    }
    let index = |name: &str| layers.iter().position(|l| l.name() == name);
    let (ours, rmm) = (index("async_resource"), index("rmm_cuda_async"));
    device.bind().expect("context");
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for max_size in MAX_SIZES {
        let t = trace(0, steps, max_size, 4 * GIB);
        let mut ptrs = vec![0u64; t.slots];
        let mut passes = vec![Vec::with_capacity(PASSES); layers.len()];
        for l in &layers {
            pass(l.as_ref(), &t, &mut ptrs); // warm-up: the pool grows
        }
        for round in 0..PASSES {
            // Turns in a rotating order, so that no layer always follows the same one.
            for k in 0..layers.len() {
                let i = (k + round) % layers.len();
                passes[i].push(pass(layers[i].as_ref(), &t, &mut ptrs));
            }
        }
        let best: Vec<f64> = passes
            .iter()
            .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
            .collect();
        let medians: Vec<f64> = passes.iter_mut().map(|p| median(p)).collect();
        let label = if max_size >= MIB {
            format!("{} MiB", max_size / MIB)
        } else {
            format!("{} KiB", max_size / KIB)
        };
        let mut row = vec![label];
        row.extend(
            best.iter()
                .zip(&medians)
                .map(|(b, m)| format!("{b:.0} ({m:.0})")),
        );
        row.push(format!("{:+.0}", best[2] - best[0]));
        if let (Some(o), Some(r)) = (ours, rmm) {
            row.push(format!(
                "{:.2}x ({:.2}x)",
                best[r] / best[o],
                medians[r] / medians[o]
            ));
        }
        rows.push(row);
        results.push(json!({"max_size": max_size, "events": t.ops.len(),
            "ns_per_op": layers.iter().zip(best.iter().zip(&medians)).map(|(l, (b, m))| json!({"layer": l.name(), "ns": b, "median_ns": m})).collect::<Vec<_>>(),
            "passes": layers.iter().zip(&passes).map(|(l, p)| json!({"layer": l.name(), "ns": p})).collect::<Vec<_>>()}));
    }
    println!(
        "BENCHMARKS A traces, one thread, {steps} steps; ns per event, best of {PASSES} (median)"
    );
    let mut header: Vec<&str> = vec!["max size"];
    header.extend(layers.iter().map(|l| l.name()));
    header.push("resource - driver");
    if ours.is_some() && rmm.is_some() {
        header.push("RMM / ours");
    }
    print_table(&header, &rows);
    if let Some(path) = flag_value(&args, "--json") {
        let doc = json!({"device": describe_device(&device), "steps": steps, "passes": PASSES, "results": results});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("json");
    }
}
