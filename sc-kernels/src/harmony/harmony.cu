// harmony on the GPU (see harmony/gpu.rs for the flow and the CPU code each kernel mirrors).
// Row kernels use one warp per row (cell); K (clusters) <= 32 * MAXJ. Per-batch column sums of
// R are accumulated in f32 shared memory per block when B * K <= SMALL_BK (then added to the f64
// totals with one atomic per entry), else straight into the f64 totals.

#define MAXJ 16
#define SMALL_BK 5120
// local_of's mark for a cell another rank holds (mod.rs: NOT_HERE).
#define NOT_HERE 0xffffffffu

#define WARP_ROWS(n) \
    u64 warps_total = ((u64)gridDim.x * blockDim.x) >> 5; \
    u32 lane = threadIdx.x & 31; \
    for (u64 r = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; r < (n); r += warps_total)

__device__ __forceinline__ float warp_sum_f32(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max_f32(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// exp and x ln x in f32 (the CPU evaluates them in f64 and rounds: the results differ by an ulp
// or two, inside the GPU-vs-CPU tolerance). libdevice's f64 exp and log, inlined into the
// unrolled per-lane loops, made NVRTC take seconds to compile the module and cost registers.
__device__ __forceinline__ float exp_f32(float z) { return expf(z); }
__device__ __forceinline__ double xlogx(float o) { return (double)o * (double)logf(o); }

// ---- the keyed permutation of rng.rs (permuted_index), bit for bit ----

__device__ __forceinline__ u32 round_hash(u32 r, u32 key) {
    u32 h = (r * 0x9e3779b1u) ^ key;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

__device__ u32 permuted_index(u32 i, u32 n, u32 half_bits, u32 k0, u32 k1, u32 k2, u32 k3) {
    u32 mask = (1u << half_bits) - 1u;
    u32 x = i;
    for (;;) {
        u32 l = x >> half_bits, r = x & mask, t;
        t = l ^ (round_hash(r, k0) & mask); l = r; r = t;
        t = l ^ (round_hash(r, k1) & mask); l = r; r = t;
        t = l ^ (round_hash(r, k2) & mask); l = r; r = t;
        t = l ^ (round_hash(r, k3) & mask); l = r; r = t;
        x = (l << half_bits) | r;
        if (x < n) return x;
    }
}

// ---- rows ----

// dst[i] = src[order[i]] (rows of d values).
extern "C" __global__ void gather_rows(const float* src, const u32* order, u64 n, u32 d, float* dst) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n * d; e += stride) {
        u64 i = e / d, j = e % d;
        dst[e] = src[(u64)order[i] * d + j];
    }
}

// dst[order[i]] = src[i].
extern "C" __global__ void scatter_rows(const float* src, const u32* order, u64 n, u32 d, float* dst) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n * d; e += stride) {
        u64 i = e / d, j = e % d;
        dst[(u64)order[i] * d + j] = src[e];
    }
}

extern "C" __global__ void copy_f32(const float* src, u64 len, float* dst) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < len; e += stride) dst[e] = src[e];
}

// Rows scaled to unit length: the norm in f64, then v * (float)(1 / norm); a zero row stays zero
// (normalize_row).
extern "C" __global__ void unit_rows(const float* src, u64 n, u32 d, float* dst) {
    WARP_ROWS(n) {
        const float* s = src + r * d;
        double acc = 0.0;
        for (u32 j = lane; j < d; j += 32) {
            double v = (double)s[j];
            acc += v * v;
        }
        acc = warp_sum_f64(acc);
        acc = __shfl_sync(FULL_MASK, acc, 0);
        float inv = acc > 0.0 ? (float)(1.0 / sqrt(acc)) : 1.0f;
        for (u32 j = lane; j < d; j += 32) dst[r * d + j] = s[j] * inv;
    }
}

// ---- k-means (kmeans.rs: assign / lloyd) ----

