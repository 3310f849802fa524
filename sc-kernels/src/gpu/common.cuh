// Shared by every kernel module (prepended by the module cache). NVRTC sees no system headers:
// fixed-width names are spelled out here.
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef int i32;
typedef unsigned char u8;

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. `scratch` holds 32 doubles of shared memory.
__device__ __forceinline__ double block_sum_f64(double v, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum_f64(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = (threadIdx.x < nw) ? scratch[threadIdx.x] : 0.0;
    if (warp == 0) v = warp_sum_f64(v);
    return v;
}

__device__ __forceinline__ u64 block_sum_u64(u64 v, u64* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum_u64(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int nw = blockDim.x >> 5;
    v = (threadIdx.x < nw) ? scratch[threadIdx.x] : 0ull;
    if (warp == 0) v = warp_sum_u64(v);
    return v;
}

// Inclusive scan over the block of one value per thread; returns the block total in *total.
__device__ u64 block_inclusive_scan(u64 v, u64* warp_tot, u64* total) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        u64 n = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += n;
    }
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    if (warp == 0) {
        u64 w = (lane < (blockDim.x >> 5)) ? warp_tot[lane] : 0ull;
        for (int o = 1; o < 32; o <<= 1) {
            u64 n = __shfl_up_sync(FULL_MASK, w, o);
            if (lane >= o) w += n;
        }
        warp_tot[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += warp_tot[warp - 1];
    *total = warp_tot[(blockDim.x >> 5) - 1];
    __syncthreads();
    return v;
}
