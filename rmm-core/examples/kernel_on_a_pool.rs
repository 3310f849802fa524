//! A cudarc kernel on buffers from a pool: the pool becomes the device's resource, `DeviceVec`s
//! come from it, and they go straight into a kernel launch compiled by NVRTC.
//!
//! `cargo run --release -p rmm-core --example kernel_on_a_pool` (needs a GPU; says so without).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use rmm_core::{
    get_current_device_resource, set_current_device_resource, CudaResource, DeviceVec, PoolOptions,
    PoolResource, SharedResource, StatisticsAdaptor,
};
use std::sync::Arc;

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !rmm_cuda::gpu_available() {
        println!("no GPU on this machine: nothing to run");
        return Ok(());
    }
    let device = rmm_cuda::Device::cuda(0)?;
    // A 256 MiB pool that may grow to 1 GiB, counted by a statistics adaptor, as the device's
    // resource: every container without an explicit resource allocates from it.
    let pool = PoolResource::new(
        CudaResource::new(&device),
        PoolOptions::sized(256 << 20, Some(1 << 30)),
    )?;
    let stats = Arc::new(StatisticsAdaptor::new(pool));
    set_current_device_resource(stats.clone() as SharedResource)?;
    assert!(Arc::ptr_eq(
        &get_current_device_resource()?,
        &(stats.clone() as SharedResource)
    ));

    let stream = device.new_stream()?;
    let n = 1_000_000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let dx = DeviceVec::from_host(&x, &stream)?;
    let mut dy = DeviceVec::from_host(&vec![1.0f32; n], &stream)?;

    let ctx = device.cuda_context().expect("a CUDA device");
    let module = ctx.load_module(cudarc::nvrtc::compile_ptx(SAXPY)?)?;
    let saxpy = module.load_function("saxpy")?;
    let cuda_stream = stream.cuda().expect("a CUDA stream");
    let (a, n64) = (2.0f32, n as u64);
    let mut launch = cuda_stream.launch_builder(&saxpy);
    launch.arg(&a).arg(&dx).arg(&mut dy).arg(&n64);
    // SAFETY: the kernel reads n floats of x and writes n floats of y, both n long.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32))? };

    let y = dy.to_host()?;
    assert!(y
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 2.0 * i as f32 + 1.0));
    let s = stats.statistics();
    println!(
        "saxpy on {n} floats: correct; the pool served {} allocations, peak {} bytes",
        s.allocations.total, s.bytes.peak
    );
    Ok(())
}
