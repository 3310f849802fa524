//! cuBLAS on our buffers: `DeviceVec`s from a binning resource are the operands of cudarc's
//! cuBLAS `sgemm`, on the buffers' own stream, checked against the product on the host.
//!
//! `cargo run --release -p rmm-core --example cublas_on_our_buffers` (needs a GPU; says so
//! without).

use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm, GemmConfig};
use rmm_core::{BinningResource, CudaResource, DeviceVec, SharedResource};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if !rmm_cuda::gpu_available() {
        println!("no GPU on this machine: nothing to run");
        return Ok(());
    }
    let device = rmm_cuda::Device::cuda(0)?;
    let stream = device.new_stream()?;
    // Fixed-size bins of 1 KiB to 64 KiB (the operands below), larger requests to the device.
    let resource: SharedResource = Arc::new(BinningResource::with_range(
        CudaResource::new(&device),
        10,
        16,
    )?);
    // C (m x n) = A (m x k) B (k x n), column-major as cuBLAS reads them.
    let (m, k, n) = (64usize, 48usize, 32usize);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let da = DeviceVec::from_host_with_resource(&a, &stream, resource.clone())?;
    let db = DeviceVec::from_host_with_resource(&b, &stream, resource.clone())?;
    let mut dc = DeviceVec::<f32>::zeros_with_resource(m * n, &stream, resource.clone())?;

    let blas = CudaBlas::new(stream.cuda().expect("a CUDA stream").clone())?;
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: 1.0f32,
        lda: m as i32,
        ldb: k as i32,
        beta: 0.0f32,
        ldc: m as i32,
    };
    // SAFETY: the operands hold m*k, k*n and m*n floats with the leading dimensions above.
    unsafe { blas.gemm(cfg, &da, &db, &mut dc)? };

    let c = dc.to_host()?;
    let mut worst = 0f32;
    for j in 0..n {
        for i in 0..m {
            let want: f32 = (0..k).map(|p| a[p * m + i] * b[j * k + p]).sum();
            worst = worst.max((c[j * m + i] - want).abs());
        }
    }
    assert!(worst < 1e-3, "sgemm differs by {worst}");
    println!("sgemm {m}x{k} by {k}x{n} on binning-resource buffers: max difference {worst}");
    Ok(())
}
