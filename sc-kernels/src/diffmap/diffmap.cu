// The Lanczos basis of diffmap's eigensolver on the device (eigsh.rs' Basis), with the host's
// bits: each sum in the host's order (a row's products in storage order; a dot product per block
// of chunk_rows rows, the rows one after another from -0, the blocks' sums added in order by
// dense_reduce's add_chunks) and every operation rounded as the host rounds it (never fused).
// The basis is column-major: column j is columns[j * n .. (j + 1) * n].

// w = T x, x the basis' column j; a warp a row: its lanes form 32 products at a time (reads
// coalesced), then every lane adds them in storage order from -0 (Rust's f64 sum) through
// shuffles, so the sum is the host's. blockDim.x a multiple of 32.
extern "C" __global__ void diffmap_apply(const u64* indptr, const u32* indices, const double* data,
                                         u64 n, const double* columns, u64 j, double* w) {
    const double* x = columns + j * n;
    const u32 lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 r = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < n; r += warps) {
        const u64 p0 = indptr[r], p1 = indptr[r + 1];
        double s = -0.0;
        for (u64 base = p0; base < p1; base += 32) {
            const u64 p = base + lane;
            const double prod = p < p1 ? __dmul_rn(data[p], x[indices[p]]) : 0.0;
            const u32 count = (u32)min((u64)32, p1 - base);
            for (u32 i = 0; i < count; ++i) s = __dadd_rn(s, __shfl_sync(0xffffffffu, prod, i));
        }
        if (lane == 0) w[r] = s;
    }
}

#define DOT_TILE 32

// Per block of chunk_rows rows (blockIdx.x: the (first_chunk + blockIdx.x)-th) and column c
// (blockIdx.y * 32 + lane) of the cols first columns: 0 + (the sum from -0 of columns[c][r] *
// w[r] over the block's rows in order), into partial[blockIdx.x * cols + c]. The products of a
// tile of 32 rows are formed by the whole block (coalesced), then each column's thread adds them
// in row order. 256 threads.
extern "C" __global__ void diffmap_chunk_dots(const double* columns, u64 n, u64 cols,
                                              const double* w, u64 chunk_rows, u64 first_chunk,
                                              double* partial) {
    __shared__ double prod[DOT_TILE][DOT_TILE + 1];
    const u64 r0 = (first_chunk + blockIdx.x) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n);
    const u64 c0 = (u64)blockIdx.y * DOT_TILE;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double s = -0.0;
    for (u64 t0 = r0; t0 < r1; t0 += DOT_TILE) {
        const u64 r = t0 + lane;
        for (u32 cc = warp; cc < DOT_TILE; cc += warps) {
            const u64 c = c0 + cc;
            if (c < cols && r < r1) prod[cc][lane] = __dmul_rn(columns[c * n + r], w[r]);
        }
        __syncthreads();
        if (threadIdx.x < DOT_TILE && c0 + threadIdx.x < cols) {
            const u32 rows = (u32)min((u64)DOT_TILE, r1 - t0);
            for (u32 i = 0; i < rows; ++i) s = __dadd_rn(s, prod[threadIdx.x][i]);
        }
        __syncthreads();
    }
    if (threadIdx.x < DOT_TILE && c0 + threadIdx.x < cols)
        partial[(u64)blockIdx.x * cols + c0 + threadIdx.x] = __dadd_rn(0.0, s);
}

// w -= h[c] * columns[c] for c < cols, in order.
extern "C" __global__ void diffmap_subtract(const double* columns, u64 n, u64 cols, const double* h,
                                            double* w) {
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (u64)gridDim.x * blockDim.x) {
        double x = w[r];
        for (u64 c = 0; c < cols; ++c) x = __dsub_rn(x, __dmul_rn(h[c], columns[c * n + r]));
        w[r] = x;
    }
}

// columns[j] = w / d.
extern "C" __global__ void diffmap_store(const double* w, u64 n, double d, double* columns, u64 j) {
    double* col = columns + j * n;
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < n; r += (u64)gridDim.x * blockDim.x)
        col[r] = __ddiv_rn(w[r], d);
}

// out[c * n + r] = sum_j coefs[c * m + j] * columns[j * n + r] (j < m, from 0 in order), for
// c < count.
extern "C" __global__ void diffmap_combine(const double* columns, u64 n, u64 m, const double* coefs,
                                           u64 count, double* out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count * n; i += (u64)gridDim.x * blockDim.x) {
        const u64 c = i / n, r = i % n;
        double x = 0.0;
        for (u64 j = 0; j < m; ++j) x = __dadd_rn(x, __dmul_rn(coefs[c * m + j], columns[j * n + r]));
        out[i] = x;
    }
}

// dst[dst_at + i] = src[src_at + i] for i < len (the two ranges apart); value instead of src
// when src is null.
extern "C" __global__ void diffmap_copy(const double* src, u64 src_at, double* dst, u64 dst_at,
                                        u64 len) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (u64)gridDim.x * blockDim.x)
        dst[dst_at + i] = src ? src[src_at + i] : 0.0;
}