// |c_k|^2 in f32.
extern "C" __global__ void centroid_norms(const float* c, u32 k, u32 d, float* norms) {
    u32 t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k) return;
    float s = 0.0f;
    for (u32 j = 0; j < d; j++) s += c[(u64)t * d + j] * c[(u64)t * d + j];
    norms[t] = s;
}

// Nearest centroid by |c|^2 - 2 z.c (ties to the lower index) from dots = Zn C^T; writes the
// label, the row of the one-hot matrix, the cluster's count, and counts changed labels.
extern "C" __global__ void kmeans_assign(const float* dots, const float* norms, u64 n, u32 k,
                                         u32* labels, float* onehot, u32* counts, u32* changed) {
    WARP_ROWS(n) {
        const float* row = dots + r * k;
        float best = __int_as_float(0x7f800000);
        u32 bi = 0xffffffffu;
        for (u32 c = lane; c < k; c += 32) {
            float v = norms[c] - 2.0f * row[c];
            if (v < best) { best = v; bi = c; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(FULL_MASK, best, o);
            u32 oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (ov < best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        }
        if (bi == 0xffffffffu) bi = 0;  // every value NaN: cannot happen for finite input
        for (u32 c = lane; c < k; c += 32) onehot[r * k + c] = (c == bi) ? 1.0f : 0.0f;
        if (lane == 0) {
            if (labels[r] != bi) atomicAdd(changed, 1u);
            labels[r] = bi;
            atomicAdd(&counts[bi], 1u);
        }
    }
}

// c_k = sums_k / counts_k where the cluster has rows; an empty cluster keeps its centroid.
extern "C" __global__ void kmeans_update(const float* sums, const u32* counts, u32 k, u32 d, float* c) {
    u32 e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= k * d) return;
    u32 cnt = counts[e / d];
    if (cnt > 0) c[e] = (float)((double)sums[e] / (double)cnt);
}

// ---- soft assignments (cluster.rs: soft_row) ----

// One warp computes a cell's row: out_k ∝ exp(scale (s_k - max s)) pen_k, normalized; returns
// (through err, ent, lane-partial) sum out 2 (1 - s) and sum out ln out. pen(j, c): the
// penalty of cluster c = lane + 32 j (1 for none: multiplying by 1 is exact).
template <typename Pen>
__device__ __forceinline__ void soft_row(const float* s, Pen pen, u32 k, float scale, u32 lane,
                                         float* out, float* vals, double* err, double* ent) {
    float sv[MAXJ];
    float mx = (-__int_as_float(0x7f800000));
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        u32 c = lane + 32 * j;
        sv[j] = c < k ? s[c] : (-__int_as_float(0x7f800000));
        mx = fmaxf(mx, sv[j]);
    }
    mx = warp_max_f32(mx);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        u32 c = lane + 32 * j;
        float v = 0.0f;
        if (c < k) v = exp_f32(scale * (sv[j] - mx)) * pen(j, c);
        vals[j] = v;
        sum += v;
    }
    sum = warp_sum_f32(sum);
    float inv = 1.0f / sum;
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        u32 c = lane + 32 * j;
        if (c < k) {
            float o = vals[j] * inv;
            vals[j] = o;
            out[c] = o;
            *err += (double)o * 2.0 * (1.0 - (double)sv[j]);
            if (o > 0.0f) *ent += xlogx(o);
        }
    }
}

// Adds a row's values (vals, lane-strided) to batch b's sums: shared f32 partials or the f64
// totals directly.
__device__ __forceinline__ void add_row(const float* vals, u32 b, u32 k, u32 lane, u32 small,
                                        float* part, double* total, double sign) {
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        u32 c = lane + 32 * j;
        if (c < k) {
            if (small) atomicAdd(&part[b * k + c], vals[j]);
            else atomicAdd(&total[b * k + c], sign * (double)vals[j]);
        }
    }
}

__device__ __forceinline__ void flush_part(const float* part, u32 bk, double* total, double sign) {
    for (u32 e = threadIdx.x; e < bk; e += blockDim.x) {
        float v = part[e];
        if (v != 0.0f) atomicAdd(&total[e], sign * (double)v);
    }
}

