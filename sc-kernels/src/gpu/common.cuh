// Shared by every kernel module (prepended by the module cache). NVRTC sees no system headers:
// fixed-width names are spelled out here.
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef int i32;
typedef unsigned char u8;

#define FULL_MASK 0xffffffffu

// The Euclidean distance of two rows of d floats in f64, dimensions in order, as the CPU's
// row_distance (the kNN's exact distances).
__device__ __forceinline__ double exact_distance(const float* xi, const float* __restrict__ xj,
                                                 u32 d) {
    double s = 0.0;
    for (u32 u = 0; u < d; ++u) {
        double diff = (double)xi[u] - (double)xj[u];
        s = __dadd_rn(s, __dmul_rn(diff, diff));
    }
    return sqrt(s);
}

// (v, j) ranks before (w, l): nearer, or as near with the smaller index.
__device__ __forceinline__ bool nearer_first(double v, u32 j, double w, u32 l) {
    return v < w || (v == w && j < l);
}

// Lane 0 gets the lanes' v added pairwise, lane l += lane l + o for o = 16, 8, 4, 2, 1: the order
// eigsh's block_sum follows (diffmap's sums are the host's bits through it).
__device__ __forceinline__ double warp_sum_f64(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}

// Each row r < n of a CSR matrix: done(r, s) on one lane, s the row's data[p] x[indices[p]]
// summed in storage order from -0 (Rust's f64 sum), every product and sum rounded once. Four
// rows a warp, eight lanes a row: a row's lanes form 8 products at a time (reads coalesced,
// eight gathers in flight), then each adds them in order through shuffles, so the sum is the
// host's row-order sum. The warp steps to the longest of its four rows; a grid-stride loop over
// the warps (8 threads a row fill the grid); blockDim.x a multiple of 32.
template <typename T, typename Done>
__device__ __forceinline__ void csr_row_sums(const u64* indptr, const u32* indices, const T* data,
                                             const double* x, u64 n, Done done) {
    const u32 lane = threadIdx.x & 31, sub = lane & 7, first_lane = lane & ~7u;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 r0 = (((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 4; r0 < n;
         r0 += warps * 4) {
        const u64 r = r0 + (lane >> 3);
        const u64 p0 = r < n ? indptr[r] : 0;
        const u32 len = r < n ? (u32)(indptr[r + 1] - p0) : 0;
        const u32 longest = __reduce_max_sync(0xffffffffu, len);
        double s = -0.0;
        for (u32 b = 0; b < longest; b += 8) {
            const u64 p = p0 + b + sub;
            const double prod = b + sub < len ? __dmul_rn((double)data[p], x[indices[p]]) : 0.0;
            const u32 count = len > b ? min(8u, len - b) : 0u;
#pragma unroll
            for (u32 i = 0; i < 8; ++i) {
                const double v = __shfl_sync(0xffffffffu, prod, first_lane + i);
                if (i < count) s = __dadd_rn(s, v);
            }
        }
        if (sub == 0 && r < n) done(r, s);
    }
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

// random.rs `mix64` (SplitMix64's finalizer) and `hash3`: counter-based random numbers, the same
// on the host and the device.
__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ u64 hash3(u64 seed, u64 stream, u64 i) {
    return mix64(mix64(seed ^ mix64(stream + 0x9e3779b97f4a7c15ull)) + i);
}

// fastmath.rs `ln_reduce`: y = 2^e m as (e, s = (m - 1) / (m + 1)), operation for operation and
// unfused (the `_rn` intrinsics), so the results have the CPU's bits.
__device__ __forceinline__ void ln_reduce(double y, double* e_out, double* s_out) {
    u64 bits = (u64)__double_as_longlong(y);
    double e = __dsub_rn(__longlong_as_double((long long)(0x4330000000000000ull | ((bits >> 52) & 0x7ff))),
                         4503599627370496.0 + 1023.0);
    double m = __longlong_as_double((long long)((bits & ((1ull << 52) - 1)) | (1023ull << 52)));
    bool big = m > 1.4142135623730951;
    m = big ? __dmul_rn(m, 0.5) : m;
    *e_out = __dadd_rn(e, big ? 1.0 : 0.0);
    *s_out = __ddiv_rn(__dsub_rn(m, 1.0), __dadd_rn(m, 1.0));
}

// fastmath.rs `ln_pos`, likewise.
__device__ __forceinline__ double ln_pos(double y) {
    double e, s;
    ln_reduce(y, &e, &s);
    double s2 = __dmul_rn(s, s);
    double p = __dadd_rn(1.0 / 15.0, __dmul_rn(s2, 1.0 / 17.0));
    p = __dadd_rn(1.0 / 13.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 11.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 9.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 7.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 5.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 3.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0, __dmul_rn(s2, p));
    return __dadd_rn(__dmul_rn(e, 0.6931471805599453), __dmul_rn(__dmul_rn(2.0, s), p));
}
