// regress_out on a dense row-major X, or on a CSR X written dense with its residuals in one
// pass. Every sum repeats the CPU reference's order bit for bit: per chunk of `chunk_rows` rows
// the rows are added one after another (rounded products and sums, never fused);
// gpu/dense_reduce.cu adds the chunks' sums in chunk order. The chunk kernels read `x` from row
// `x_row0` on (0 for a whole dense X, the wave's first row for a CSR X densified a wave of chunks
// at a time) and compare each value with `first_row`, X's row 0; regress_csr_chunk_sums reads
// a CSR X in place, a few rows at a time written into a dense tile of shared memory.

// Per chunk c (of n_chunks from first_chunk on) and gene j, the sums over the chunk's rows of
// design[k][i] * x[i][j] for each of the q design columns: partial[(c * q + k) * n_cols + j];
// differs[j] = 1 when gene j has a value other than its first row's (both chunk kernels).
// Blocks: x over the genes (consecutive threads read consecutive genes of a row), y over the
// chunks of the wave. The columns go Q at a time, Q known to the compiler (a switch on the
// uniform q picks it), so the sums stay in registers; the design's values of REGRESS_TILE rows
// are read into shared memory once per block.
#define REGRESS_KB 8
#define REGRESS_TILE 256
template <int Q>
__device__ void regress_chunk_sums_of(const float* __restrict__ x, u64 x_row0, u64 n_rows,
                                      u64 n_cols, const float* __restrict__ first_row,
                                      const double* __restrict__ design, u32 q, u32 k0, u64 c,
                                      u64 j, u64 r0, u64 r1, double* __restrict__ partial,
                                      double* sd, bool* differ) {
    const bool active = j < n_cols;
    double acc[Q];
#pragma unroll
    for (int k = 0; k < Q; ++k) acc[k] = 0.0;
    const float first = active ? first_row[j] : 0.0f;
    const double* d = design + (u64)k0 * n_rows;
    bool diff = false;
    for (u64 t0 = r0; t0 < r1; t0 += REGRESS_TILE) {
        const u32 tn = (u32)min((u64)REGRESS_TILE, r1 - t0);
        __syncthreads();  // the block is done with the previous tile
        for (u32 e = threadIdx.x; e < Q * tn; e += blockDim.x) {
            const u32 k = e / tn, r = e - k * tn;
            sd[k * REGRESS_TILE + r] = d[(u64)k * n_rows + t0 + r];
        }
        __syncthreads();
        if (active) {
            const float* xp = x + (t0 - x_row0) * n_cols + j;
#pragma unroll 4
            for (u32 r = 0; r < tn; ++r) {
                const float xv = *xp;
                xp += n_cols;
                diff |= xv != first;
                const double v = (double)xv;
#pragma unroll
                for (int k = 0; k < Q; ++k)
                    acc[k] = __dadd_rn(acc[k], __dmul_rn(sd[k * REGRESS_TILE + r], v));
            }
        }
    }
    if (active) {
#pragma unroll
        for (int k = 0; k < Q; ++k) partial[(c * q + k0 + k) * n_cols + j] = acc[k];
    }
    *differ |= diff;
}

extern "C" __global__ void regress_chunk_sums(const float* __restrict__ x, u64 x_row0, u64 n_rows,
                                              u64 n_cols, const float* __restrict__ first_row,
                                              const double* __restrict__ design, u32 q,
                                              u64 chunk_rows, u64 first_chunk, u64 n_chunks,
                                              double* __restrict__ partial,
                                              u32* __restrict__ differs) {
    __shared__ double sd[REGRESS_KB * REGRESS_TILE];
    const u64 c = blockIdx.y;
    const u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    bool differ = false;
    for (u32 k0 = 0; k0 < q; k0 += REGRESS_KB) {
#define REGRESS_GROUP(Q) \
    case Q: regress_chunk_sums_of<Q>(x, x_row0, n_rows, n_cols, first_row, design, q, k0, c, j, r0, r1, partial, sd, &differ); break;
        switch (min((u32)REGRESS_KB, q - k0)) {
            REGRESS_GROUP(1) REGRESS_GROUP(2) REGRESS_GROUP(3) REGRESS_GROUP(4)
            REGRESS_GROUP(5) REGRESS_GROUP(6) REGRESS_GROUP(7) REGRESS_GROUP(8)
        }
#undef REGRESS_GROUP
    }
    if (differ && j < n_cols) differs[j] = 1u;
}

