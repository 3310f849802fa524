// UMAP connectivities and scanpy distances (see gpu.rs beside this file for the plan).

// Sum of the kNN distances in f64 (for the mean distance); one value per block, summed by the host.
extern "C" __global__ void sum_f32_as_f64(const float* __restrict__ v, u64 len,
                                          double* __restrict__ partial) {
    __shared__ double scratch[32];
    double s = 0.0;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < len;
         t += (u64)gridDim.x * blockDim.x)
        s += (double)v[t];
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__device__ __forceinline__ float exp_f32(float z) { return (float)exp((double)z); }

// umap's smooth_knn_dist per cell (the CPU's `smooth_row`, same f32 steps), then the membership
// strengths w[i * k + t] (0 for the cell itself).
extern "C" __global__ void smooth_knn(const u32* __restrict__ idx, const float* __restrict__ dist,
                                      u64 n, u32 k, double local_connectivity, double target,
                                      float mean_all, float* __restrict__ sigmas,
                                      float* __restrict__ rhos, float* __restrict__ w) {
    const int N_ITER = 64;
    const double TOL = 1e-5;
    const float MIN_K_DIST_SCALE = 1e-3f;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float* di = dist + i * k;
        // rho: the local_connectivity-th non-zero distance (interpolated).
        u32 nnz = 0;
        float maxnz = -3.402823466e38f;
        for (u32 t = 0; t < k; ++t)
            if (di[t] > 0.0f) {
                ++nnz;
                maxnz = fmaxf(maxnz, di[t]);
            }
        float rho = 0.0f;
        if ((double)nnz >= local_connectivity) {
            u32 index = (u32)floor(local_connectivity);
            float interp = (float)(local_connectivity - (double)index);
            // nz[m] = the m-th non-zero distance in row order
            float prev = 0.0f, cur = 0.0f;
            u32 seen = 0;
            for (u32 t = 0; t < k; ++t)
                if (di[t] > 0.0f) {
                    if (index > 0 && seen == index - 1) prev = di[t];
                    if (seen == index) cur = di[t];
                    ++seen;
                }
            if (index > 0) {
                rho = prev;
                if ((double)interp > TOL) rho = __fadd_rn(rho, __fmul_rn(interp, __fsub_rn(cur, prev)));
            } else {
                rho = __fmul_rn(interp, cur);
            }
        } else if (nnz > 0) {
            rho = maxnz;
        }
        float lo = 0.0f, hi = 3.402823466e38f, mid = 1.0f;
        for (int it = 0; it < N_ITER; ++it) {
            float psum = 0.0f;
            for (u32 t = 1; t < k; ++t) {
                float dd = __fsub_rn(di[t], rho);
                psum = __fadd_rn(psum, dd > 0.0f ? (dd / mid > 87.0f ? 0.0f : exp_f32(-(dd / mid))) : 1.0f);
            }
            if (fabs((double)psum - target) < TOL) break;
            if ((double)psum > target) {
                hi = mid;
                mid = (float)(((double)lo + (double)hi) / 2.0);
            } else {
                lo = mid;
                if (hi >= 3.402823466e38f) mid = __fmul_rn(mid, 2.0f);
                else mid = (float)(((double)lo + (double)hi) / 2.0);
            }
        }
        float sigma = mid;
        if (rho > 0.0f) {
            double s = 0.0;
            for (u32 t = 0; t < k; ++t) s += (double)di[t];
            float mean_i = (float)(s / (double)k);
            if (sigma < __fmul_rn(MIN_K_DIST_SCALE, mean_i)) sigma = __fmul_rn(MIN_K_DIST_SCALE, mean_i);
        } else if (sigma < __fmul_rn(MIN_K_DIST_SCALE, mean_all)) {
            sigma = __fmul_rn(MIN_K_DIST_SCALE, mean_all);
        }
        sigmas[i] = sigma;
        rhos[i] = rho;
        for (u32 t = 0; t < k; ++t) {
            u32 j = idx[i * k + t];
            float dd = di[t];
            float m;
            if (j == (u32)i) m = 0.0f;
            else if (__fsub_rn(dd, rho) <= 0.0f || sigma == 0.0f) m = 1.0f;
            else m = exp_f32(-(__fsub_rn(dd, rho) / sigma));
            w[i * k + t] = m;
        }
    }
}

