// UMAP's epochs on the GPU: a thread per cell moves the cell exactly as `move_cell` in
// umap/mod.rs does on the CPU: the same schedule (f64), the same gradient formulas and clipping
// (f32), the same counter-based negative samples (`mix64`), each move applied before the next
// is computed, in the order of the cell's edges, reading the other cells' positions of the
// previous epoch (`prev`) and writing `out`. No atomics: each thread writes only its own cell
// and its own edges' state. Every operation is the CPU's, rounded the same way (the `_rn`
// intrinsics forbid fused multiply-adds): the same bits.

#define UMAP_MAX_DIMS 8

// mix64, hash3 and ln_reduce: common.cuh. fastmath.rs `pow_f32` (the short series of ln and
// exp), operation for operation and unfused, so the result has the CPU's bits.
__device__ __forceinline__ float pow_f32(float xf, float yf) {
    double e, s;
    ln_reduce((double)xf, &e, &s);
    double s2 = __dmul_rn(s, s);
    double p = __dadd_rn(1.0 / 7.0, __dmul_rn(s2, 1.0 / 9.0));
    p = __dadd_rn(1.0 / 5.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0 / 3.0, __dmul_rn(s2, p));
    p = __dadd_rn(1.0, __dmul_rn(s2, p));
    // fastmath.rs `exp_reduce`, then the series from 1/7! (`EXP_SERIES[5..]`).
    double z = __dmul_rn((double)yf, __dadd_rn(__dmul_rn(e, 0.6931471805599453),
                                               __dmul_rn(__dmul_rn(2.0, s), p)));
    z = fmin(fmax(z, -708.0), 709.0);
    const double SHIFT = 6755399441055744.0;
    double t = __dadd_rn(__dmul_rn(z, 1.4426950408889634), SHIFT);
    long long k = __double_as_longlong(t) - __double_as_longlong(SHIFT);
    double kf = __dsub_rn(t, SHIFT);
    double r = __dsub_rn(__dsub_rn(z, __dmul_rn(kf, 6.93147180369123816490e-01)),
                         __dmul_rn(kf, 1.90821492927058770002e-10));
    const double series[8] = {1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
                              1.0 / 6.0,    0.5,         1.0,         1.0};
    double q = series[0];
#pragma unroll
    for (int i = 1; i < 8; i++) q = __dadd_rn(__dmul_rn(q, r), series[i]);
    return (float)__dmul_rn(q, __longlong_as_double((long long)((u64)(k + 1023) << 52)));
}

__device__ __forceinline__ float clip4(float v) { return fminf(fmaxf(v, -4.0f), 4.0f); }

// cur[d] += clip(coeff (cur[d] - o[d])) alpha, coordinate by coordinate (the CPU's order).
template <int DIM>
__device__ __forceinline__ void umap_move(float* cur, const float* o, int dim, float coeff,
                                          float alpha) {
    const int dims = DIM > 0 ? DIM : dim;
#pragma unroll
    for (int d = 0; d < (DIM > 0 ? DIM : UMAP_MAX_DIMS); d++) {
        if (d >= dims) break;
        float g = clip4(__fmul_rn(coeff, __fsub_rn(cur[d], o[d])));
        cur[d] = __fadd_rn(cur[d], __fmul_rn(g, alpha));
    }
}

template <int DIM>
__device__ __forceinline__ float umap_d2(const float* cur, const float* o, int dim) {
    const int dims = DIM > 0 ? DIM : dim;
    float d2 = 0.0f;
#pragma unroll
    for (int d = 0; d < (DIM > 0 ? DIM : UMAP_MAX_DIMS); d++) {
        if (d >= dims) break;
        float t = __fsub_rn(cur[d], o[d]);
        d2 = __fadd_rn(d2, __fmul_rn(t, t));
    }
    return d2;
}

