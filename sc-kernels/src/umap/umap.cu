// UMAP's epochs on the GPU: a warp per cell computes the cell's move from the previous
// epoch's layout (`prev`) into `out`, exactly as `move_cell` in umap/mod.rs does on the CPU: the
// same schedule (f64), the same gradient formulas and clipping (f32), the same counter-based
// negative samples (`mix64`), and the moves summed in the order of the cell's edges. No atomics:
// each warp writes only its own cell and its own edges' state. Every operation is the CPU's,
// rounded the same way (the `_rn` intrinsics forbid fused multiply-adds): the same bits.

#define UMAP_MAX_DIMS 8

// mix64, hash3 and ln_pos: common.cuh. fastmath.rs `exp_f64` and `pow_f32`, operation for
// operation and unfused, so the result has the CPU's bits.

__device__ __forceinline__ double exp_f64(double x) {
    x = fmin(fmax(x, -708.0), 709.0);
    const double SHIFT = 6755399441055744.0;
    double t = __dadd_rn(__dmul_rn(x, 1.4426950408889634), SHIFT);
    long long k = __double_as_longlong(t) - __double_as_longlong(SHIFT);
    double kf = __dsub_rn(t, SHIFT);
    double r = __dsub_rn(__dsub_rn(x, __dmul_rn(kf, 6.93147180369123816490e-01)),
                         __dmul_rn(kf, 1.90821492927058770002e-10));
    double p = 1.0 / 479001600.0;
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 39916800.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 3628800.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 362880.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 40320.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 5040.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 720.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 120.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 24.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0 / 6.0);
    p = __dadd_rn(__dmul_rn(p, r), 0.5);
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    p = __dadd_rn(__dmul_rn(p, r), 1.0);
    return __dmul_rn(p, __longlong_as_double((long long)((u64)(k + 1023) << 52)));
}

__device__ __forceinline__ float pow_f32(float x, float y) {
    return (float)exp_f64(__dmul_rn((double)y, ln_pos((double)x)));
}

__device__ __forceinline__ float clip4(float v) { return fminf(fmaxf(v, -4.0f), 4.0f); }

#define UMAP_WARPS 8    // cells per block, a warp each
#define UMAP_TERMS 128  // moves buffered per warp before they are summed

// The attraction along edge (j, k): 2 clip(coeff (cur - prev_k)) alpha per coordinate.
__device__ __forceinline__ void umap_attraction(const float* cur, const float* pk, int dim,
                                                float alpha, float a, float b, float* out) {
    float d2 = 0.0f;
    for (int d = 0; d < dim; d++) {
        float t = __fsub_rn(cur[d], pk[d]);
        d2 = __fadd_rn(d2, __fmul_rn(t, t));
    }
    float coeff = 0.0f;
    if (d2 > 0.0f) {
        coeff = __fdiv_rn(__fmul_rn(__fmul_rn(-2.0f * a, b), pow_f32(d2, __fsub_rn(b, 1.0f))),
                          __fadd_rn(__fmul_rn(a, pow_f32(d2, b)), 1.0f));
    }
    for (int d = 0; d < dim; d++) {
        float g = clip4(__fmul_rn(coeff, __fsub_rn(cur[d], pk[d])));
        out[d] = __fmul_rn(__fmul_rn(2.0f, g), alpha);
    }
}

// The push of negative sample s: clip(rc (cur - prev_s)) alpha per coordinate; false when
// nothing is added (at the same place, or a zero coefficient).
__device__ __forceinline__ bool umap_repulsion(const float* cur, const float* ps, int dim,
                                               float alpha, float a, float b, float gamma,
                                               float* out) {
    float r2 = 0.0f;
    for (int d = 0; d < dim; d++) {
        float t = __fsub_rn(cur[d], ps[d]);
        r2 = __fadd_rn(r2, __fmul_rn(t, t));
    }
    if (!(r2 > 0.0f)) return false;
    float rc = __fdiv_rn(__fmul_rn(2.0f * gamma, b),
                         __fmul_rn(__fadd_rn(0.001f, r2), __fadd_rn(__fmul_rn(a, pow_f32(r2, b)), 1.0f)));
    if (!(rc > 0.0f)) return false;
    for (int d = 0; d < dim; d++) {
        float g = clip4(__fmul_rn(rc, __fsub_rn(cur[d], ps[d])));
        out[d] = __fmul_rn(g, alpha);
    }
    return true;
}

