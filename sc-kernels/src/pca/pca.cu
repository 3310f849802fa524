// The device passes of the covariance-route PCA of a dense row-major n x g matrix X.

// Column sums in f64: one thread per column, the rows split across blockIdx.y in slices of
// `rows_per_slice`, each slice's sums to partial[slice * g + j]; `sum_slices` then adds the
// slices in order, so the sums are the same bits on every run (atomics would add them in
// whatever order the blocks finish).
extern "C" __global__ void dense_col_sums(const float* x, u64 n, u64 g, u64 rows_per_slice,
                                          double* partial) {
    u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= g) return;
    u64 r0 = (u64)blockIdx.y * rows_per_slice;
    u64 r1 = r0 + rows_per_slice < n ? r0 + rows_per_slice : n;
    double s = 0.0;
    for (u64 r = r0; r < r1; ++r) s += (double)x[r * g + j];
    partial[(u64)blockIdx.y * g + j] = s;
}

// sums[j] = the `slices` partial sums of column j, added in slice order.
extern "C" __global__ void sum_slices(const double* partial, u64 slices, u64 g, double* sums) {
    for (u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x; j < g;
         j += (u64)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (u64 y = 0; y < slices; ++y) s += partial[y * g + j];
        sums[j] = s;
    }
}

// A block of b rows x g genes (row-major, from x[offset]) split for the Gram matrix on TF32
// tensor cores: h = x rounded to TF32 (to nearest), l = x - h (exact in f32) rounded to TF32,
// written as the four chunks [l | h | h | l], each the column-major p x b matrix (genes padded
// to p with zeros). The product of chunks 0-2 with chunks 1-3 then sums l h' + h h' + h l',
// x x' up to the dropped l l' (about 2^-22 of it): f32's accuracy from three TF32 products
// (the "3xTF32" split), where one TF32 product would round every value, and a gene's many
// equal values (its zero counts) the same way, to 11 significant bits.
__device__ __forceinline__ float round_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
extern "C" __global__ void split_tf32(const float* x, u64 offset, u64 b, u64 g, u64 p,
                                      float* chunks) {
    const u64 len = b * p;
    for (u64 r = blockIdx.x; r < b; r += gridDim.x) {
        for (u64 j = threadIdx.x; j < p; j += blockDim.x) {
            float v = j < g ? x[offset + r * g + j] : 0.0f;
            float h = round_tf32(v);
            float l = round_tf32(v - h);
            u64 i = r * p + j;
            chunks[i] = l;
            chunks[len + i] = h;
            chunks[2 * len + i] = h;
            chunks[3 * len + i] = l;
        }
    }
}