template <int DIM>
__device__ __forceinline__ void umap_load(float* to, const float* from, int dim) {
    const int dims = DIM > 0 ? DIM : dim;
#pragma unroll
    for (int d = 0; d < (DIM > 0 ? DIM : UMAP_MAX_DIMS); d++) {
        if (d >= dims) break;
        to[d] = from[d];
    }
}

// Gradient::attraction (a pull: d2^(b-1) as d2^b / d2) or Gradient::repulsion (a push). The
// power is formed for either kind, so that a warp's threads take the series together.
__device__ __forceinline__ float umap_coefficient(bool pull, float d2, float a, float b,
                                                  float gamma) {
    const float p = pow_f32(d2, b);
    if (!(d2 > 0.0f)) return 0.0f;
    return __fdiv_rn(pull ? __fmul_rn(__fmul_rn(-2.0f * a, b), p) : __fmul_rn(2.0f * gamma, b),
                     __fmul_rn(pull ? d2 : __fadd_rn(0.001f, d2),
                               __fadd_rn(__fmul_rn(a, p), 1.0f)));
}

// mod.rs `negative_sample`: the negative sample `p` of the edge whose key is `key`, among n cells.
__device__ __forceinline__ u64 umap_negative_sample(u64 key, u64 p, u64 n) {
    const u64 h = mix64(key + p * 0x9e3779b97f4a7c15ull);
    return ((h >> 32) * n) >> 32;
}

// An edge's negative samples due at epoch `now` (the CPU's count), its next negative epoch `nn`
// moved past them.
__device__ __forceinline__ u64 umap_negatives_due(double now, double* nn, double per_negative) {
    const double c = __ddiv_rn(__dsub_rn(now, *nn), per_negative);
    const u64 count = c > 0.0 ? (u64)c : 0;
    *nn = __dadd_rn(*nn, __dmul_rn((double)count, per_negative));
    return count;
}

// Edges whose next samples a cell reads at once when it looks for its next edge sampled now
// (fewer reads waited for one after another).
#define UMAP_SCAN 4

// Where a cell's epoch stands: its edge cursor, the pulls left toward the edge's other end `k`,
// and the edge's negative samples (`key`, the next index `p` of `count`).
struct UmapWalk {
    u64 e, row1, key, p, count;
    u32 k;
    int pulls;
};

// The cell's next move, as `move_cell` orders them: two pulls toward each edge sampled now, then
// the pushes of its negative samples that are not the cell itself. False when the epoch is done.
// Each edge's state is advanced when the edge is reached (its values do not depend on the moves).
__device__ __forceinline__ bool umap_next_move(
    UmapWalk& w, const u32* __restrict__ indices, const double* __restrict__ epochs_per_sample,
    const double* __restrict__ epochs_per_negative, double* __restrict__ next_sample,
    double* __restrict__ next_negative, u64 n, u64 epoch, int negative_samples, u64 seed, u64 j,
    u64* other, bool* pull) {
    if (w.pulls > 0) {
        --w.pulls;
        *other = w.k;
        *pull = true;
        return true;
    }
    *pull = false;
    const double e_now = (double)epoch;
    while (w.p < w.count) {
        const u64 s = umap_negative_sample(w.key, w.p++, n);
        if (s != j) {
            *other = s;
            return true;
        }
    }
    // The next edge sampled now (next sample not after this epoch), UMAP_SCAN edges at a time.
    double ns = 0.0;
    for (;;) {
        if (w.e >= w.row1) return false;
        double v[UMAP_SCAN];
#pragma unroll
        for (int i = 0; i < UMAP_SCAN; i++)
            v[i] = w.e + i < w.row1 ? next_sample[w.e + i]
                                    : __longlong_as_double(0x7ff0000000000000ll);  // +inf
        int first = UMAP_SCAN;
#pragma unroll
        for (int i = UMAP_SCAN - 1; i >= 0; i--)
            if (!(v[i] > e_now)) {
                first = i;
                ns = v[i];
            }
        w.e += first;
        if (first < UMAP_SCAN) break;
    }
    const u64 e = w.e++;
    next_sample[e] = __dadd_rn(ns, epochs_per_sample[e]);
    w.k = indices[e];
    w.pulls = 1;
    w.p = w.count = 0;
    if (negative_samples) {
        double nn = next_negative[e];
        w.count = umap_negatives_due(e_now, &nn, epochs_per_negative[e]);
        next_negative[e] = nn;
        w.key = hash3(seed, epoch, e);  // negative_key
    }
    *other = w.k;
    *pull = true;
    return true;
}

