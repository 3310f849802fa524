// Per-row and per-column statistics of a CSR matrix, accumulated as the CPU reference does:
// in f64, each square formed in f32 first (scanpy's convention).

// One warp per row: sums and counts of the values above zero.
extern "C" __global__ void row_stats(const u64* indptr, const float* data, u64 n_rows,
                                     double* sums, i64* positive) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        double s = 0.0;
        u64 c = 0;
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            float v = data[p];
            s += (double)v;
            c += (v > 0.0f);
        }
        s = warp_sum_f64(s);
        c = warp_sum_u64(c);
        if (lane == 0) {
            sums[row] = s;
            positive[row] = (i64)c;
        }
    }
}

// Moments of each column, optionally per batch of rows (codes[row] < n_batches) and of a
// transform of the values: 0 = x, 1 = expm1(x) in f32, 2 = expm1(x * ln_base) in f64.
// sums, sq, positive: n_batches x n_cols, zeroed by the caller.
extern "C" __global__ void col_moments(const u64* indptr, const u32* indices, const float* data,
                                       u64 n_rows, u64 n_cols, const u32* codes, int transform,
                                       double ln_base, double* sums, double* sq, u64* positive) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        u64 off = codes ? (u64)codes[row] * n_cols : 0;
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            float v = data[p];
            u64 j = off + indices[p];
            double a, b;
            if (transform == 1) {
                float e = expm1f(v);
                a = (double)e;
                b = (double)(e * e);
            } else if (transform == 2) {
                double e = expm1((double)v * ln_base);
                a = e;
                b = e * e;
            } else {
                a = (double)v;
                b = (double)(v * v);
            }
            atomicAdd(&sums[j], a);
            atomicAdd(&sq[j], b);
            if (v > 0.0f) atomicAdd(&positive[j], 1ull);
        }
    }
}
