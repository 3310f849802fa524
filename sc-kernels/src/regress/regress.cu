// regress_out on a dense row-major X. Every sum repeats the CPU reference's order bit for bit:
// per chunk of `chunk_rows` rows the rows are added one after another (rounded products and
// sums, never fused); gpu/dense_reduce.cu adds the chunks' sums in chunk order.

// Per chunk c (of n_chunks from first_chunk on) and gene j, the sums over the chunk's rows of
// design[k][i] * x[i][j] for each of the q design columns: partial[(c * q + k) * n_cols + j].
// One thread per (chunk, gene): consecutive threads read consecutive genes of a row.
#define REGRESS_KB 8
extern "C" __global__ void regress_chunk_sums(const float* x, u64 n_rows, u64 n_cols,
                                              const double* design, u32 q, u64 chunk_rows,
                                              u64 first_chunk, u64 n_chunks, double* partial) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_chunks * n_cols) return;
    const u64 c = t / n_cols, j = t % n_cols;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    for (u32 k0 = 0; k0 < q; k0 += REGRESS_KB) {
        const u32 kn = min((u32)REGRESS_KB, q - k0);
        double acc[REGRESS_KB];
#pragma unroll
        for (u32 k = 0; k < REGRESS_KB; ++k) acc[k] = 0.0;
        for (u64 i = r0; i < r1; ++i) {
            const double v = (double)x[i * n_cols + j];
#pragma unroll
            for (u32 k = 0; k < REGRESS_KB; ++k)
                if (k < kn) acc[k] = __dadd_rn(acc[k], __dmul_rn(design[(u64)(k0 + k) * n_rows + i], v));
        }
        for (u32 k = 0; k < kn; ++k) partial[(c * q + k0 + k) * n_cols + j] = acc[k];
    }
}

// Per chunk c and gene j, the sums of x[i][j] over the chunk's rows of each bucket:
// partial[(c * n_buckets + b) * n_cols + j] (each thread zeroes its own sums first).
extern "C" __global__ void regress_chunk_bucket_sums(const float* x, u64 n_rows, u64 n_cols,
                                                     const u32* bucket, u32 n_buckets,
                                                     u64 chunk_rows, u64 first_chunk, u64 n_chunks,
                                                     double* partial) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_chunks * n_cols) return;
    const u64 c = t / n_cols, j = t % n_cols;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    double* out = partial + c * n_buckets * n_cols + j;
    for (u32 b = 0; b < n_buckets; ++b) out[(u64)b * n_cols] = 0.0;
    for (u64 i = r0; i < r1; ++i) {
        double* s = out + (u64)bucket[i] * n_cols;
        *s = __dadd_rn(*s, (double)x[i * n_cols + j]);
    }
}

// The row-wise kernels: blocks over rows, a block's threads over the row's genes.
#define ROWS_LOOP for (u64 i = blockIdx.x; i < n_rows; i += gridDim.x)

// differs[j] = 1 when gene j has a value other than its first row's.
extern "C" __global__ void regress_differs(const float* x, u64 n_rows, u64 n_cols, u32* differs) {
    ROWS_LOOP {
        const float* row = x + i * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x)
            if (row[j] != x[j]) differs[j] = 1u;
    }
}

// x[i][j] -= sum_k design[k][i] * coef[k][j] (summed in k order) for the genes not kept.
extern "C" __global__ void regress_subtract_fit(float* x, u64 n_rows, u64 n_cols,
                                                const double* design, u32 q, const double* coef,
                                                const u32* keep) {
    ROWS_LOOP for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
        const u64 e = i * n_cols + j;
        if (keep[j]) continue;
        double fit = 0.0;
        for (u32 k = 0; k < q; ++k) fit = __dadd_rn(fit, __dmul_rn(design[(u64)k * n_rows + i], coef[(u64)k * n_cols + j]));
        x[e] = __double2float_rn(__dsub_rn((double)x[e], fit));
    }
}

// x[i][j] -= b0[j] + b1[j] * means[bucket[i]][j] for the genes not kept.
extern "C" __global__ void regress_subtract_category_fit(float* x, u64 n_rows, u64 n_cols,
                                                         const u32* bucket, const float* means,
                                                         const double* b0, const double* b1,
                                                         const u32* keep) {
    ROWS_LOOP for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
        const u64 e = i * n_cols + j;
        if (keep[j]) continue;
        const double fit = __dadd_rn(b0[j], __dmul_rn(b1[j], (double)means[(u64)bucket[i] * n_cols + j]));
        x[e] = __double2float_rn(__dsub_rn((double)x[e], fit));
    }
}
