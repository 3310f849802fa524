// The logistic regression's objective in the genes' coordinates on the device (logreg/gpu.rs):
// theta = [W (genes x k, gene-major), b (k)], k <= 64 score rows (1: binary). A lane holds
// score rows lane and lane + 32; a row's stored values are loaded 32 at a time, coalesced, and
// handed along the warp by shuffles, HALF of them at a time with all their loads in flight.
// Each sum runs in storage order as the host's (logreg/mod.rs); the exponentials and logarithms
// are CUDA's, so the values agree with the host's to rounding, not bit for bit.

#define HALF 16  // values whose loads are in flight at once

// A warp's walk of one CSR row (stored entries a..e): acc0 += v table[c * k + lane] and acc1 +=
// v table[c * k + lane + 32] over its stored (c, v) in storage order, for the score rows the
// lane holds (lane < k, lane + 32 < k). The scores read W's rows (table = theta, a cell's
// genes); the gradient reads the residuals (table = resid, a gene's cells).
__device__ __forceinline__ void warp_row_products(const u32* indices, const float* data, u64 a,
                                                  u64 e, const double* table, u32 k, u32 lane,
                                                  double& acc0, double& acc1) {
    const bool own0 = lane < k, own1 = lane + 32 < k;
    for (u64 q0 = a; q0 < e; q0 += 32) {
        const u32 count = (u32)min((u64)32, e - q0);
        const u32 cl = lane < count ? indices[q0 + lane] : 0;
        const double vl = lane < count ? (double)data[q0 + lane] : 0.0;
        for (u32 h = 0; h < 32; h += HALF) {
            double t0[HALF], t1[HALF];
#pragma unroll
            for (u32 t = 0; t < HALF; ++t) {
                const u64 c = __shfl_sync(FULL_MASK, cl, h + t);
                t0[t] = own0 && h + t < count ? table[c * k + lane] : 0.0;
                t1[t] = own1 && h + t < count ? table[c * k + lane + 32] : 0.0;
            }
#pragma unroll
            for (u32 t = 0; t < HALF; ++t) {
                const double v = __shfl_sync(FULL_MASK, vl, h + t);
                if (h + t < count) {
                    acc0 = __dadd_rn(acc0, __dmul_rn(v, t0[t]));
                    acc1 = __dadd_rn(acc1, __dmul_rn(v, t1[t]));
                }
            }
        }
    }
}

// Per cell i (a warp each): the scores z = b + sum over its stored (j, v) of v W[j], replaced
// by the loss's derivative in z (resid[i * k ..]), and the loss (loss[i]): binary, one score
// for group 1, log(1 + e^z) - [y = 1] z and sigmoid(z) - [y = 1]; multinomial,
// logsumexp(z) - z_y and softmax(z) - onehot(y).
extern "C" __global__ void logreg_scores(const u64* indptr, const u32* indices, const float* data,
                                         u64 n, const double* theta, u64 p, u32 k,
                                         const u32* groups, double* resid, double* loss) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    const double* b = theta + p * k;
    const bool own0 = lane < k, own1 = lane + 32 < k;
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < n; i += warps) {
        double z0 = own0 ? b[lane] : 0.0, z1 = own1 ? b[lane + 32] : 0.0;
        warp_row_products(indices, data, indptr[i], indptr[i + 1], theta, k, lane, z0, z1);
        const u32 y = groups[i];
        if (k == 1) {
            if (lane == 0) {
                const double t = y == 1 ? 1.0 : 0.0;
                const double softplus = fmax(z0, 0.0) + log1p(exp(-fabs(z0)));
                resid[i] = 1.0 / (1.0 + exp(-z0)) - t;
                loss[i] = softplus - t * z0;
            }
            continue;
        }
        const double neg_inf = __longlong_as_double((long long)0xfff0000000000000ull);
        double top = fmax(own0 ? z0 : neg_inf, own1 ? z1 : neg_inf);
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) top = fmax(top, __shfl_xor_sync(FULL_MASK, top, o));
        const double e0 = own0 ? exp(z0 - top) : 0.0, e1 = own1 ? exp(z1 - top) : 0.0;
        double sum = 0.0;  // in score order, as the host's
        for (u32 r = 0; r < k; ++r) {
            const double er = __shfl_sync(FULL_MASK, r < 32 ? e0 : e1, r & 31);
            sum += er;
        }
        const double lse = top + log(sum);
        const double zy = __shfl_sync(FULL_MASK, y < 32 ? z0 : z1, y & 31);
        if (own0) resid[i * k + lane] = exp(z0 - lse) - (lane == y ? 1.0 : 0.0);
        if (own1) resid[i * k + lane + 32] = exp(z1 - lse) - (lane + 32 == y ? 1.0 : 0.0);
        if (lane == 0) loss[i] = lse - zy;
    }
}