// Per chunk c and gene j, the sums of x[i][j] over the chunk's rows of each bucket:
// partial[(c * n_buckets + b) * n_cols + j] (each thread writes all of its own).
extern "C" __global__ void regress_chunk_bucket_sums(const float* __restrict__ x, u64 x_row0,
                                                     u64 n_rows, u64 n_cols,
                                                     const float* __restrict__ first_row,
                                                     const u32* __restrict__ bucket,
                                                     u32 n_buckets, u64 chunk_rows,
                                                     u64 first_chunk, u64 n_chunks,
                                                     double* __restrict__ partial,
                                                     u32* __restrict__ differs) {
    const u64 c = blockIdx.y;
    const u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_cols) return;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    double* out = partial + c * n_buckets * n_cols + j;
    const float first = first_row[j];
    bool differ = false;
    if (n_buckets <= REGRESS_KB) {
        // Few buckets: the sums in registers, each row added to its own bucket's only.
        double acc[REGRESS_KB];
#pragma unroll
        for (u32 b = 0; b < REGRESS_KB; ++b) acc[b] = 0.0;
        for (u64 i = r0; i < r1; ++i) {
            const float v = x[(i - x_row0) * n_cols + j];
            differ |= v != first;
            const u32 bk = bucket[i];
#pragma unroll
            for (u32 b = 0; b < REGRESS_KB; ++b)
                if (b == bk) acc[b] = __dadd_rn(acc[b], (double)v);
        }
#pragma unroll
        for (u32 b = 0; b < REGRESS_KB; ++b)
            if (b < n_buckets) out[(u64)b * n_cols] = acc[b];
    } else {
        for (u32 b = 0; b < n_buckets; ++b) out[(u64)b * n_cols] = 0.0;
        for (u64 i = r0; i < r1; ++i) {
            const float v = x[(i - x_row0) * n_cols + j];
            differ |= v != first;
            double* s = out + (u64)bucket[i] * n_cols;
            *s = __dadd_rn(*s, (double)v);
        }
    }
    if (differ) differs[j] = 1u;
}

