//! Containers on the real GPU: round trips, resize, copies across streams, drops on other
//! threads, and buffers handed straight to an NVRTC kernel and to a cuBLAS gemm.

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use integration_tests::gpu_or_skip;
use rmm_core::*;
use std::sync::Arc;

#[test]
fn round_trip_resize_and_cross_stream_copy() {
    let Some(d) = gpu_or_skip("gpu containers") else {
        return;
    };
    let r: SharedResource = Arc::new(CudaResource::new(&d));
    let s1 = d.new_stream().unwrap();
    let s2 = d.new_stream().unwrap();
    let data: Vec<u32> = (0..1_000_000).map(|i| i * 3 + 1).collect();
    let mut v = DeviceVec::from_host_with_resource(&data, &s1, r).unwrap();
    assert_eq!(v.to_host().unwrap(), data);
    v.resize(2_000_000).unwrap();
    assert_eq!(&v.to_host().unwrap()[..1_000_000], &data[..]);
    v.resize(10).unwrap();
    v.shrink_to_fit().unwrap();
    assert_eq!(v.to_host().unwrap(), data[..10].to_vec());
    let copy = v.try_clone_on(&s2).unwrap();
    assert_eq!(copy.to_host().unwrap(), data[..10].to_vec());
    std::thread::spawn(move || drop(copy)).join().unwrap();
    let mut sc = DeviceScalar::new(5i64, &s1).unwrap();
    sc.set_value(-9).unwrap();
    assert_eq!(sc.value().unwrap(), -9);
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#;

#[test]
fn nvrtc_kernel_runs_on_resource_buffers() {
    let Some(d) = gpu_or_skip("nvrtc kernel on DeviceVec") else {
        return;
    };
    assert!(
        unsafe { cudarc::nvrtc::sys::is_culib_present() },
        "libnvrtc not found on this GPU machine"
    );
    let ctx = d.cuda_context().unwrap().clone();
    let stream = d.new_stream().unwrap();
    let n = 100_000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let r: SharedResource =
        Arc::new(AsyncResource::new(&d, AsyncResourceOptions::default()).unwrap());
    let dx = DeviceVec::from_host_with_resource(&x, &stream, r.clone()).unwrap();
    let mut dy = DeviceVec::from_host_with_resource(&y0, &stream, r).unwrap();
    let ptx = cudarc::nvrtc::compile_ptx(SAXPY).expect("NVRTC compiles saxpy");
    let module = ctx.load_module(ptx).unwrap();
    let f = module.load_function("saxpy").unwrap();
    let a = 2.0f32;
    let n64 = n as u64;
    let cs = stream.cuda().unwrap();
    let mut launch = cs.launch_builder(&f);
    launch.arg(&a).arg(&dx).arg(&mut dy).arg(&n64);
    unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }.unwrap();
    let y = dy.to_host().unwrap();
    for i in 0..n {
        assert_eq!(y[i], 2.0 * x[i] + y0[i], "element {i}");
    }
}

#[test]
fn cublas_gemm_runs_on_resource_buffers() {
    let Some(d) = gpu_or_skip("cuBLAS gemm on DeviceVec") else {
        return;
    };
    assert!(
        unsafe { cudarc::cublas::sys::is_culib_present() },
        "libcublas not found on this GPU machine"
    );
    let stream = d.new_stream().unwrap();
    let (m, k, n) = (64usize, 48usize, 32usize);
    // Column-major A (m x k), B (k x n).
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 13) % 17) as f32 - 8.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let da = DeviceVec::from_host(&a, &stream).unwrap();
    let db = DeviceVec::from_host(&b, &stream).unwrap();
    // A different stream for the library: the buffers order it after their own stream.
    let lib_stream = d.new_stream().unwrap();
    let mut dc = DeviceVec::<f32>::zeros(m * n, &lib_stream).unwrap();
    let blas = CudaBlas::new(lib_stream.cuda().unwrap().clone()).unwrap();
    let cfg = GemmConfig {
        transa: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        transb: cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        alpha: 1.0,
        lda: m as i32,
        ldb: k as i32,
        beta: 0.0,
        ldc: m as i32,
    };
    unsafe { blas.gemm(cfg, &da, &db, &mut dc) }.unwrap();
    let c = dc.to_host().unwrap();
    for j in 0..n {
        for i in 0..m {
            let expect: f32 = (0..k).map(|p| a[i + p * m] * b[p + j * k]).sum();
            assert_eq!(c[i + j * m], expect, "C[{i},{j}]");
        }
    }
}