// Cell j's epoch (DIM: the coordinates known at compile time, 0: `dim` of them). One move a
// turn of the loop, whichever kind: the threads of a warp reach the gradient's arithmetic (the
// f64 power series) together, however their cells' edges and samples fall. The next move's other
// cell is read before this move's arithmetic, so that the read's latency is not on the path of
// a cell's moves one after another (a hub's path is the epoch's shortest possible time).
template <int DIM>
__device__ __forceinline__ void umap_cell(
    const u64* __restrict__ indptr, const u32* __restrict__ indices,
    const double* __restrict__ epochs_per_sample, const double* __restrict__ epochs_per_negative,
    double* __restrict__ next_sample, double* __restrict__ next_negative,
    const float* __restrict__ prev, float* __restrict__ out, u64 n, int dim, u64 epoch,
    float alpha, float a, float b, float gamma, int negative_samples, u64 seed, u64 j) {
    float cur[DIM > 0 ? DIM : UMAP_MAX_DIMS], o[DIM > 0 ? DIM : UMAP_MAX_DIMS];
    float ahead[DIM > 0 ? DIM : UMAP_MAX_DIMS];
    umap_load<DIM>(cur, prev + j * dim, dim);
    UmapWalk w = {indptr[j], indptr[j + 1], 0, 0, 0, 0, 0};
    u64 other;
    bool pull;
    bool more = umap_next_move(w, indices, epochs_per_sample, epochs_per_negative, next_sample,
                               next_negative, n, epoch, negative_samples, seed, j, &other, &pull);
    if (more) umap_load<DIM>(ahead, prev + other * dim, dim);
    while (more) {
        const bool this_pull = pull;
        umap_load<DIM>(o, ahead, dim);
        more = umap_next_move(w, indices, epochs_per_sample, epochs_per_negative, next_sample,
                              next_negative, n, epoch, negative_samples, seed, j, &other, &pull);
        if (more) umap_load<DIM>(ahead, prev + other * dim, dim);
        const float coeff = umap_coefficient(this_pull, umap_d2<DIM>(cur, o, dim), a, b, gamma);
        // A pull always moves (by zero when d2 is); a push only with a positive coefficient.
        if (this_pull || coeff > 0.0f) umap_move<DIM>(cur, o, dim, coeff, alpha);
    }
    const int dims = DIM > 0 ? DIM : dim;
    for (int d = 0; d < dims; d++) out[j * dim + d] = cur[d];
}

// One epoch, a thread per cell, the cells taken in `order` (most work first: a warp's cells end
// together).
extern "C" __global__ void umap_epoch(
    const u64* __restrict__ indptr, const u32* __restrict__ indices,
    const double* __restrict__ epochs_per_sample, const double* __restrict__ epochs_per_negative,
    double* __restrict__ next_sample, double* __restrict__ next_negative,
    const float* __restrict__ prev, float* __restrict__ out, const u32* __restrict__ order,
    u64 n, int dim, u64 epoch, float alpha, float a, float b, float gamma,
    int negative_samples, u64 seed) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const u64 j = order[t];
    if (dim == 2)
        umap_cell<2>(indptr, indices, epochs_per_sample, epochs_per_negative, next_sample,
                     next_negative, prev, out, n, dim, epoch, alpha, a, b, gamma,
                     negative_samples, seed, j);
    else
        umap_cell<0>(indptr, indices, epochs_per_sample, epochs_per_negative, next_sample,
                     next_negative, prev, out, n, dim, epoch, alpha, a, b, gamma,
                     negative_samples, seed, j);
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