// Per gene j (a warp each): grad[j * k + r] = sum over the gene's stored (i, v), in cell order,
// of v resid[i * k + r], plus W[j][r] / C.
extern "C" __global__ void logreg_gene_grad(const u64* indptr, const u32* indices,
                                            const float* data, u64 p, const double* resid,
                                            const double* theta, u32 k, double inverse_c,
                                            double* grad) {
    const u32 lane = threadIdx.x & 31;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    const bool own0 = lane < k, own1 = lane + 32 < k;
    for (u64 j = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; j < p; j += warps) {
        double g0 = 0.0, g1 = 0.0;
        warp_row_products(indices, data, indptr[j], indptr[j + 1], resid, k, lane, g0, g1);
        if (own0) grad[j * k + lane] = __dadd_rn(g0, __dmul_rn(theta[j * k + lane], inverse_c));
        if (own1) grad[j * k + lane + 32] = __dadd_rn(g1, __dmul_rn(theta[j * k + lane + 32], inverse_c));
    }
}

// The loss's curvature per score of cell i (its residuals resid, group y): the probability q
// (residual plus the group's indicator) times 1 - q.
__device__ double curvature(double resid, u32 r, u32 k, u32 y) {
    const double q = resid + ((k == 1 ? y == 1 : r == y) ? 1.0 : 0.0);
    return q * (1.0 - q);
}

// Per chunk c (of count from first_chunk on, chunk_rows cells each), one thread per sum s <
// 2k + 1: the chunk's residuals of score s (s < k), its losses (s = k), its curvatures of score
// s - k - 1; each in cell order from 0: partial[c * (2k + 1) + s].
extern "C" __global__ void logreg_partials(const double* resid, const double* loss,
                                           const u32* groups, u64 n, u32 k, u64 chunk_rows,
                                           u64 first_chunk, u64 count, double* partial) {
    const u32 len = 2 * k + 1;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < count * len; t += (u64)gridDim.x * blockDim.x) {
        const u64 c = t / len;
        const u32 s = (u32)(t % len);
        const u64 r0 = (first_chunk + c) * chunk_rows, r1 = min(r0 + chunk_rows, n);
        double acc = 0.0;
        for (u64 i = r0; i < r1; ++i) {
            if (s < k) acc += resid[i * k + s];
            else if (s == k) acc += loss[i];
            else acc += curvature(resid[i * k + s - k - 1], s - k - 1, k, groups[i]);
        }
        partial[c * len + s] = acc;
    }
}

// out[m * k + r] = the curvature of score r of cell cells[m] (the landmarks').
extern "C" __global__ void logreg_landmark_curvature(const double* resid, const u32* groups,
                                                     const u64* cells, u64 m, u32 k, double* out) {
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < m * k; t += (u64)gridDim.x * blockDim.x) {
        const u64 i = cells[t / k];
        const u32 r = (u32)(t % k);
        out[t] = curvature(resid[i * k + r], r, k, groups[i]);
    }
}
