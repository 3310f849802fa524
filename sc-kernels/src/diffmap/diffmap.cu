// The Lanczos basis of diffmap's eigensolver on the device (eigsh.rs' Basis), with the host's
// bits: each sum in the host's order (a row's products in storage order; a dot product per block
// of chunk_rows rows, the rows one after another from -0, the blocks' sums added in order by
// dense_reduce's add_chunks) and every operation rounded as the host rounds it (never fused).
// The basis is column-major: column j is columns[j * n .. (j + 1) * n].

// w = T x, x the basis' column j; four rows a warp, eight lanes a row (a transition matrix
// row holds a few tens of values): a row's lanes form 8 products at a time (reads coalesced),
// then each adds them in storage order from -0 (Rust's f64 sum) through shuffles, so the sum is
// the host's. The warp steps to the longest of its four rows. blockDim.x a multiple of 32.
extern "C" __global__ void diffmap_apply(const u64* indptr, const u32* indices, const double* data,
                                         u64 n, const double* columns, u64 j, double* w) {
    const double* x = columns + j * n;
    const u32 lane = threadIdx.x & 31, sub = lane & 7, first_lane = lane & ~7u;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 r0 = (((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 4; r0 < n; r0 += warps * 4) {
        const u64 r = r0 + (lane >> 3);
        const u64 p0 = r < n ? indptr[r] : 0;
        const u32 len = r < n ? (u32)(indptr[r + 1] - p0) : 0;
        const u32 longest = __reduce_max_sync(0xffffffffu, len);
        double s = -0.0;
        for (u32 b = 0; b < longest; b += 8) {
            const double prod = b + sub < len ? __dmul_rn(data[p0 + b + sub], x[indices[p0 + b + sub]]) : 0.0;
            const u32 count = len > b ? min(8u, len - b) : 0u;
#pragma unroll
            for (u32 i = 0; i < 8; ++i) {
                const double v = __shfl_sync(0xffffffffu, prod, first_lane + i);
                if (i < count) s = __dadd_rn(s, v);
            }
        }
        if (sub == 0 && r < n) w[r] = s;
    }
}

#define TILE_ROWS 128
#define TILE_COLS 32

// One block (TILE_ROWS threads) per chunk of chunk_rows rows (blockIdx.y: the (first_chunk +
// blockIdx.y)-th) and group of TILE_COLS columns (blockIdx.x), with each row's
//   x = w_in[r] - h[0] columns[0][r] - ... - h[sub_cols - 1] columns[sub_cols - 1][r]
// (subtracted in order, rounded, never fused; x = w_in[r] when h is null), which the first group's
// block writes to w_out[r] when w_out is not null (w_out apart from w_in: the other groups still
// read w_in). Then, for the dot_cols first columns, the dot products with x: partial[blockIdx.y *
// dot_cols + c] = 0 + (the sum from -0 over the chunk's rows in order of columns[c][r] * x); with
// self_dot (dot_cols 1), of x * x. A tile's products are formed a row a thread (reads
// coalesced) into shared memory, then each column's thread adds them in row order.
extern "C" __global__ void diffmap_project_dots(const double* columns, u64 n, const double* h,
                                                u64 sub_cols, const double* w_in, double* w_out,
                                                u64 dot_cols, int self_dot, u64 chunk_rows,
                                                u64 first_chunk, double* partial) {
    __shared__ double prod[TILE_COLS][TILE_ROWS + 1];
    const u64 r0 = (first_chunk + blockIdx.y) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n);
    const u64 c0 = (u64)blockIdx.x * TILE_COLS;
    const u64 group = dot_cols > c0 ? min((u64)TILE_COLS, dot_cols - c0) : 0;
    double s = -0.0;
    for (u64 t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        const u64 r = t0 + threadIdx.x;
        if (r < r1) {
            double x = w_in[r];
            if (h) {
#pragma unroll 8
                for (u64 c = 0; c < sub_cols; ++c) x = __dsub_rn(x, __dmul_rn(h[c], columns[c * n + r]));
            }
            if (w_out && blockIdx.x == 0) w_out[r] = x;
            if (self_dot) {
                prod[0][threadIdx.x] = __dmul_rn(x, x);
            } else {
                for (u64 c = 0; c < group; ++c) prod[c][threadIdx.x] = __dmul_rn(columns[(c0 + c) * n + r], x);
            }
        }
        __syncthreads();
        if (threadIdx.x < group) {
            const u32 rows = (u32)min((u64)TILE_ROWS, r1 - t0);
            for (u32 i = 0; i < rows; ++i) s = __dadd_rn(s, prod[threadIdx.x][i]);
        }
        __syncthreads();
    }
    if (threadIdx.x < group) partial[(u64)blockIdx.y * dot_cols + c0 + threadIdx.x] = __dadd_rn(0.0, s);
}

// columns[j] = w / d.
extern "C" __global__ void diffmap_store(const double* w, u64 n, double d, double* columns, u64 j) {
    double* col = columns + j * n;
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (u64)gridDim.x * blockDim.x)
        col[r] = __ddiv_rn(w[r], d);
}

#define COMBINE_OUTS 8

// out[c * n + r] = sum_j coefs[c * m + j] * columns[j * n + r] (j < m, from 0 in order), for
// c < count: a thread a row and COMBINE_OUTS outputs, so each basis value read serves them all.
extern "C" __global__ void diffmap_combine(const double* columns, u64 n, u64 m, const double* coefs,
                                           u64 count, double* out) {
    const u64 groups = (count + COMBINE_OUTS - 1) / COMBINE_OUTS;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < groups * n; i += (u64)gridDim.x * blockDim.x) {
        const u64 g = i / n, r = i % n, c0 = g * COMBINE_OUTS;
        const u64 outs = min((u64)COMBINE_OUTS, count - c0);
        double x[COMBINE_OUTS];
#pragma unroll
        for (u32 q = 0; q < COMBINE_OUTS; ++q) x[q] = 0.0;
        for (u64 j = 0; j < m; ++j) {
            const double v = columns[j * n + r];
#pragma unroll
            for (u32 q = 0; q < COMBINE_OUTS; ++q)
                if (q < outs) x[q] = __dadd_rn(x[q], __dmul_rn(coefs[(c0 + q) * m + j], v));
        }
#pragma unroll
        for (u32 q = 0; q < COMBINE_OUTS; ++q)
            if (q < outs) out[(c0 + q) * n + r] = x[q];
    }
}

// dst[dst_at + i] = src[src_at + i] for i < len (the two ranges apart); value instead of src
// when src is null.
extern "C" __global__ void diffmap_copy(const double* src, u64 src_at, double* dst, u64 dst_at,
                                        u64 len) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (u64)gridDim.x * blockDim.x)
        dst[dst_at + i] = src ? src[src_at + i] : 0.0;
}
