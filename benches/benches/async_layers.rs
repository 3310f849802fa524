//! Where the async resource's time per call goes (issue 11: `AsyncResource` measured up to 0.55x
//! of RMM's `cuda_async` at 1 KiB, one thread). WORKLOADS.md A's one-thread traces replayed in
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
//! machine, `scripts/device/benchmarks/async_layers.sh`), two more layers take their turns in the same
//! process: `runtime` (`cudaMallocFromPoolAsync` / `cudaFreeAsync` on a pool of the same kind,
//! what RMM's resource calls) and `rmm_cuda_async` (RMM's `cuda_async_memory_resource`). The
//! driver's cost per call swings by up to 2x from one process to the next, so only turns taken
//! in one process compare RMM's resource with ours.
//!
//! `--grid` replays RMM's own grid instead ({1k, 10k, 100k} allocations x a maximum size of {1 ..
//! 4096} MiB, the traces of `random_allocations --grid`) through the driver's calls, our resource
//! and RMM's (three pools of up to 16,000 MiB each fit on an 80 GB GPU), 3 passes a cell.
//! `--threads N` runs WORKLOADS.md A's N-thread traces, each on a thread and a stream of its own
//! (4 GiB live at most, shared), as `random_allocations` and RMM's `rmm_ra` do.
//!
//! ```text
//! cargo bench -p benches --bench async_layers -- [--quick] [--grid | --threads N] [--json PATH] [--rmm-lib PATH]
//! ```
//!
//! Figure: wall time of the allocate/deallocate loop / events, best of 5 passes after a warm-up,
//! the layers taking turns within each pass so drift hits them alike.

use benches::{describe_device, flag_value, grid_trace, print_table, trace, Trace};
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
/// Passes per cell of `--grid` (its large cells take seconds per pass).
const GRID_PASSES: usize = 3;
/// Passes per size with `--threads` above 1.
const THREADED_PASSES: usize = 5;

/// One layer: allocate `bytes` on its stream `s`, or free a pointer it gave. A layer has one
/// stream per thread of the run (`--threads`), and threads use it at once.
trait Layer: Sync {
    fn name(&self) -> &'static str;
    fn allocate(&self, bytes: usize, s: usize) -> u64;
    /// # Safety
    /// `ptr` must come from this layer's `allocate` and not be freed yet.
    unsafe fn free(&self, ptr: u64, s: usize);
    /// Waits for every stream of the layer.
    fn synchronize(&self);
}

fn check(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// The driver's calls with nothing in between.
struct Driver {
    pool: sys::CUmemoryPool,
    streams: Vec<sys::CUstream>,
}

// SAFETY: driver pools and streams may be used from any thread.
unsafe impl Sync for Driver {}

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

/// `n` streams of [`raw_stream`].
fn raw_streams(n: usize) -> Vec<sys::CUstream> {
    (0..n).map(|_| raw_stream()).collect()
}

/// Waits for each of `streams`.
fn synchronize_raw(streams: &[sys::CUstream]) {
    for &s in streams {
        // SAFETY: the stream is live.
        check(
            unsafe { sys::cuStreamSynchronize(s) },
            "cuStreamSynchronize",
        );
    }
}

impl Driver {
    fn new(device: &Device, streams: usize) -> Driver {
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
            streams: raw_streams(streams),
        }
    }
}

impl Layer for Driver {
    fn name(&self) -> &'static str {
        "driver"
    }
    fn allocate(&self, bytes: usize, s: usize) -> u64 {
        let mut p = 0;
        // SAFETY: pool and stream are live (the stream names the context).
        check(
            unsafe { sys::cuMemAllocFromPoolAsync(&mut p, bytes, self.pool, self.streams[s]) },
            "cuMemAllocFromPoolAsync",
        );
        p
    }
    unsafe fn free(&self, ptr: u64, s: usize) {
        // SAFETY: the caller's contract.
        check(
            unsafe { sys::cuMemFreeAsync(ptr, self.streams[s]) },
            "cuMemFreeAsync",
        );
    }
    fn synchronize(&self) {
        synchronize_raw(&self.streams);
    }
}

/// Waits for each of `streams` (see [`synchronize_raw`] for the driver's own).
fn synchronize_all(streams: &[rmm_cuda::Stream]) {
    for s in streams {
        s.synchronize().expect("sync");
    }
}

