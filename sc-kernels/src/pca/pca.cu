// The device passes of the covariance-route PCA of a dense row-major n x g matrix X.

// Column sums in f64: one thread per column, the rows split across blockIdx.y in slices of
// `rows_per_slice`, the slices combined with atomics. sums: g values, zeroed by the caller.
extern "C" __global__ void dense_col_sums(const float* x, u64 n, u64 g, u64 rows_per_slice,
                                          double* sums) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= g) return;
    u64 r0 = (u64)blockIdx.y * rows_per_slice;
    u64 r1 = r0 + rows_per_slice < n ? r0 + rows_per_slice : n;
    double s = 0.0;
    for (u64 r = r0; r < r1; ++r) s += (double)x[r * g + j];
    atomicAdd(&sums[j], s);
}

// acc += part on the lower triangle (row >= col) of two column-major g x g matrices: the f64
// total of the f32 Gram matrices of blocks of rows (cuBLAS ssyrk writes only that triangle).
extern "C" __global__ void add_lower(const float* part, u64 g, double* acc) {
    u64 total = g * g;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        u64 col = idx / g;
        u64 row = idx - col * g;
        if (row >= col) acc[idx] += (double)part[idx];
    }
}

// The covariance from the f64 Gram matrix in place, on its lower triangle (column-major g x g):
// (G_ij - n mean_i mean_j) / (n - 1) when centring, the CPU's operations in its order (no fused
// multiply-add). sq: the Gram diagonal (sums of squares); diag: the covariance's diagonal.
extern "C" __global__ void covariance_lower(double* a, u64 g, double nf, const double* mean,
                                            int center, double* sq, double* diag) {
    u64 total = g * g;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        u64 col = idx / g;
        u64 row = idx - col * g;
        if (row < col) continue;
        double v = a[idx];
        if (row == col) sq[col] = v;
        if (center) {
            double m = __dmul_rn(__dmul_rn(nf, mean[row]), mean[col]);
            v = __ddiv_rn(__dsub_rn(v, m), __dsub_rn(nf, 1.0));
            a[idx] = v;
        }
        if (row == col) diag[col] = v;
    }
}

// scores (n x k, row-major) -= mv[c] in each column c, the difference taken in f64.
extern "C" __global__ void subtract_cols(float* scores, u64 n, u64 k, const double* mv) {
    u64 total = n * k;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        scores[idx] = (float)((double)scores[idx] - mv[idx % k]);
    }
}

// Data for the warm-up's PCA rehearsal, made on the device (no host array, no upload): x[i]
// uniform in [0, 1) from hash3 (common.cuh).
extern "C" __global__ void fill_uniform(float* x, u64 len, u64 seed) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride)
        x[i] = (float)(hash3(seed, 0, i) >> 40) * (1.0f / 16777216.0f);
}