// One epoch, a warp per cell j. The lanes take 32 of its edges at a time: each decides whether
// its edge is sampled now and how many negative samples it draws, and advances the edge's
// schedule; the moves of those edges (the attraction, then each negative sample's push, edge
// by edge: the CPU's order) are numbered by a prefix sum and computed by the lanes in turn into
// shared memory; then lane d adds coordinate d's moves in that order. Every move is the CPU's
// operation for operation, and the sum runs in its order: the same bits.
extern "C" __global__ void __launch_bounds__(UMAP_WARPS * 32) umap_epoch(
    const u64* __restrict__ indptr, const u32* __restrict__ indices,
    const double* __restrict__ epochs_per_sample, const double* __restrict__ epochs_per_negative,
    double* __restrict__ next_sample, double* __restrict__ next_negative,
    const float* __restrict__ prev, float* __restrict__ out,
    u64 n, int dim, u64 epoch, float alpha, float a, float b, float gamma,
    int negative_samples, u64 seed) {
    __shared__ float moves[UMAP_WARPS][UMAP_TERMS][UMAP_MAX_DIMS];
    __shared__ unsigned char added[UMAP_WARPS][UMAP_TERMS];
    __shared__ u32 first[UMAP_WARPS][33];   // the lanes' first move; [32]: the moves in all
    __shared__ u32 other[UMAP_WARPS][32];   // the lanes' edge ends
    const u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const u64 j = (u64)blockIdx.x * UMAP_WARPS + w;
    if (j >= n) return;
    float cur[UMAP_MAX_DIMS];
    for (int d = 0; d < dim; d++) cur[d] = prev[j * dim + d];
    float delta = 0.0f;  // lane d < dim: coordinate d's sum
    const double e_now = (double)epoch;
    const u64 row1 = indptr[j + 1];
    for (u64 base = indptr[j]; base < row1; base += 32) {
        const u64 e = base + lane;
        u32 moves_here = 0;
        if (e < row1 && !(next_sample[e] > e_now)) {
            moves_here = 1;
            next_sample[e] = __dadd_rn(next_sample[e], epochs_per_sample[e]);
            if (negative_samples) {
                double c = __ddiv_rn(__dsub_rn(e_now, next_negative[e]), epochs_per_negative[e]);
                u64 count = c > 0.0 ? (u64)c : 0;
                next_negative[e] = __dadd_rn(next_negative[e], __dmul_rn((double)count, epochs_per_negative[e]));
                moves_here += (u32)count;
            }
            other[w][lane] = indices[e];
        }
        u32 upto = moves_here;  // inclusive prefix sum over the lanes
        for (u32 o = 1; o < 32; o <<= 1) {
            u32 v = __shfl_up_sync(FULL_MASK, upto, o);
            if (lane >= o) upto += v;
        }
        first[w][lane] = upto - moves_here;
        if (lane == 31) first[w][32] = upto;
        __syncwarp();
        const u32 total = first[w][32];
        for (u32 t0 = 0; t0 < total; t0 += UMAP_TERMS) {
            const u32 t1 = min(total, t0 + UMAP_TERMS);
            for (u32 t = t0 + lane; t < t1; t += 32) {
                // The lane whose moves hold t: the last with first <= t.
                u32 lo = 0, hi = 31;
                while (lo < hi) {
                    u32 mid = (lo + hi + 1) >> 1;
                    if (first[w][mid] <= t) lo = mid; else hi = mid - 1;
                }
                const u32 sub = t - first[w][lo];
                float* m = moves[w][t - t0];
                if (sub == 0) {
                    umap_attraction(cur, prev + (u64)other[w][lo] * dim, dim, alpha, a, b, m);
                    added[w][t - t0] = 1;
                } else {
                    const u64 edge = base + lo, p = sub - 1;
                    u64 h = mix64(hash3(seed, epoch, edge) + p * 0x9e3779b97f4a7c15ull);
                    u64 s = ((h >> 32) * n) >> 32;
                    added[w][t - t0] =
                        s != j && umap_repulsion(cur, prev + s * dim, dim, alpha, a, b, gamma, m);
                }
            }
            __syncwarp();
            if (lane < (u32)dim)
                for (u32 t = 0; t < t1 - t0; ++t)
                    if (added[w][t]) delta = __fadd_rn(delta, moves[w][t][lane]);
            __syncwarp();
        }
        __syncwarp();  // every lane has read this chunk's `first` and `other`
    }
    if (lane < (u32)dim) out[j * dim + lane] = __fadd_rn(cur[lane], delta);
}

