// get.aggregate on the device with the host's bits (mod.rs): a wave of blocks' rows gathered
// densely (a value not stored marked by the NOT_STORED bits), each block's numbers per column
// over its stored values in row order, then the blocks added to their groups' running numbers
// in block order. Every operation rounded as the host rounds it (never fused).

// The bits of a dense cell whose value is not stored (a NaN no arithmetic produces).
#define NOT_STORED 0x7fa5a5a5u

// Tile row t (of n_rows) gets row rows[first + t] of the CSR matrix: NOT_STORED where nothing is stored.
// A stored value with the NOT_STORED bits sets *clash (the host then aggregates instead).
extern "C" __global__ void aggregate_gather(const u64* __restrict__ indptr,
                                           const u32* __restrict__ indices,
                                           const float* __restrict__ data,
                                           const u32* __restrict__ rows, u64 first, u64 n_rows,
                                           u64 n_cols,
                                           float* __restrict__ tile, u32* clash) {
    const float none = __uint_as_float(NOT_STORED);
    for (u64 t = blockIdx.x; t < n_rows; t += gridDim.x) {
        float* out = tile + t * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) out[j] = none;
        __syncthreads();
        const u64 r = rows[first + t];
        for (u64 p = indptr[r] + threadIdx.x; p < indptr[r + 1]; p += blockDim.x) {
            const float v = data[p];
            if (__float_as_uint(v) == NOT_STORED) atomicOr(clash, 1u);
            out[indices[p]] = v;
        }
        __syncthreads();
    }
}

// Per block b (of n_blocks; its tile rows first[b] .. first[b + 1]) and column j: the sum, the
// count of values != 0, and Welford's mean and M2 over the stored values, then over the block's
// zeros too (BlockStats::of), into sum/nonzero/mean/m2[b * n_cols + j].
extern "C" __global__ void aggregate_blocks(const float* __restrict__ tile, u64 n_cols,
                                           const u64* __restrict__ first, u64 n_blocks,
                                           double* sum, u64* nonzero, double* mean, double* m2) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_blocks * n_cols) return;
    const u64 b = t / n_cols, j = t % n_cols;
    double s = 0.0, mu = 0.0, q = 0.0;
    u64 nz = 0, seen = 0;
    for (u64 i = first[b]; i < first[b + 1]; ++i) {
        const float f = tile[i * n_cols + j];
        if (__float_as_uint(f) == NOT_STORED) continue;
        const double v = (double)f;
        s = __dadd_rn(s, v);
        if (v != 0.0) ++nz;
        ++seen;
        const double delta = __dsub_rn(v, mu);
        mu = __dadd_rn(mu, __ddiv_rn(delta, (double)seen));
        q = __dadd_rn(q, __dmul_rn(delta, __dsub_rn(v, mu)));
    }
    const double stored = (double)seen, zeros = (double)(first[b + 1] - first[b] - seen);
    if (zeros > 0.0 && stored > 0.0) {
        const double total = __dadd_rn(stored, zeros);
        q = __dadd_rn(q, __ddiv_rn(__dmul_rn(__dmul_rn(__dmul_rn(mu, mu), stored), zeros), total));
        mu = __dmul_rn(mu, __ddiv_rn(stored, total));
    }
    sum[t] = s;
    nonzero[t] = nz;
    mean[t] = mu;
    m2[t] = q;
}

// Per column j: the n_blocks blocks added in order to their groups' running numbers
// (BlockStats::add_into): block b of group group[b], rows_before[b] rows before it in its group
// and rows[b] rows. run_* are n_groups x n_cols.
extern "C" __global__ void aggregate_combine(const double* sum, const u64* nonzero,
                                            const double* mean, const double* m2, u64 n_blocks,
                                            u64 n_cols, const u32* group, const u64* rows_before,
                                            const u64* rows, double* run_sum, u64* run_nonzero,
                                            double* run_mean, double* run_m2) {
    const u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_cols) return;
    for (u64 b = 0; b < n_blocks; ++b) {
        const u64 p = b * n_cols + j, at = (u64)group[b] * n_cols + j;
        run_sum[at] = __dadd_rn(run_sum[at], sum[p]);
        run_nonzero[at] += nonzero[p];
        if (rows_before[b] == 0) {
            run_mean[at] = mean[p];
            run_m2[at] = m2[p];
        } else {
            const double na = (double)rows_before[b], nb = (double)rows[b];
            const double n = __dadd_rn(na, nb);
            const double delta = __dsub_rn(mean[p], run_mean[at]);
            run_mean[at] = __dadd_rn(run_mean[at], __ddiv_rn(__dmul_rn(delta, nb), n));
            const double spread = __ddiv_rn(__dmul_rn(__dmul_rn(__dmul_rn(delta, delta), na), nb), n);
            run_m2[at] = __dadd_rn(run_m2[at], __dadd_rn(m2[p], spread));
        }
    }
}