// regress_chunk_sums over a CSR X, without a dense copy of it: per chunk c (blockIdx.y) and
// window of REGRESS_CSR_WINDOW genes (blockIdx.x), the chunk's rows `tile_rows` at a time are
// written into a dense tile in shared memory (unstored values 0, as in X.toarray()), then each
// thread adds its genes' column of the tile row after row, exactly as regress_chunk_sums adds a
// dense X's (the same bits), putting back the zeros as it reads. Rows hold each column once (the
// device's CSR checks refuse a repeated one). Launched with REGRESS_CSR_THREADS threads and
// tile_rows * min(n_cols, REGRESS_CSR_WINDOW) floats of dynamic shared memory.
#define REGRESS_CSR_THREADS 512
#define REGRESS_CSR_GENES 4
#define REGRESS_CSR_WINDOW (REGRESS_CSR_THREADS * REGRESS_CSR_GENES)
#define REGRESS_CSR_TILE_MAX 16
template <int Q>
__device__ void regress_csr_chunk_sums_of(const u64* __restrict__ indptr,
                                          const u32* __restrict__ indices,
                                          const float* __restrict__ data, u64 n_rows, u64 n_cols,
                                          const float* __restrict__ first_row,
                                          const double* __restrict__ design, u32 q, u32 k0,
                                          u64 c, u64 j0, u32 w, u64 r0, u64 r1, u32 tile_rows,
                                          double* __restrict__ partial, float* tile, double* sd,
                                          u64* sp, u32* __restrict__ differs) {
    double acc[REGRESS_CSR_GENES][Q];
    float first[REGRESS_CSR_GENES];
    bool diff[REGRESS_CSR_GENES];
#pragma unroll
    for (int m = 0; m < REGRESS_CSR_GENES; ++m) {
        const u32 jl = threadIdx.x + m * REGRESS_CSR_THREADS;
        first[m] = jl < w ? first_row[j0 + jl] : 0.0f;
        diff[m] = false;
#pragma unroll
        for (int k = 0; k < Q; ++k) acc[m][k] = 0.0;
    }
    const double* d = design + (u64)k0 * n_rows;
    for (u64 t0 = r0; t0 < r1; t0 += tile_rows) {
        const u32 tn = (u32)min((u64)tile_rows, r1 - t0);
        __syncthreads();  // the block is done with the previous tile
        if (threadIdx.x <= tn) sp[threadIdx.x] = indptr[t0 + threadIdx.x];
        for (u32 e = threadIdx.x; e < Q * tn; e += REGRESS_CSR_THREADS) {
            const u32 k = e / tn, r = e - k * tn;
            sd[k * REGRESS_CSR_TILE_MAX + r] = d[(u64)k * n_rows + t0 + r];
        }
        __syncthreads();
        const u64 p1 = sp[tn];
#pragma unroll 4
        for (u64 p = sp[0] + threadIdx.x; p < p1; p += REGRESS_CSR_THREADS) {
            const u64 jl = (u64)indices[p] - j0;  // past the window (or before it: wrapped)
            if (jl < w) {
                u32 r = 0;
                while (p >= sp[r + 1]) ++r;
                tile[r * w + jl] = data[p];
            }
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < REGRESS_CSR_GENES; ++m) {
            const u32 jl = threadIdx.x + m * REGRESS_CSR_THREADS;
            if (jl >= w) continue;
            for (u32 r = 0; r < tn; ++r) {
                const float xv = tile[r * w + jl];
                tile[r * w + jl] = 0.0f;
                diff[m] |= xv != first[m];
                const double v = (double)xv;
#pragma unroll
                for (int k = 0; k < Q; ++k)
                    acc[m][k] = __dadd_rn(acc[m][k], __dmul_rn(sd[k * REGRESS_CSR_TILE_MAX + r], v));
            }
        }
    }
#pragma unroll
    for (int m = 0; m < REGRESS_CSR_GENES; ++m) {
        const u32 jl = threadIdx.x + m * REGRESS_CSR_THREADS;
        if (jl >= w) continue;
#pragma unroll
        for (int k = 0; k < Q; ++k) partial[(c * q + k0 + k) * n_cols + j0 + jl] = acc[m][k];
        if (diff[m]) differs[j0 + jl] = 1u;
    }
}

extern "C" __global__ void __launch_bounds__(REGRESS_CSR_THREADS, 2)
regress_csr_chunk_sums(const u64* __restrict__ indptr, const u32* __restrict__ indices,
                       const float* __restrict__ data, u64 n_rows, u64 n_cols,
                       const float* __restrict__ first_row, const double* __restrict__ design,
                       u32 q, u64 chunk_rows, u64 first_chunk, u64 n_chunks, u32 tile_rows,
                       double* __restrict__ partial, u32* __restrict__ differs) {
    extern __shared__ float tile[];
    __shared__ double sd[REGRESS_KB * REGRESS_CSR_TILE_MAX];
    __shared__ u64 sp[REGRESS_CSR_TILE_MAX + 1];
    const u64 c = blockIdx.y;
    const u64 j0 = (u64)blockIdx.x * REGRESS_CSR_WINDOW;
    const u32 w = (u32)min((u64)REGRESS_CSR_WINDOW, n_cols - j0);
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    for (u32 e = threadIdx.x; e < tile_rows * w; e += REGRESS_CSR_THREADS) tile[e] = 0.0f;
    for (u32 k0 = 0; k0 < q; k0 += REGRESS_KB) {
#define REGRESS_CSR_GROUP(Q) \
    case Q: regress_csr_chunk_sums_of<Q>(indptr, indices, data, n_rows, n_cols, first_row, design, q, k0, c, j0, w, r0, r1, tile_rows, partial, tile, sd, sp, differs); break;
        switch (min((u32)REGRESS_KB, q - k0)) {
            REGRESS_CSR_GROUP(1) REGRESS_CSR_GROUP(2) REGRESS_CSR_GROUP(3) REGRESS_CSR_GROUP(4)
            REGRESS_CSR_GROUP(5) REGRESS_CSR_GROUP(6) REGRESS_CSR_GROUP(7) REGRESS_CSR_GROUP(8)
        }
#undef REGRESS_CSR_GROUP
    }
}