/// rmm_cuda's pool and streams.
struct Pool {
    pool: rmm_cuda::MemPool,
    streams: Vec<rmm_cuda::Stream>,
}

impl Layer for Pool {
    fn name(&self) -> &'static str {
        "mem_pool"
    }
    fn allocate(&self, bytes: usize, s: usize) -> u64 {
        self.pool
            .alloc_async(bytes, &self.streams[s])
            .expect("alloc")
    }
    unsafe fn free(&self, ptr: u64, s: usize) {
        // SAFETY: the caller's contract.
        unsafe { self.pool.free_async(ptr, &self.streams[s]) }.expect("free")
    }
    fn synchronize(&self) {
        synchronize_all(&self.streams);
    }
}

/// rmm-core's resource, as the pipeline and random_allocations hold it.
struct Resource {
    r: SharedResource,
    streams: Vec<rmm_cuda::Stream>,
}

impl Layer for Resource {
    fn name(&self) -> &'static str {
        "async_resource"
    }
    fn allocate(&self, bytes: usize, s: usize) -> u64 {
        self.r.allocate(bytes, &self.streams[s]).expect("allocate")
    }
    unsafe fn free(&self, ptr: u64, s: usize) {
        // SAFETY: the caller's contract (the size is not used by this resource).
        unsafe { self.r.deallocate(ptr, 0, &self.streams[s]) }.expect("deallocate")
    }
    fn synchronize(&self) {
        synchronize_all(&self.streams);
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
        // SAFETY: the library is `rmm_async_layers.cu` built by scripts/device/benchmarks/async_layers.sh:
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
    streams: Vec<sys::CUstream>,
}

// SAFETY: RMM's resource is thread-safe; driver streams may be used from any thread.
unsafe impl Sync for RmmAsync {}

impl Layer for RmmAsync {
    fn name(&self) -> &'static str {
        "rmm_cuda_async"
    }
    fn allocate(&self, bytes: usize, s: usize) -> u64 {
        // SAFETY: `mr` is RMM's resource made by this library, the stream is live.
        let p =
            unsafe { (self.lib.async_allocate)(self.mr, bytes, self.streams[s] as *mut c_void) };
        assert!(!p.is_null(), "RMM's cuda_async refused {bytes} bytes");
        p as u64
    }
    unsafe fn free(&self, ptr: u64, s: usize) {
        // SAFETY: the caller's contract; RMM's cuda_async does not use the size.
        let ok = unsafe {
            (self.lib.async_deallocate)(
                self.mr,
                ptr as *mut c_void,
                0,
                self.streams[s] as *mut c_void,
            )
        };
        assert!(ok, "RMM's cuda_async deallocate failed");
    }
    fn synchronize(&self) {
        synchronize_raw(&self.streams);
    }
}

/// The driver's pool through the runtime, as RMM's resource calls it, with nothing in between.
struct Runtime {
    lib: Arc<RmmLib>,
    pool: *mut c_void,
    streams: Vec<sys::CUstream>,
}

// SAFETY: the runtime's pools and streams may be used from any thread.
unsafe impl Sync for Runtime {}

impl Layer for Runtime {
    fn name(&self) -> &'static str {
        "runtime"
    }
    fn allocate(&self, bytes: usize, s: usize) -> u64 {
        // SAFETY: the pool was made by this library, the stream is live.
        let p = unsafe {
            (self.lib.runtime_allocate)(self.pool, bytes, self.streams[s] as *mut c_void)
        };
        assert!(
            !p.is_null(),
            "cudaMallocFromPoolAsync refused {bytes} bytes"
        );
        p as u64
    }
    unsafe fn free(&self, ptr: u64, s: usize) {
        // SAFETY: the caller's contract.
        let ok =
            unsafe { (self.lib.runtime_free)(ptr as *mut c_void, self.streams[s] as *mut c_void) };
        assert!(ok, "cudaFreeAsync failed");
    }
    fn synchronize(&self) {
        synchronize_raw(&self.streams);
    }
}

/// RMM's two layers from the library at `path` (both on device 0, whose primary context, the
/// runtime's, is current: streams made through the driver serve the runtime's calls too).
fn rmm_layers(device: &Device, path: &str, streams: usize) -> Result<Vec<Box<dyn Layer>>, String> {
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
            streams: raw_streams(streams),
        }),
        Box::new(RmmAsync {
            lib,
            mr,
            streams: raw_streams(streams),
        }),
    ])
}