// The block split for FP16 tensor cores, for values whose magnitude the host knows a bound of:
// y = x scale (a power of two that takes the bound near 2^14: FP16's largest value is 65,504,
// and small values stay clear of its subnormals), h = y rounded to FP16 (to nearest),
// l = (y - h) 2^11 rounded to FP16 (y - h is exact in f32; the factor keeps l's 11 bits clear of
// the subnormals too), as three chunks [l | h | l] of column-major p x b halves. Chunk 1 with
// itself gives h h', chunks 0-1 with chunks 1-2 give (l h' + h l') 2^11: with alpha scale^-2
// and scale^-2 2^-11 they sum to x x' up to about 2^-22 of it, as split_tf32's three TF32
// products do, at twice TF32's rate.
__device__ __forceinline__ unsigned short to_f16(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float from_f16(unsigned short h) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
extern "C" __global__ void split_f16(const float* x, u64 offset, u64 b, u64 g, u64 p,
                                     float scale, unsigned short* chunks) {
    const u64 len = b * p;
    for (u64 r = blockIdx.x; r < b; r += gridDim.x) {
        for (u64 j = threadIdx.x; j < p; j += blockDim.x) {
            float v = j < g ? __fmul_rn(x[offset + r * g + j], scale) : 0.0f;
            unsigned short h = to_f16(v);
            unsigned short l = to_f16(__fmul_rn(__fsub_rn(v, from_f16(h)), 2048.0f));
            u64 i = r * p + j;
            chunks[i] = l;
            chunks[len + i] = h;
            chunks[2 * len + i] = l;
        }
    }
}

// acc += part on the lower triangle (row >= col) of the column-major g x g `acc` from the
// column-major p x p `part` (p >= g: the padded product): the f64 total of the f32 Gram
// matrices of blocks of rows (the products fill that triangle).
extern "C" __global__ void add_lower(const float* part, u64 p, u64 g, double* acc) {
    for (u64 col = blockIdx.x; col < g; col += gridDim.x)
        for (u64 row = col + threadIdx.x; row < g; row += blockDim.x)
            acc[col * g + row] += (double)part[col * p + row];
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

// The scores X V - mv (n x k, row-major): X row-major n x g, V row-major g x k, the products
// summed in f32 in the order of the genes, then mv[c] (f64: mean . V) subtracted in f64. A
// block of PR_THREADS threads makes PR_ROWS rows x PR_COLS columns, through shared memory
// PR_STEP genes at a time; each thread 8 rows x 4 columns (columns tx, tx + 16, ...: conflict-
// free reads). cuBLAS's sgemm did this, but its kernels load lazily in a fresh process (about
// 30 ms on an H200, more than the product takes).
#define PR_THREADS 256
#define PR_ROWS 128
#define PR_COLS 64
#define PR_STEP 32
extern "C" __global__ void __launch_bounds__(PR_THREADS)
    project_rows(const float* x, u64 n, u64 g, const float* v, u64 k, const double* mv,
                 float* scores) {
    __shared__ float xs[PR_STEP][PR_ROWS + 1];
    __shared__ float vs[PR_STEP][PR_COLS];
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    const u64 row0 = (u64)blockIdx.x * PR_ROWS, col0 = (u64)blockIdx.y * PR_COLS;
    float acc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][c] = 0.0f;
    for (u64 j0 = 0; j0 < g; j0 += PR_STEP) {
        for (int i = t; i < PR_ROWS * PR_STEP; i += PR_THREADS) {
            int r = i / PR_STEP, c = i % PR_STEP;
            u64 row = row0 + r, j = j0 + c;
            xs[c][r] = row < n && j < g ? x[row * g + j] : 0.0f;
        }
        for (int i = t; i < PR_STEP * PR_COLS; i += PR_THREADS) {
            int r = i / PR_COLS, c = i % PR_COLS;
            u64 j = j0 + r, col = col0 + c;
            vs[r][c] = j < g && col < k ? v[j * k + col] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int s = 0; s < PR_STEP; ++s) {
            float a[8], b[4];
#pragma unroll
            for (int i = 0; i < 8; ++i) a[i] = xs[s][ty * 8 + i];
#pragma unroll
            for (int c = 0; c < 4; ++c) b[c] = vs[s][tx + 16 * c];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[i][c] = __fmaf_rn(a[i], b[c], acc[i][c]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        u64 row = row0 + ty * 8 + i;
        if (row >= n) break;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u64 col = col0 + tx + 16 * c;
            if (col < k) scores[row * k + col] = (float)((double)acc[i][c] - mv[col]);
        }
    }
}

// Data for the warm-up's PCA rehearsal, made on the device (no host array, no upload): x[i]
// uniform in [0, 1) from hash3 (common.cuh).
template <typename T>
__device__ void fill_uniform_values(T* x, u64 len, u64 seed) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride)
        x[i] = (T)(hash3(seed, 0, i) >> 40) * (T)(1.0 / 16777216.0);
}
extern "C" __global__ void fill_uniform(float* x, u64 len, u64 seed) {
    fill_uniform_values(x, len, seed);
}
extern "C" __global__ void fill_uniform_f64(double* x, u64 len, u64 seed) {
    fill_uniform_values(x, len, seed);
}
