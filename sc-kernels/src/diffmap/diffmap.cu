// The Lanczos basis of diffmap's eigensolver on the device (eigsh.rs' Basis), with the host's
// bits: each sum in the host's order (a row's products in storage order; a dot product per block
// of eigsh's ROWS rows as eigsh's block_sum adds it, the blocks' sums added in order by
// dense_reduce's add_chunks) and every operation rounded as the host rounds it (never fused).
// The basis is column-major: column j is columns[j * n .. (j + 1) * n].

// w = T x, x the basis' column j: each row's products summed in storage order (common.cuh's
// csr_row_sums: four rows a warp, eight lanes a row; a transition matrix row holds a few tens
// of values), so the sum is the host's. blockDim.x a multiple of 32.
extern "C" __global__ void diffmap_apply(const u64* indptr, const u32* indices, const double* data,
                                         u64 n, const double* columns, u64 j, double* w) {
    csr_row_sums(indptr, indices, data, columns + j * n, n, [&](u64 r, double s) { w[r] = s; });
}

#define LANE_ROWS 32  // rows a lane holds: a block of 32 * LANE_ROWS rows (eigsh's ROWS)
#define WARPS 4       // warps sharing a block of rows (blockDim.x = 32 * WARPS)
#define DOT_GROUP 4   // dot products a lane forms at once

// One thread block per block of 32 * LANE_ROWS rows (the (first_chunk + blockIdx.x)-th); lane l
// holds the rows l, l + 32, ... (eigsh's block_sum lanes). Warp v forms, for its lane rows
// v, v + WARPS, ..., each row's
//   x = w_in[r] - h[0] columns[0][r] - ... - h[sub_cols - 1] columns[sub_cols - 1][r]
// (subtracted in order, rounded, never fused; x = w_in[r] when h is null), into shared memory
// and into w_out[r] when w_out is not null (apart from w_in). Then for each of the dot_cols
// first columns (warp v takes groups of DOT_GROUP from v * DOT_GROUP on, every WARPS-th), or for
// x itself with self_dot (dot_cols 1, the first warp), the products with x added per lane in
// row order from -0, the lanes added pairwise by warp_sum_f64: partial[blockIdx.x * dot_cols +
// c] = 0 + that. Each basis value is read once, the reads coalesced across a warp.
extern "C" __global__ void diffmap_project_dots(const double* columns, u64 n, const double* h,
                                                u64 sub_cols, const double* w_in, double* w_out,
                                                u64 dot_cols, int self_dot, u64 first_chunk,
                                                double* partial) {
    __shared__ double xs[LANE_ROWS][32];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u64 i = blockIdx.x;
    const u64 r0 = (first_chunk + i) * (32 * LANE_ROWS) + lane;
    double x[LANE_ROWS / WARPS];
#pragma unroll
    for (u32 k = 0; k < LANE_ROWS / WARPS; ++k) {
        const u64 r = r0 + 32 * (warp + WARPS * k);
        x[k] = r < n ? w_in[r] : 0.0;
    }
    if (h) {
#pragma unroll 4
        for (u64 c = 0; c < sub_cols; ++c) {
            const double hc = h[c];
            const double* col = columns + c * n;
#pragma unroll
            for (u32 k = 0; k < LANE_ROWS / WARPS; ++k) {
                const u64 r = r0 + 32 * (warp + WARPS * k);
                if (r < n) x[k] = __dsub_rn(x[k], __dmul_rn(hc, col[r]));
            }
        }
    }
#pragma unroll
    for (u32 k = 0; k < LANE_ROWS / WARPS; ++k) {
        const u32 q = warp + WARPS * k;
        xs[q][lane] = x[k];
        if (w_out && r0 + 32 * q < n) w_out[r0 + 32 * q] = x[k];
    }
    __syncthreads();
    if (self_dot) {
        if (warp == 0) {
            double s = -0.0;
#pragma unroll 8
            for (u32 q = 0; q < LANE_ROWS; ++q)
                if (r0 + 32 * q < n) s = __dadd_rn(s, __dmul_rn(xs[q][lane], xs[q][lane]));
            s = warp_sum_f64(s);
            if (lane == 0) partial[i * dot_cols] = __dadd_rn(0.0, s);
        }
        return;
    }
    for (u64 c0 = warp * DOT_GROUP; c0 < dot_cols; c0 += WARPS * DOT_GROUP) {
        double s[DOT_GROUP];
#pragma unroll
        for (u32 g = 0; g < DOT_GROUP; ++g) s[g] = -0.0;
#pragma unroll 4
        for (u32 q = 0; q < LANE_ROWS; ++q) {
            const u64 r = r0 + 32 * q;
            if (r < n) {
                const double xv = xs[q][lane];
#pragma unroll
                for (u32 g = 0; g < DOT_GROUP; ++g)
                    if (c0 + g < dot_cols) s[g] = __dadd_rn(s[g], __dmul_rn(columns[(c0 + g) * n + r], xv));
            }
        }
#pragma unroll
        for (u32 g = 0; g < DOT_GROUP; ++g) {
            if (c0 + g < dot_cols) {  // the same for the whole warp
                const double t = warp_sum_f64(s[g]);
                if (lane == 0) partial[i * dot_cols + c0 + g] = __dadd_rn(0.0, t);
            }
        }
    }
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
