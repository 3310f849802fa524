// Reductions over a dense row-major matrix whose bits equal the host's: per fixed chunk of
// rows the rows are added one after another (rounded operations, never fused), then the
// chunks' sums are added in chunk order (add_chunks).

// The position of the first NaN or infinite value (first stays u64 max when none).
extern "C" __global__ void dense_first_nonfinite(const float* x, u64 n, u64* first) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        if (!isfinite(x[i])) atomicMin(first, i);
    }
}

// The position of the first zero (+0 or -0) of x (first stays u64 max when none).
extern "C" __global__ void first_zero_f64(const double* x, u64 n, u64* first) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        if (x[i] == 0.0) atomicMin(first, i);
    }
}

#define ADD_AHEAD 32

// total[p] += partial[c][p] for the n_chunks chunks, in chunk order. ADD_AHEAD partial sums are
// loaded before they are added, so a long chain of chunks waits for memory once per ADD_AHEAD
// of them, not once each.
extern "C" __global__ void add_chunks(const double* partial, u64 n_chunks, u64 len, double* total) {
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < len; p += (u64)gridDim.x * blockDim.x) {
        double s = total[p];
        for (u64 c0 = 0; c0 < n_chunks; c0 += ADD_AHEAD) {
            double v[ADD_AHEAD];
#pragma unroll
            for (u32 i = 0; i < ADD_AHEAD; ++i) v[i] = c0 + i < n_chunks ? partial[(c0 + i) * len + p] : 0.0;
#pragma unroll
            for (u32 i = 0; i < ADD_AHEAD; ++i)
                if (c0 + i < n_chunks) s = __dadd_rn(s, v[i]);
        }
        total[p] = s;
    }
}

// add_chunks with a warp a column, for few columns (too few threads for add_chunks to keep
// memory busy): the lanes load 32 chunks' sums at once (the next 32 loaded before these are
// added), and each lane adds them all in chunk order, so the sum is add_chunks'.
extern "C" __global__ void add_chunks_warp(const double* partial, u64 n_chunks, u64 len,
                                           double* total) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 p = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < len; p += warps) {
        double s = total[p];
        double v = lane < n_chunks ? partial[lane * len + p] : 0.0;
        for (u64 c0 = 0; c0 < n_chunks; c0 += 32) {
            const u64 c = c0 + 32 + lane;
            const double next = c < n_chunks ? partial[c * len + p] : 0.0;
#pragma unroll
            for (u32 j = 0; j < 32; ++j) {
                const double u = __shfl_sync(FULL_MASK, v, j);
                if (c0 + j < n_chunks) s = __dadd_rn(s, u);
            }
            v = next;
        }
        if (lane == 0) total[p] = s;
    }
}

// Per chunk c (of n_chunks from first_chunk on) and column j, the sums of x and of x * x
// (rounded to f32, as numpy squares a float32 array) over the chunk's rows:
// partial[c * 2 * n_cols + j] and partial[c * 2 * n_cols + n_cols + j].
extern "C" __global__ void dense_chunk_moments(const float* x, u64 n_rows, u64 n_cols,
                                               u64 chunk_rows, u64 first_chunk, u64 n_chunks,
                                               double* partial) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_chunks * n_cols) return;
    const u64 c = t / n_cols, j = t % n_cols;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    double s = 0.0, q = 0.0;
    for (u64 i = r0; i < r1; ++i) {
        const float v = x[i * n_cols + j];
        s = __dadd_rn(s, (double)v);
        q = __dadd_rn(q, (double)__fmul_rn(v, v));
    }
    partial[c * 2 * n_cols + j] = s;
    partial[c * 2 * n_cols + n_cols + j] = q;
}
