// pearson/mod.rs and pearson/hvg.rs on the device with the host's bits: each sum in the host's
// order (a row's values one after another; per gene, the rows of a fixed chunk one after
// another, the chunks added in order by dense_reduce's add_chunks) and every operation rounded
// as the host rounds it (never fused).

__device__ __forceinline__ double pearson_clipped(double v, double mu, double theta, double clip) {
    const double var = __dadd_rn(mu, __ddiv_rn(__dmul_rn(mu, mu), theta));
    const double r = __ddiv_rn(__dsub_rn(v, mu), __dsqrt_rn(var));
    return r < -clip ? -clip : (r > clip ? clip : r);
}

// mod.rs' residual_f32: mu rounded to f32 once, then f32 arithmetic (what
// normalize_pearson_residuals writes).
__device__ __forceinline__ float pearson_residual_f32(float v, double mu, float theta, float clip) {
    const float m = __double2float_rn(mu);
    const float var = __fadd_rn(m, __fdiv_rn(__fmul_rn(m, m), theta));
    const float r = __fdiv_rn(__fsub_rn(v, m), __fsqrt_rn(var));
    return r < -clip ? -clip : (r > clip ? clip : r);
}

// Each row's sum of its stored values in storage order (stats::row_sums), a warp a row: the
// lanes read 32 values at a time (coalesced), then every lane adds them in storage order from
// 0 through shuffles, so the sum is the host's. blockDim.x a multiple of 32.
extern "C" __global__ void pearson_row_sums(const u64* indptr, const float* data, u64 n_rows,
                                            double* sums) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 r = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < n_rows; r += warps) {
        const u64 p0 = indptr[r], p1 = indptr[r + 1];
        double s = 0.0;
        for (u64 base = p0; base < p1; base += 32) {
            const u64 p = base + lane;
            const double v = p < p1 ? (double)data[p] : 0.0;
            const u32 count = (u32)min((u64)32, p1 - base);
            for (u32 i = 0; i < count; ++i) s = __dadd_rn(s, __shfl_sync(0xffffffffu, v, i));
        }
        if (lane == 0) sums[r] = s;
    }
}

// Per chunk c (of n_chunks from first_chunk on) and gene j, over the chunk's rows in order, the
// sum of: mode 0, the values; mode 1, their clipped residuals; mode 2, the squares of those
// residuals' deviations from mean[j] (hvg.rs). Genes without counts (genes[j] == 0) add
// nothing in modes 1 and 2. x holds the matrix's rows from row0 on, dense (x[(i - row0) * n_cols
// + j]); partial[c * n_cols + j] gets the sum.
extern "C" __global__ void pearson_chunk_sums(const float* x, u64 row0, u64 n_rows, u64 n_cols,
                                              u64 chunk_rows, u64 first_chunk, u64 n_chunks,
                                              int mode, const double* cells,
                                              const double* genes, double total, double theta,
                                              double clip, const double* mean, double* partial) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_chunks * n_cols) return;
    const u64 c = t / n_cols, j = t % n_cols;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    const float* col = x + j;
    double s = 0.0;
    if (mode == 0) {
        for (u64 i = r0; i < r1; ++i) s = __dadd_rn(s, (double)col[(i - row0) * n_cols]);
    } else if (genes[j] != 0.0) {
        const double gj = genes[j], m = mode == 2 ? mean[j] : 0.0;
        for (u64 i = r0; i < r1; ++i) {
            const double mu = __ddiv_rn(__dmul_rn(gj, cells[i]), total);
            double r = pearson_clipped((double)col[(i - row0) * n_cols], mu, theta, clip);
            if (mode == 2) {
                const double d = __dsub_rn(r, m);
                r = __dmul_rn(d, d);
            }
            s = __dadd_rn(s, r);
        }
    }
    partial[c * n_cols + j] = s;
}

// The dense counts x (n_rows x n_cols) replaced by their clipped residuals (mod.rs: mu =
// cells[i] / total * genes[j], then pearson_residual_f32); one block a row (grid-stride).
extern "C" __global__ void pearson_residuals_in_place(float* x, u64 n_rows, u64 n_cols,
                                                      const double* cells, const double* genes,
                                                      double total, float theta, float clip) {
    for (u64 i = blockIdx.x; i < n_rows; i += gridDim.x) {
        const double scale = __ddiv_rn(cells[i], total);
        float* row = x + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
            row[j] = pearson_residual_f32(row[j], __dmul_rn(scale, genes[j]), theta, clip);
    }
}

// Each gene's sum of its stored values, added atomically: exact, so in any order the host's
// bits, when every value is a whole number and the sums stay below 2^53 (the caller checks).
extern "C" __global__ void pearson_gene_sums_exact(const u32* indices, const float* data, u64 nnz,
                                                   double* genes) {
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < nnz; p += (u64)gridDim.x * blockDim.x)
        atomicAdd(&genes[indices[p]], (double)data[p]);
}

// The same sums through a block's partial sums in shared memory (n_cols doubles), added to
// genes once a block: far fewer atomics on the same few thousand addresses.
extern "C" __global__ void pearson_gene_sums_exact_shared(const u32* indices, const float* data,
                                                          u64 nnz, u64 n_cols, double* genes) {
    extern __shared__ double acc[];
    for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) acc[j] = 0.0;
    __syncthreads();
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < nnz; p += (u64)gridDim.x * blockDim.x)
        atomicAdd(&acc[indices[p]], (double)data[p]);
    __syncthreads();
    for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
        if (acc[j] != 0.0) atomicAdd(&genes[j], acc[j]);
}

// The dense residuals of the CSR counts straight into out (n_rows x n_cols), one block a row:
// every column's residual of a zero, then the stored values' (mod.rs' rounding, as
// pearson_residuals_in_place).
extern "C" __global__ void pearson_residuals_from_csr(const u64* indptr, const u32* indices,
                                                      const float* data, u64 n_rows, u64 n_cols,
                                                      const double* cells, const double* genes,
                                                      double total, float theta, float clip,
                                                      float* out) {
    for (u64 i = blockIdx.x; i < n_rows; i += gridDim.x) {
        const double scale = __ddiv_rn(cells[i], total);
        float* row = out + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
            row[j] = pearson_residual_f32(0.0f, __dmul_rn(scale, genes[j]), theta, clip);
        __syncthreads();
        for (u64 p = indptr[i] + threadIdx.x; p < indptr[i + 1]; p += blockDim.x) {
            const u32 j = indices[p];
            row[j] = pearson_residual_f32(data[p], __dmul_rn(scale, genes[j]), theta, clip);
        }
        __syncthreads();
    }
}