__device__ __forceinline__ void add_objective(double err, double ent, double* obj) {
    __shared__ double scratch[32];
    double a = block_sum_f64(err, scratch);
    __syncthreads();
    double b = block_sum_f64(ent, scratch);
    if (threadIdx.x == 0) {
        atomicAdd(&obj[0], a);
        atomicAdd(&obj[1], b);
    }
}

// The initial assignments (no penalty) of all cells from sim = Zn Yn^T; O += per-batch sums;
// obj[0], obj[1] += k-means error and sum R ln R.
extern "C" __global__ void soft_init(const float* sim, const u32* batch_of, u64 n, u32 k, u32 nb,
                                     float scale, u32 small, float* R, double* O, double* obj) {
    extern __shared__ float part[];
    u32 bk = nb * k;
    if (small)
        for (u32 e = threadIdx.x; e < bk; e += blockDim.x) part[e] = 0.0f;
    __syncthreads();
    double err = 0.0, ent = 0.0;
    float vals[MAXJ];
    WARP_ROWS(n) {
        soft_row(sim + r * k, [](int, u32) { return 1.0f; }, k, scale, lane, R + r * k, vals, &err,
                 &ent);
        add_row(vals, batch_of[r], k, lane, small, part, O, 1.0);
    }
    __syncthreads();
    if (small) flush_part(part, bk, O, 1.0);
    add_objective(err, ent, obj);
}

// Block step 1: the cells at positions p0 .. p0 + bs of the keyed order (over all n cells) go
// to `cells` as local rows (NOT_HERE for cells another rank holds); their current rows leave
// `target`. One GPU (fold = 1): target is O, and thread block 0 first adds the previous step's
// new rows (delta) into O. Split across ranks (fold = 0): target is delta, which the host sums
// over the ranks and fold_delta adds to O.
extern "C" __global__ void block_remove(u64 p0, u32 bs, u32 n, u32 half_bits, u32 k0, u32 k1,
                                        u32 k2, u32 k3,
                                        const float* R, const u32* batch_of, u32 k, u32 nb,
                                        u32 small, const u32* local_of, u32 fold, u32* cells,
                                        double* target, double* delta) {
    extern __shared__ float part[];
    u32 bk = nb * k;
    if (fold && blockIdx.x == 0)
        for (u32 e = threadIdx.x; e < bk; e += blockDim.x) {
            double v = delta[e];
            if (v != 0.0) {
                atomicAdd(&target[e], v);
                delta[e] = 0.0;
            }
        }
    if (small)
        for (u32 e = threadIdx.x; e < bk; e += blockDim.x) part[e] = 0.0f;
    __syncthreads();
    WARP_ROWS(bs) {
        u32 cell = local_of[permuted_index((u32)(p0 + r), n, half_bits, k0, k1, k2, k3)];
        if (lane == 0) cells[r] = cell;
        if (cell == NOT_HERE) continue;
        u32 b = batch_of[cell];
        const float* row = R + (u64)cell * k;
        float vals[MAXJ];
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            u32 c = lane + 32 * j;
            vals[j] = c < k ? row[c] : 0.0f;
        }
        add_row(vals, b, k, lane, small, part, target, -1.0);
    }
    __syncthreads();
    if (small) flush_part(part, bk, target, -1.0);
}
// O += delta, delta = 0 (a split run's block, after delta was summed over the ranks).
extern "C" __global__ void fold_delta(u32 bk, double* O, double* delta) {
    for (u32 e = blockIdx.x * blockDim.x + threadIdx.x; e < bk; e += gridDim.x * blockDim.x) {
        O[e] += delta[e];
        delta[e] = 0.0;
    }
}

// The diversity penalty of batch b, cluster c (cluster.rs / mod.rs: penalty), in f64.
__device__ __noinline__ float penalty_of(const double* O, const double* S, const double* pr_b,
                                            const double* theta, u32 b, u32 c, u32 k, u32 flavor2) {
    double o = O[b * k + c];
    double e = pr_b[b] * S[c];
    double den = flavor2 ? o + e + 1.0 : o + 1.0;
    return (float)pow((e + 1.0) / den, theta[b]);
}

