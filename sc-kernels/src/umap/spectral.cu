// The spectral start's Lanczos vectors on the GPU (spectral_gpu.rs): each kernel sums in the
// order of spectral.rs's host code, rounded the same way (`_rn`: no fused multiply-adds), so
// the start equals the host's bit for bit. Vectors are columns of `n` doubles; sums run in
// blocks of `rows` and start from -0.0 as Rust's `f64::sum` does.

// z = x / sqrt_d, the vector the product gathers.
extern "C" __global__ void spectral_divide(const double* x, const double* sqrt_d, double* z,
                                           u64 n) {
    u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n) z[r] = __ddiv_rn(x[r], sqrt_d[r]);
}

// y = D^-1/2 A D^-1/2 x from z = D^-1/2 x: per row, each entry's w z[u] summed in entry order
// (common.cuh's csr_row_sums, four rows a warp), then divided by the row's sqrt_d.
extern "C" __global__ void spectral_apply(const u64* indptr, const u32* indices, const float* w,
                                          const double* sqrt_d, const double* z, double* y,
                                          u64 n) {
    csr_row_sums(indptr, indices, w, z, n,
                 [&](u64 r, double s) { y[r] = __ddiv_rn(s, sqrt_d[r]); });
}

// Rows of a block of `rows` = 1024 (eigsh.rs ROWS; the host checks) that one lane holds.
#define LANE_ROWS 32

// partial[b * n_blocks + c] = sum over block c of q_b[r] x[r], for b < k: a warp a block, its
// rows of x read once into registers (lane l holding rows l, l + 32, ...), then for each b
// lane l adds its rows in order and the lanes add in halves (eigsh.rs `block_sum`). The
// block's 32 reads of q_b are independent: all in flight at once.
extern "C" __global__ void spectral_block_dots(const double* q, u64 k, const double* x, u64 n,
                                               u64 rows, double* partial) {
    u64 n_blocks = (n + rows - 1) / rows;
    u64 c = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (c >= n_blocks) return;  // the whole warp: blockDim.x is a multiple of 32
    const u64 first = c * rows + lane, end = min(n, (c + 1) * rows);
    double xv[LANE_ROWS];
#pragma unroll
    for (int i = 0; i < LANE_ROWS; ++i) {
        u64 r = first + 32 * (u64)i;
        xv[i] = r < end ? x[r] : 0.0;
    }
    for (u64 b = 0; b < k; ++b) {
        const double* qb = q + b * n;
        double s = -0.0;
#pragma unroll
        for (int i = 0; i < LANE_ROWS; ++i) {
            u64 r = first + 32 * (u64)i;
            if (r < end) s = __dadd_rn(s, __dmul_rn(qb[r], xv[i]));
        }
        s = warp_sum_f64(s);
        if (lane == 0) partial[b * n_blocks + c] = s;
    }
}

// coeffs[b] = the blocks' sums of vector b added in block order: a thread block a vector, its
// threads reading the partial sums a tile at a time (coalesced, all in flight) into shared
// memory, thread 0 adding them in order.
#define SUM_TILE 256
extern "C" __global__ void spectral_block_sums(const double* partial, u64 k, u64 n_blocks,
                                               double* coeffs) {
    __shared__ double tile[SUM_TILE];
    u64 b = blockIdx.x;
    if (b >= k) return;
    const double* p = partial + b * n_blocks;
    double s = -0.0;
    for (u64 c0 = 0; c0 < n_blocks; c0 += SUM_TILE) {
        u64 len = min((u64)SUM_TILE, n_blocks - c0);
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) tile[i] = p[c0 + i];
        __syncthreads();
        if (threadIdx.x == 0)
            for (u64 i = 0; i < len; ++i) s = __dadd_rn(s, tile[i]);
        __syncthreads();
    }
    if (threadIdx.x == 0) coeffs[b] = s;
}

// x[r] -= coeffs[b] q_b[r] for b = 0 .. k in order.
extern "C" __global__ void spectral_subtract(const double* q, u64 k, const double* coeffs,
                                             double* x, u64 n) {
    u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    double xi = x[r];
    for (u64 b = 0; b < k; ++b) xi = __dsub_rn(xi, __dmul_rn(coeffs[b], q[b * n + r]));
    x[r] = xi;
}

// out[r] = v[r] * scale.
extern "C" __global__ void spectral_scale(const double* v, double scale, double* out, u64 n) {
    u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n) out[r] = __dmul_rn(v[r], scale);
}

// out[r dim + d] = sum over j < steps of q_j[r] coef[j dim + d], from 0.0 up.
extern "C" __global__ void spectral_ritz(const double* q, u64 steps, const double* coef,
                                         u64 dim, u64 n, double* out) {
    u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    for (u64 d = 0; d < dim; ++d) {
        double s = 0.0;
        for (u64 j = 0; j < steps; ++j) s = __dadd_rn(s, __dmul_rn(q[j * n + r], coef[j * dim + d]));
        out[r * dim + d] = s;
    }
}