__device__ __forceinline__ float fuzzy_union(float x, float y, float mix) {
    float prod = __fmul_rn(x, y);
    float u = __fsub_rn(__fadd_rn(x, y), prod);
    if (mix == 1.0f) return u;
    return __fadd_rn(__fmul_rn(mix, u), __fmul_rn(__fsub_rn(1.0f, mix), prod));
}

// Weight of edge j -> i (0 when i is not among j's neighbours).
__device__ __forceinline__ float reverse_weight(const u32* idx, const float* w, u32 k, u64 j, u32 i,
                                                bool* found) {
    for (u32 s = 0; s < k; ++s)
        if (idx[j * k + s] == i) {
            *found = true;
            return w[j * k + s];
        }
    *found = false;
    return 0.0f;
}

// Per directed edge e = (i, t) to j = idx[e]: the union value val[e] of the pair {i, j} (0 for
// the cell itself) and the entry counts per row. Row i holds (i, j) for each of its own edges
// with a non-zero value; row j also gets (j, i) from this edge when i is not in j's own list
// (rev_only[e] = 1), since no edge of row j produces it.
extern "C" __global__ void union_count(const u32* __restrict__ idx, const float* __restrict__ w,
                                       u64 n, u32 k, float mix, float* __restrict__ val,
                                       u8* __restrict__ rev_only, u64* __restrict__ counts) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n * k;
         e += (u64)gridDim.x * blockDim.x) {
        u64 i = e / k;
        u32 j = idx[e];
        float v = 0.0f;
        u8 ro = 0;
        if (j != (u32)i) {
            bool found;
            float b = reverse_weight(idx, w, k, j, (u32)i, &found);
            v = fuzzy_union(w[e], b, mix);
            if (v != 0.0f) atomicAdd(&counts[i], 1ull);
            // Row j gets (j, i) from this edge only when i is not in j's own list.
            if (!found && v != 0.0f) {
                ro = 1;
                atomicAdd(&counts[j], 1ull);
            }
        }
        val[e] = v;
        rev_only[e] = ro;
    }
}

// Writes the entries: row i's own edges first, then reverse-only edges from other rows through
// a per-row cursor (order fixed afterwards by `sort_rows`).
extern "C" __global__ void union_fill(const u32* __restrict__ idx, const float* __restrict__ val,
                                      const u8* __restrict__ rev_only, u64 n, u32 k,
                                      const u64* __restrict__ indptr, u32* __restrict__ cursor,
                                      u32* __restrict__ out_idx, float* __restrict__ out_val) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n * k;
         e += (u64)gridDim.x * blockDim.x) {
        u64 i = e / k;
        u32 j = idx[e];
        float v = val[e];
        if (v == 0.0f) continue;
        u64 p = indptr[i] + atomicAdd(&cursor[i], 1u);
        out_idx[p] = j;
        out_val[p] = v;
        if (rev_only[e]) {
            u64 q = indptr[j] + atomicAdd(&cursor[j], 1u);
            out_idx[q] = (u32)i;
            out_val[q] = v;
        }
    }
}

// Sorts every row of a CSR matrix by column (insertion sort: rows hold about k entries).
extern "C" __global__ void sort_rows(const u64* __restrict__ indptr, u64 n, u32* __restrict__ idx,
                                     float* __restrict__ val) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        u64 s = indptr[i], e = indptr[i + 1];
        for (u64 a = s + 1; a < e; ++a) {
            u32 j = idx[a];
            float v = val[a];
            u64 b = a;
            while (b > s && idx[b - 1] > j) {
                idx[b] = idx[b - 1];
                val[b] = val[b - 1];
                --b;
            }
            idx[b] = j;
            val[b] = v;
        }
    }
}

// scanpy's distances: the k - 1 non-self neighbours of row i at [i * (k - 1), ...), sorted by
// column afterwards with `sort_rows`.
extern "C" __global__ void distance_rows(const u32* __restrict__ idx, const float* __restrict__ dist,
                                         u64 n, u32 k, u32* __restrict__ out_idx,
                                         float* __restrict__ out_val) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n * (k - 1);
         e += (u64)gridDim.x * blockDim.x) {
        u64 i = e / (k - 1), t = e % (k - 1) + 1;
        out_idx[e] = idx[i * k + t];
        out_val[e] = dist[i * k + t];
    }
}
