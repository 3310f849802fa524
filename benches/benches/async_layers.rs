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
//! ```text
//! cargo bench -p benches --bench async_layers -- [--quick] [--json PATH]
//! ```
//!
//! Figure: wall time of the allocate/deallocate loop / events, best of 5 passes after a warm-up,
//! the layers taking turns within each pass so drift hits them alike.

use benches::{describe_device, flag_value, print_table, trace, Trace};
use rmm_core::{AsyncResource, AsyncResourceOptions, MemoryResource, SharedResource};
use rmm_cuda::cudarc::driver::sys;
use rmm_cuda::{Device, MemPoolOptions};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;
const MAX_SIZES: [usize; 4] = [KIB, 64 * KIB, MIB, 4 * MIB];
const PASSES: usize = 5;

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

impl Driver {
    fn new(device: &Device) -> Driver {
        device.bind().expect("context");
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0; // Device::cuda(0)
        let (mut pool, mut stream) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut threshold: u64 = u64::MAX;
        // SAFETY: props is initialised; the out pointers are valid; the context is current.
        unsafe {
            check(sys::cuMemPoolCreate(&mut pool, &props), "cuMemPoolCreate");
            check(
                sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    &mut threshold as *mut u64 as *mut std::ffi::c_void,
                ),
                "cuMemPoolSetAttribute",
            );
            check(
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                ),
                "cuStreamCreate",
            );
        }
        Driver { pool, stream }
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
    let layers: Vec<Box<dyn Layer>> = vec![
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
    device.bind().expect("context");
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for max_size in MAX_SIZES {
        let t = trace(0, steps, max_size, 4 * GIB);
        let mut ptrs = vec![0u64; t.slots];
        let mut best = vec![f64::INFINITY; layers.len()];
        for l in &layers {
            pass(l.as_ref(), &t, &mut ptrs); // warm-up: the pool grows
        }
        for _ in 0..PASSES {
            for (b, l) in best.iter_mut().zip(&layers) {
                *b = b.min(pass(l.as_ref(), &t, &mut ptrs));
            }
        }
        let label = if max_size >= MIB {
            format!("{} MiB", max_size / MIB)
        } else {
            format!("{} KiB", max_size / KIB)
        };
        let mut row = vec![label];
        row.extend(best.iter().map(|ns| format!("{ns:.0}")));
        row.push(format!("{:+.0}", best[2] - best[0]));
        rows.push(row);
        results.push(json!({"max_size": max_size, "events": t.ops.len(),
            "ns_per_op": layers.iter().zip(&best).map(|(l, b)| json!({"layer": l.name(), "ns": b})).collect::<Vec<_>>()}));
    }
    println!("BENCHMARKS A traces, one thread, {steps} steps; ns per event, best of {PASSES}");
    print_table(
        &[
            "max size",
            "driver",
            "mem_pool",
            "async_resource",
            "resource - driver",
        ],
        &rows,
    );
    if let Some(path) = flag_value(&args, "--json") {
        let doc = json!({"device": describe_device(&device), "steps": steps, "results": results});
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("json");
    }
}