// The row-wise kernels: blocks over rows, a block's threads over the row's genes.
#define ROWS_LOOP for (u64 i = blockIdx.x; i < n_rows; i += gridDim.x)

// Gene j's fit of a cell whose q design values are d[0], d[stride], ...: each product with the
// gene's coefficient added to 0 in k order.
__device__ __forceinline__ double regress_fit_at(const double* d, u64 stride, u32 q,
                                                  const double* coef, u64 n_cols, u64 j) {
    double fit = 0.0;
    for (u32 k = 0; k < q; ++k)
        fit = __dadd_rn(fit, __dmul_rn(d[(u64)k * stride], coef[(u64)k * n_cols + j]));
    return fit;
}

// Gene j's category fit b0 + b1 * the cell's category mean.
__device__ __forceinline__ double regress_category_fit_at(const double* b0, const double* b1,
                                                           const float* row_means, u64 j) {
    return __dadd_rn(b0[j], __dmul_rn(b1[j], (double)row_means[j]));
}

// A value less its fit, rounded to f32.
__device__ __forceinline__ float regress_residual(float v, double fit) {
    return __double2float_rn(__dsub_rn((double)v, fit));
}

// x[i][j] -= sum_k design[k][i] * coef[k][j] (summed in k order) for the genes not kept; the
// row's Q design values are read once, into registers (Q known to the compiler for q up to
// REGRESS_KB; a loop beyond). Its own loop, not regress_fit_at: the kernel measured by ncu
// (session 33) keeps the code it was tuned with.
template <int Q>
__device__ void regress_subtract_fit_of(float* __restrict__ x, u64 n_rows, u64 n_cols,
                                        const double* __restrict__ design,
                                        const double* __restrict__ coef,
                                        const u32* __restrict__ keep) {
    ROWS_LOOP {
        double d[Q];
#pragma unroll
        for (int k = 0; k < Q; ++k) d[k] = design[(u64)k * n_rows + i];
        float* row = x + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
            if (keep[j]) continue;
            double fit = 0.0;
#pragma unroll
            for (int k = 0; k < Q; ++k) fit = __dadd_rn(fit, __dmul_rn(d[k], coef[(u64)k * n_cols + j]));
            row[j] = __double2float_rn(__dsub_rn((double)row[j], fit));
        }
    }
}

extern "C" __global__ void regress_subtract_fit(float* __restrict__ x, u64 n_rows, u64 n_cols,
                                                const double* __restrict__ design, u32 q,
                                                const double* __restrict__ coef,
                                                const u32* __restrict__ keep) {
    switch (q) {
#define REGRESS_FIT(Q) \
    case Q: regress_subtract_fit_of<Q>(x, n_rows, n_cols, design, coef, keep); return;
        REGRESS_FIT(1) REGRESS_FIT(2) REGRESS_FIT(3) REGRESS_FIT(4)
        REGRESS_FIT(5) REGRESS_FIT(6) REGRESS_FIT(7) REGRESS_FIT(8)
#undef REGRESS_FIT
    }
    ROWS_LOOP for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
        if (keep[j]) continue;
        double fit = 0.0;
        for (u32 k = 0; k < q; ++k)
            fit = __dadd_rn(fit, __dmul_rn(design[(u64)k * n_rows + i], coef[(u64)k * n_cols + j]));
        const u64 e = i * n_cols + j;
        x[e] = __double2float_rn(__dsub_rn((double)x[e], fit));
    }
}

// x[i][j] -= b0[j] + b1[j] * means[bucket[i]][j] for the genes not kept.
extern "C" __global__ void regress_subtract_category_fit(float* __restrict__ x, u64 n_rows,
                                                         u64 n_cols, const u32* __restrict__ bucket,
                                                         const float* __restrict__ means,
                                                         const double* __restrict__ b0,
                                                         const double* __restrict__ b1,
                                                         const u32* __restrict__ keep) {
    ROWS_LOOP {
        const float* row_means = means + (u64)bucket[i] * n_cols;
        float* row = x + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
            if (keep[j]) continue;
            row[j] = regress_residual(row[j], regress_category_fit_at(b0, b1, row_means, j));
        }
    }
}

