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

// The transform col_moments applies: 0 = x, 1 = expm1(x) in f32, 2 = expm1(x * ln_base) in f64;
// a gets the value, b its square (formed in f32 for the first two, as the CPU does).
__device__ __forceinline__ void moment_terms(float v, int transform, double ln_base, double& a,
                                             double& b) {
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
}

// One value into column c of col_moments_tiled's shared tile.
__device__ __forceinline__ void add_to_tile(float v, u32 c, int transform, double ln_base,
                                            double* s_sum, double* s_sq, unsigned* s_pos) {
    double a, b;
    moment_terms(v, transform, ln_base, a, b);
    atomicAdd(&s_sum[c], a);
    atomicAdd(&s_sq[c], b);
    if (v > 0.0f) atomicAdd(&s_pos[c], 1u);
}

// col_moments without batches, for matrices with many stored values per column: each block
// takes an even share of the stored values (rows do not matter: a value's column is its index)
// and, for each tile of `tile` columns, adds its share's values into shared memory, then the
// tile into the global sums with one atomic per column it touched. col_moments' three global
// atomics per value bound it (1 M cells, 2 billion values, on an H200: HVG 61 ms, filter_genes
// 59 ms; with this kernel 21 and 19 ms).
// Shared memory: tile doubles of sums, tile of squares, tile u32 counts.
extern "C" __global__ void col_moments_tiled(const u64* indptr, const u32* indices,
                                             const float* data, u64 n_rows, u64 n_cols,
                                             int transform, double ln_base, u64 tile,
                                             double* sums, double* sq, u64* positive) {
    extern __shared__ double shared_moments[];
    double* s_sum = shared_moments;
    double* s_sq = shared_moments + tile;
    unsigned* s_pos = (unsigned*)(shared_moments + 2 * tile);
    u64 first = indptr[0], last = indptr[n_rows];
    u64 share = (last - first + gridDim.x - 1) / gridDim.x;
    u64 begin = min(last, first + (u64)blockIdx.x * share);
    u64 end = min(last, begin + share);
    for (u64 t0 = 0; t0 < n_cols; t0 += tile) {
        u32 width = (u32)min(tile, n_cols - t0);
        for (u32 c = threadIdx.x; c < width; c += blockDim.x) {
            s_sum[c] = 0.0;
            s_sq[c] = 0.0;
            s_pos[c] = 0u;
        }
        __syncthreads();
        // Four indices in flight per thread before their values are read.
        const u64 step = (u64)blockDim.x;
        u64 p = begin + threadIdx.x;
        for (; p + 3 * step < end; p += 4 * step) {
            u32 c[4];
#pragma unroll
            for (int k = 0; k < 4; k++) c[k] = indices[p + k * step] - (u32)t0;
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (c[k] < width)  // below t0 wraps past width
                    add_to_tile(data[p + k * step], c[k], transform, ln_base, s_sum, s_sq, s_pos);
        }
        for (; p < end; p += step) {
            u32 c = indices[p] - (u32)t0;
            if (c < width) add_to_tile(data[p], c, transform, ln_base, s_sum, s_sq, s_pos);
        }
        __syncthreads();
        for (u32 c = threadIdx.x; c < width; c += blockDim.x) {
            if (s_pos[c] != 0u || s_sum[c] != 0.0 || s_sq[c] != 0.0) {
                atomicAdd(&sums[t0 + c], s_sum[c]);
                atomicAdd(&sq[t0 + c], s_sq[c]);
                if (s_pos[c] != 0u) atomicAdd(&positive[t0 + c], (u64)s_pos[c]);
            }
        }
        __syncthreads();
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
            moment_terms(v, transform, ln_base, a, b);
            atomicAdd(&sums[j], a);
            atomicAdd(&sq[j], b);
            if (v > 0.0f) atomicAdd(&positive[j], 1ull);
        }
    }
}