// Each kept edge's period in epochs and its negative samples' (Schedule::epochs_per_sample,
// the same operations in the same order), and the epochs of their first samples.
extern "C" __global__ void umap_periods(const float* __restrict__ w, u64 nnz, double n_epochs,
                                        float max_weight, double rate,
                                        double* __restrict__ per_sample,
                                        double* __restrict__ per_negative,
                                        double* __restrict__ next_sample,
                                        double* __restrict__ next_negative) {
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < nnz;
         e += (u64)gridDim.x * blockDim.x) {
        double p = __ddiv_rn(n_epochs, __dmul_rn(n_epochs, __ddiv_rn((double)w[e], (double)max_weight)));
        double q = __ddiv_rn(p, rate);
        per_sample[e] = p;
        next_sample[e] = p;
        per_negative[e] = q;
        next_negative[e] = q;
    }
}

// The spectral start's Lanczos vectors on the GPU (spectral_gpu.rs): each kernel sums in the
// order of spectral.rs's host code, rounded the same way (`_rn`: no fused multiply-adds), so
// the start equals the host's bit for bit. Vectors are columns of `n` doubles; sums run in
// blocks of `rows` and start from -0.0 as Rust's `f64::sum` does.

// y = D^-1/2 A D^-1/2 x: per row, each entry's w x[u] / sqrt_d[u] summed in entry order, then
// divided by the row's sqrt_d.
extern "C" __global__ void spectral_apply(const u64* indptr, const u32* indices, const float* w,
                                          const double* sqrt_d, const double* x, double* y,
                                          u64 n) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    double s = -0.0;
    for (u64 p = indptr[v]; p < indptr[v + 1]; ++p) {
        u32 u = indices[p];
        s = __dadd_rn(s, __ddiv_rn(__dmul_rn((double)w[p], x[u]), sqrt_d[u]));
    }
    y[v] = __ddiv_rn(s, sqrt_d[v]);
}

// partial[b * n_blocks + c] = sum over block c of q_b[r] x[r], for b < k (one thread each).
extern "C" __global__ void spectral_block_dots(const double* q, u64 k, const double* x, u64 n,
                                               u64 rows, double* partial) {
    u64 n_blocks = (n + rows - 1) / rows;
    u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k * n_blocks) return;
    u64 b = t / n_blocks, c = t % n_blocks;
    const double* qb = q + b * n;
    u64 end = min(n, (c + 1) * rows);
    double s = -0.0;
    for (u64 r = c * rows; r < end; ++r) s = __dadd_rn(s, __dmul_rn(qb[r], x[r]));
    partial[t] = s;
}

// coeffs[b] = the blocks' sums of vector b added in block order (one thread each).
extern "C" __global__ void spectral_block_sums(const double* partial, u64 k, u64 n_blocks,
                                               double* coeffs) {
    u64 b = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= k) return;
    double s = -0.0;
    for (u64 c = 0; c < n_blocks; ++c) s = __dadd_rn(s, partial[b * n_blocks + c]);
    coeffs[b] = s;
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