// The same residuals as regress_subtract_fit, of a CSR X written into the dense row-major `out`
// in one pass: each row's genes first as 0 less their fit (or 0 where kept), then its stored
// values less their fit over them (rows hold each column once: the device's CSR checks refuse a
// repeated one). Q > 0: the row's Q design values read once, into registers (q up to
// REGRESS_KB); Q = 0: the q values read in place.
template <int Q>
__device__ void regress_csr_subtract_fit_of(const u64* __restrict__ indptr,
                                            const u32* __restrict__ indices,
                                            const float* __restrict__ data, u64 n_rows,
                                            u64 n_cols, const double* __restrict__ design, u32 q,
                                            const double* __restrict__ coef,
                                            const u32* __restrict__ keep,
                                            float* __restrict__ out) {
    ROWS_LOOP {
        double dr[Q > 0 ? Q : 1];
#pragma unroll
        for (int k = 0; k < Q; ++k) dr[k] = design[(u64)k * n_rows + i];
        const double* d = Q > 0 ? dr : design + i;
        const u64 stride = Q > 0 ? 1 : n_rows;
        const u32 nq = Q > 0 ? Q : q;
        float* row = out + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
            row[j] = keep[j] ? 0.0f : regress_residual(0.0f, regress_fit_at(d, stride, nq, coef, n_cols, j));
        __syncthreads();
        for (u64 p = indptr[i] + threadIdx.x; p < indptr[i + 1]; p += blockDim.x) {
            const u32 j = indices[p];
            const float v = data[p];
            row[j] = keep[j] ? v : regress_residual(v, regress_fit_at(d, stride, nq, coef, n_cols, j));
        }
        __syncthreads();
    }
}

extern "C" __global__ void regress_csr_subtract_fit(const u64* __restrict__ indptr,
                                                    const u32* __restrict__ indices,
                                                    const float* __restrict__ data, u64 n_rows,
                                                    u64 n_cols, const double* __restrict__ design,
                                                    u32 q, const double* __restrict__ coef,
                                                    const u32* __restrict__ keep,
                                                    float* __restrict__ out) {
    switch (q) {
#define REGRESS_CSR_FIT(Q) \
    case Q: regress_csr_subtract_fit_of<Q>(indptr, indices, data, n_rows, n_cols, design, q, coef, keep, out); return;
        REGRESS_CSR_FIT(1) REGRESS_CSR_FIT(2) REGRESS_CSR_FIT(3) REGRESS_CSR_FIT(4)
        REGRESS_CSR_FIT(5) REGRESS_CSR_FIT(6) REGRESS_CSR_FIT(7) REGRESS_CSR_FIT(8)
#undef REGRESS_CSR_FIT
    default: regress_csr_subtract_fit_of<0>(indptr, indices, data, n_rows, n_cols, design, q, coef, keep, out);
    }
}

// The same residuals as regress_subtract_category_fit, of a CSR X written into `out` in one
// pass (as regress_csr_subtract_fit).
extern "C" __global__ void regress_csr_subtract_category_fit(
    const u64* __restrict__ indptr, const u32* __restrict__ indices,
    const float* __restrict__ data, u64 n_rows, u64 n_cols, const u32* __restrict__ bucket,
    const float* __restrict__ means, const double* __restrict__ b0,
    const double* __restrict__ b1, const u32* __restrict__ keep, float* __restrict__ out) {
    ROWS_LOOP {
        const float* row_means = means + (u64)bucket[i] * n_cols;
        float* row = out + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
            row[j] = keep[j] ? 0.0f : regress_residual(0.0f, regress_category_fit_at(b0, b1, row_means, j));
        __syncthreads();
        for (u64 p = indptr[i] + threadIdx.x; p < indptr[i + 1]; p += blockDim.x) {
            const u32 j = indices[p];
            const float v = data[p];
            row[j] = keep[j] ? v : regress_residual(v, regress_category_fit_at(b0, b1, row_means, j));
        }
        __syncthreads();
    }
}