// umap-learn's `transform` (ingest.rs `umap_transform`), a thread per new cell i: its start,
// its neighbours' layout weighted by their memberships `w` (k a cell, l1-normalized), then
// `n_epochs` of attraction to its neighbours and repulsion from reference cells drawn as the
// host draws them, the reference's `layout` fixed. The same operations in the same order as
// the host's: the same bits. `per_sample`, `next_sample` and `next_negative`: k a cell.
extern "C" __global__ void umap_transform(
    const float* __restrict__ layout, u64 n_ref, const u32* __restrict__ nbrs,
    const float* __restrict__ w, u64 n, u32 k, int dim, u64 n_epochs, float max_weight,
    float floor, double alpha0, double rate, float a, float b, float gamma,
    int negative_samples, u64 seed, double* __restrict__ per_sample,
    double* __restrict__ next_sample, double* __restrict__ next_negative,
    float* __restrict__ out) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || dim > UMAP_MAX_DIMS) return;
    float cur[UMAP_MAX_DIMS], o[UMAP_MAX_DIMS];
    const u32* nb = nbrs + i * k;
    const float* wi = w + i * k;
    double* ps = per_sample + i * k;
    double* next = next_sample + i * k;
    double* next_neg = next_negative + i * k;
    float total = 0.0f;
    for (u32 j = 0; j < k; ++j) total = __fadd_rn(total, wi[j]);
    for (int d = 0; d < dim; ++d) cur[d] = 0.0f;
    const double e = (double)n_epochs;
    for (u32 j = 0; j < k; ++j) {
        const float share = total > 0.0f ? __fdiv_rn(wi[j], total) : 0.0f;
        const float* y = layout + (u64)nb[j] * dim;
        for (int d = 0; d < dim; ++d) cur[d] = __fadd_rn(cur[d], __fmul_rn(share, y[d]));
        // sample_period, or dropped (-1).
        const double p = (wi[j] >= floor && wi[j] > 0.0f)
                             ? __ddiv_rn(e, __dmul_rn(e, __ddiv_rn((double)wi[j], (double)max_weight)))
                             : -1.0;
        ps[j] = p;
        next[j] = p;
        next_neg[j] = __ddiv_rn(p, rate);
    }
    for (u64 epoch = 0; epoch < n_epochs; ++epoch) {
        const float alpha = (float)__dmul_rn(alpha0, __dsub_rn(1.0, __ddiv_rn((double)epoch, e)));
        const double now = (double)epoch;
        for (u32 j = 0; j < k; ++j) {
            const double p = ps[j];
            if (p < 0.0 || next[j] > now) continue;
            umap_load<0>(o, layout + (u64)nb[j] * dim, dim);
            umap_move<0>(cur, o, dim, umap_coefficient(true, umap_d2<0>(cur, o, dim), a, b, gamma),
                         alpha);
            next[j] = __dadd_rn(next[j], p);
            if (!negative_samples) continue;
            const u64 count = umap_negatives_due(now, &next_neg[j], __ddiv_rn(p, rate));
            const u64 key = hash3(seed, epoch, i * k + j);  // negative_key
            for (u64 q = 0; q < count; ++q) {
                umap_load<0>(o, layout + umap_negative_sample(key, q, n_ref) * dim, dim);
                const float rc = umap_coefficient(false, umap_d2<0>(cur, o, dim), a, b, gamma);
                if (rc > 0.0f) umap_move<0>(cur, o, dim, rc, alpha);
            }
        }
    }
    for (int d = 0; d < dim; ++d) out[i * dim + d] = cur[d];
}