/// ns per event of one pass of `traces` through `layer`: trace `i` on the layer's stream `i`,
/// each on a thread of its own when there are several (the wall time of all of them over all
/// their events, as RMM's harness counts), `ptrs[i]` holding trace `i`'s live blocks.
fn pass(layer: &dyn Layer, traces: &[Trace], ptrs: &mut [Vec<u64>], device: &Device) -> f64 {
    let run = |s: usize, t: &Trace, ptrs: &mut [u64]| {
        for op in &t.ops {
            if op.size == 0 {
                // SAFETY: the slot holds a live block from this layer.
                unsafe { layer.free(ptrs[op.slot as usize], s) };
            } else {
                ptrs[op.slot as usize] = layer.allocate(op.size as usize, s);
            }
        }
    };
    let events: usize = traces.iter().map(|t| t.ops.len()).sum();
    let start = Instant::now();
    if let [t] = traces {
        run(0, t, &mut ptrs[0]);
    } else {
        std::thread::scope(|scope| {
            for (s, (t, p)) in traces.iter().zip(ptrs.iter_mut()).enumerate() {
                let run = &run;
                scope.spawn(move || {
                    // Every layer's thread starts with the device current (the runtime makes
                    // its context current on its first call anyway).
                    device.bind().expect("context");
                    run(s, t, p)
                });
            }
        });
    }
    let ns = start.elapsed().as_nanos() as f64 / events as f64;
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

/// Every layer's passes over `traces` (one thread each): one warm-up pass each (the pools grow), then `passes` rounds in
/// a rotating order, so that no layer always follows the same one. Returns each layer's ns per
/// event, pass by pass.
fn take_turns(
    layers: &[Box<dyn Layer>],
    traces: &[Trace],
    passes: usize,
    device: &Device,
) -> Vec<Vec<f64>> {
    let mut ptrs: Vec<Vec<u64>> = traces.iter().map(|t| vec![0u64; t.slots]).collect();
    let mut out = vec![Vec::with_capacity(passes); layers.len()];
    for l in layers {
        pass(l.as_ref(), traces, &mut ptrs, device);
    }
    for round in 0..passes {
        for k in 0..layers.len() {
            let i = (k + round) % layers.len();
            out[i].push(pass(layers[i].as_ref(), traces, &mut ptrs, device));
        }
    }
    out
}

/// One table row and one JSON record of `take_turns`' passes: best (median) per layer, the
/// resource's cost over the driver's calls, and RMM's time over ours.
fn summarise(
    label: String,
    layers: &[Box<dyn Layer>],
    mut passes: Vec<Vec<f64>>,
    record: serde_json::Value,
) -> (Vec<String>, serde_json::Value) {
    let index = |name: &str| layers.iter().position(|l| l.name() == name);
    let best: Vec<f64> = passes
        .iter()
        .map(|p| p.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let medians: Vec<f64> = passes.iter_mut().map(|p| median(p)).collect();
    let mut row = vec![label];
    row.extend(
        best.iter()
            .zip(&medians)
            .map(|(b, m)| format!("{b:.0} ({m:.0})")),
    );
    if let (Some(o), Some(d)) = (index("async_resource"), index("driver")) {
        row.push(format!("{:+.0}", best[o] - best[d]));
    }
    if let (Some(o), Some(r)) = (index("async_resource"), index("rmm_cuda_async")) {
        row.push(format!(
            "{:.2}x ({:.2}x)",
            best[r] / best[o],
            medians[r] / medians[o]
        ));
    }
    let mut record = record;
    record["ns_per_op"] = json!(layers
        .iter()
        .zip(best.iter().zip(&medians))
        .map(|(l, (b, m))| json!({"layer": l.name(), "ns": b, "median_ns": m}))
        .collect::<Vec<_>>());
    record["passes"] = json!(layers
        .iter()
        .zip(&passes)
        .map(|(l, p)| json!({"layer": l.name(), "ns": p}))
        .collect::<Vec<_>>());
    (row, record)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps = if args.iter().any(|a| a == "--quick") {
        10_000
    } else {
        100_000
    };
    let grid = args.iter().any(|a| a == "--grid");
    let threads: usize = match flag_value(&args, "--threads") {
        Some(t) => match t.parse() {
            Ok(n) if n >= 1 && !(grid && n > 1) => n,
            _ => {
                eprintln!("async_layers: --threads takes a count of 1 or more (1 with --grid)");
                std::process::exit(2);
            }
        },
        None => 1,
    };
    // Several threads' passes take seconds each (about 2 s at 4 threads).
    let passes = if threads > 1 { THREADED_PASSES } else { PASSES };
    let device = match Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("async_layers needs a GPU: {e}");
            std::process::exit(2);
        }
    };
    let streams = |n: usize| -> Vec<rmm_cuda::Stream> {
        (0..n)
            .map(|_| device.new_stream().expect("stream"))
            .collect()
    };
    let mut layers: Vec<Box<dyn Layer>> = vec![Box::new(Driver::new(&device, threads))];
    if !grid {
        layers.push(Box::new(Pool {
            pool: device
                .create_mem_pool(MemPoolOptions {
                    release_threshold: None,
                    maximum_size: None,
                })
                .expect("pool"),
            streams: streams(threads),
        }));
    }
    layers.push(Box::new(Resource {
        r: Arc::new(
            AsyncResource::new(&device, AsyncResourceOptions::default()).expect("resource"),
        ),
        streams: streams(threads),
    }));
    if let Some(path) = flag_value(&args, "--rmm-lib") {
        match rmm_layers(&device, &path, threads) {
            // The grid's pools each keep up to 16,000 MiB: three fit on an 80 GB GPU, five not.
            Ok(more) => layers.extend(more.into_iter().filter(|l| !grid || l.name() != "runtime")),
            Err(e) => {
                eprintln!("async_layers: --rmm-lib: {e}");
                std::process::exit(2);
            }
        }
    }
    device.bind().expect("context");
    let mut rows = Vec::new();
    let mut results = Vec::new();
    if grid {
        // RMM's own grid, as `random_allocations --grid` and `rmm_ra 0 one grid` replay it.
        for n in [1000, 10_000, 100_000] {
            for max_mib in [1usize, 4, 64, 256, 1024, 4096] {
                let t = grid_trace(n, max_mib * MIB, 16_000 * MIB);
                // The largest cells map GiBs per call (up to 13 s a pass): fewer passes there.
                let passes = if n == 100_000 && max_mib >= 1024 {
                    1
                } else {
                    GRID_PASSES
                };
                let record =
                    json!({"allocations": n, "max_size_mib": max_mib, "events": t.ops.len()});
                let (row, record) = summarise(
                    format!("{n} x {max_mib} MiB"),
                    &layers,
                    take_turns(&layers, std::slice::from_ref(&t), passes, &device),
                    record,
                );
                eprintln!("{}", row.join("  "));
                rows.push(row);
                results.push(record);
            }
        }
    } else {
        for max_size in MAX_SIZES {
            // As random_allocations and rmm_ra: 4 GiB live at most, shared by the threads.
            let traces: Vec<Trace> = (0..threads)
                .map(|t| trace(t, steps, max_size, 4 * GIB / threads))
                .collect();
            let label = if max_size >= MIB {
                format!("{} MiB", max_size / MIB)
            } else {
                format!("{} KiB", max_size / KIB)
            };
            let events: usize = traces.iter().map(|t| t.ops.len()).sum();
            let record = json!({"max_size": max_size, "threads": threads, "events": events});
            let turns = take_turns(&layers, &traces, passes, &device);
            let (row, record) = summarise(label, &layers, turns, record);
            rows.push(row);
            results.push(record);
        }
    }
    if grid {
        println!("RMM's grid, one thread; ns per event, best of {GRID_PASSES} (median), 1 pass at 100,000 x 1,024 and 4,096 MiB");
    } else {
        println!(
            "WORKLOADS.md A traces, {threads} thread(s) of {steps} steps; ns per event (wall, all threads), best of {passes} (median)"
        );
    }
    let mut header: Vec<&str> = vec![if grid { "cell" } else { "max size" }];
    header.extend(layers.iter().map(|l| l.name()));
    header.push("resource - driver");
    if layers.iter().any(|l| l.name() == "rmm_cuda_async") {
        header.push("RMM / ours");
    }
    print_table(&header, &rows);
    if let Some(path) = flag_value(&args, "--json") {
        let doc = json!({"device": describe_device(&device), "steps": steps, "threads": threads, "grid": grid, "passes": if grid { GRID_PASSES } else { passes }, "results": results});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("json");
    }
}