// Block step 2: the new rows of the block's cells with the penalty of the current O (the block's
// old rows removed); the new rows go to delta (O is read by every block of this launch, so it
// stays unchanged here); obj += their k-means error and entropy terms.
extern "C" __global__ void block_update(const u32* cells, u32 bs, const float* sim,
                                        const u32* batch_of, u32 k, u32 nb, u32 small,
                                        const double* O, const double* pr_b, const double* theta,
                                        u32 flavor2, float scale, float* R, double* delta,
                                        double* obj) {
    extern __shared__ double S[];  // k values, then (small) penalty and partial sums
    float* pen = (float*)(S + k);
    float* part = pen + nb * k;
    u32 bk = nb * k;
    for (u32 c = threadIdx.x; c < k; c += blockDim.x) {
        double s = 0.0;
        for (u32 b = 0; b < nb; b++) s += O[b * k + c];
        S[c] = s;
    }
    __syncthreads();
    if (small)
        for (u32 e = threadIdx.x; e < bk; e += blockDim.x) {
            pen[e] = penalty_of(O, S, pr_b, theta, e / k, e % k, k, flavor2);
            part[e] = 0.0f;
        }
    __syncthreads();
    double err = 0.0, ent = 0.0;
    float vals[MAXJ];
    WARP_ROWS(bs) {
        u32 cell = cells[r];
        if (cell == NOT_HERE) continue;
        u32 b = batch_of[cell];
        if (small) {
            const float* pb = pen + b * k;
            soft_row(sim + (u64)cell * k, [&](int, u32 c) { return pb[c]; }, k, scale, lane,
                     R + (u64)cell * k, vals, &err, &ent);
        } else {
            // Many batches: the penalty row of this cell's batch, computed here.
            float prow[MAXJ];
#pragma unroll
            for (int j = 0; j < MAXJ; j++) {
                u32 c = lane + 32 * j;
                prow[j] = c < k ? penalty_of(O, S, pr_b, theta, b, c, k, flavor2) : 0.0f;
            }
            soft_row(sim + (u64)cell * k, [&](int j, u32) { return prow[j]; }, k, scale, lane,
                     R + (u64)cell * k, vals, &err, &ent);
        }
        add_row(vals, b, k, lane, small, part, delta, 1.0);
    }
    __syncthreads();
    if (small) flush_part(part, bk, delta, 1.0);
    add_objective(err, ent, obj);
}

// End of a clustering iteration (one block): O += delta, delta = 0; out = obj[0] + sigma obj[1]
// + sigma sum theta_b O ln(...) (mod.rs: diversity); obj = 0 for the next iteration.
extern "C" __global__ void finish_iteration(u32 k, u32 nb, double* O, double* delta,
                                            const double* pr_b, const double* theta, double sigma,
                                            u32 flavor2, double* obj, double* out) {
    __shared__ double scratch[32];
    u32 bk = nb * k;
    for (u32 e = threadIdx.x; e < bk; e += blockDim.x) {
        O[e] += delta[e];
        delta[e] = 0.0;
    }
    __syncthreads();
    double acc = 0.0;
    for (u32 e = threadIdx.x; e < bk; e += blockDim.x) {
        u32 b = e / k, c = e % k;
        double s = 0.0;
        for (u32 bb = 0; bb < nb; bb++) s += O[bb * k + c];
        double ex = pr_b[b] * s;
        double o = O[e];
        double numer = flavor2 ? o + ex + 1.0 : o + 1.0;
        acc += theta[b] * o * log(numer / (ex + 1.0));
    }
    acc = block_sum_f64(acc, scratch);
    if (threadIdx.x == 0) {
        *out = obj[0] + sigma * obj[1] + sigma * acc;
        obj[0] = 0.0;
        obj[1] = 0.0;
    }
}
