// Exact kNN and UMAP connectivities (see gpu.rs for the plan). Products that decide a result
// the CPU also computes use explicit `__f*_rn` / `fma` calls so NVRTC cannot contract them
// differently from the CPU's arithmetic.

// ---- kNN scan: a block owns KNN_QT queries and streams every reference past them ----
#define KNN_QT 64        // queries per block
#define KNN_RT 128       // references per chunk
#define KNN_DK 32        // dimensions of the reference tile held in shared memory
#define KNN_THREADS 256  // 16 x 16 threads, each 4 queries x 8 references

// Reference-major copy: xt[dim * ld + i] = x[i * d + dim], zero in the padding (i >= n).
extern "C" __global__ void transpose_pad(const float* __restrict__ x, u64 n, u32 d, u64 ld,
                                         float* __restrict__ xt) {
    u64 total = (u64)d * ld;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < total;
         t += (u64)gridDim.x * blockDim.x) {
        u64 dim = t / ld, i = t % ld;
        xt[t] = i < n ? x[i * d + dim] : 0.0f;
    }
}

// Squared norms in f32, dimensions in order (the CPU's `norms`).
extern "C" __global__ void row_norms(const float* __restrict__ x, u64 n, u32 d,
                                     float* __restrict__ norms) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (u32 t = 0; t < d; ++t) {
            float v = x[i * d + t];
            s = __fadd_rn(s, __fmul_rn(v, v));
        }
        norms[i] = s;
    }
}

// (value, index) order: smaller value first, ties by smaller index.
__device__ __forceinline__ bool knn_before(float a, u32 ia, float b, u32 ib) {
    return a < b || (a == b && ia < ib);
}

// A scan block's shared memory (dynamic):
//   qs[dpad][KNN_QT], rs[KNN_DK][KNN_RT], rn[KNN_RT], thr[KNN_QT], cnt[KNN_QT],
//   cv/ci[KNN_QT][KNN_RT] (this chunk's candidates), tv/ti[KNN_QT][kc], len[KNN_QT].
struct KnnBlock {
    float* qs;
    float* rs;
    float* rn;
    float* thr;
    u32* cnt;
    float* cv;
    u32* ci;
    float* tv;
    u32* ti;
    u32* len;
};

__device__ KnnBlock knn_block(float* smem, u32 dpad, u32 kc) {
    KnnBlock s;
    s.qs = smem;
    s.rs = s.qs + (u64)dpad * KNN_QT;
    s.rn = s.rs + KNN_DK * KNN_RT;
    s.thr = s.rn + KNN_RT;
    s.cnt = (u32*)(s.thr + KNN_QT);
    s.cv = (float*)(s.cnt + KNN_QT);
    s.ci = (u32*)(s.cv + KNN_QT * KNN_RT);
    s.tv = (float*)(s.ci + KNN_QT * KNN_RT);
    s.ti = (u32*)(s.tv + (u64)KNN_QT * kc);
    s.len = s.ti + (u64)KNN_QT * kc;
    return s;
}

// The block's queries, dimension-major, zero past d and for a slot whose `row(q)` is ~0; the
// candidate lists emptied.
template <class Row>
__device__ void knn_load_queries(const KnnBlock& s, const float* __restrict__ x, u32 d, u32 dpad,
                                 Row row) {
    const u32 tid = threadIdx.x;
    for (u32 t = tid; t < dpad * KNN_QT; t += KNN_THREADS) {
        u32 dim = t / KNN_QT, q = t % KNN_QT;
        u64 qi = row(q);
        s.qs[t] = (dim < d && qi != ~0ull) ? x[qi * d + dim] : 0.0f;
    }
    for (u32 q = tid; q < KNN_QT; q += KNN_THREADS) {
        s.thr[q] = __int_as_float(0x7f800000);  // +inf
        s.cnt[q] = 0;
        s.len[q] = 0;
    }
    __syncthreads();
}

// Streams the references at positions rb .. re of `xt` (reference-major, rows of `ld`; rb a
// multiple of 4 and xt readable to the last chunk's end) past the block's queries, merging
// those that beat a query's threshold into its sorted list of `kc`. A reference is named
// ids[position] (~0: none, skipped), or its position when `ids` is null.
__device__ void knn_scan_range(const KnnBlock& s, const float* __restrict__ xt,
                               const float* __restrict__ norms, const u32* __restrict__ ids,
                               u64 rb, u64 re, u32 d, u32 dpad, u64 ld, u32 kc) {
    const u32 tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    for (u64 r0 = rb; r0 < re; r0 += KNN_RT) {
        float acc[4][8];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 8; ++b) acc[a][b] = 0.0f;

        for (u32 d0 = 0; d0 < dpad; d0 += KNN_DK) {
            // Reference tile: KNN_DK dims x KNN_RT refs, float4 loads along references.
            for (u32 t = tid; t < KNN_DK * KNN_RT / 4; t += KNN_THREADS) {
                u32 dim = t / (KNN_RT / 4), r4 = t % (KNN_RT / 4);
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (d0 + dim < d) v = *(const float4*)(xt + (u64)(d0 + dim) * ld + r0 + r4 * 4);
                *(float4*)(s.rs + dim * KNN_RT + r4 * 4) = v;
            }
            if (d0 == 0)
                for (u32 r = tid; r < KNN_RT; r += KNN_THREADS)
                    s.rn[r] = (r0 + r < re) ? norms[r0 + r] : 0.0f;
            __syncthreads();
            u32 dend = min(KNN_DK, d - min(d, d0));
            for (u32 dd = 0; dd < dend; ++dd) {
                float4 qa = *(const float4*)(s.qs + (u64)(d0 + dd) * KNN_QT + ty * 4);
                float4 ra = *(const float4*)(s.rs + dd * KNN_RT + tx * 4);
                float4 rb4 = *(const float4*)(s.rs + dd * KNN_RT + 64 + tx * 4);
                float qv[4] = {qa.x, qa.y, qa.z, qa.w};
                float rv[8] = {ra.x, ra.y, ra.z, ra.w, rb4.x, rb4.y, rb4.z, rb4.w};
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int b = 0; b < 8; ++b) acc[a][b] = fmaf(qv[a], rv[b], acc[a][b]);
            }
            __syncthreads();
        }

        // Candidates that beat their query's current threshold go to the chunk buffer.
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            u32 q = ty * 4 + a;
            float t = s.thr[q];
#pragma unroll
            for (int b = 0; b < 8; ++b) {
                u32 r = (b < 4) ? tx * 4 + b : 64 + tx * 4 + (b - 4);
                u64 ri = r0 + r;
                float v = __fsub_rn(s.rn[r], __fmul_rn(2.0f, acc[a][b]));
                if (ri < re && v < t) {
                    u32 id = ids ? ids[ri] : (u32)ri;
                    if (id != ~0u) {  // ~0: padding between lists
                        u32 p = atomicAdd(&s.cnt[q], 1u);
                        s.cv[q * KNN_RT + p] = v;
                        s.ci[q * KNN_RT + p] = id;
                    }
                }
            }
        }
        __syncthreads();

        // Merge each query's candidates into its sorted list (one thread per query).
        if (tid < KNN_QT) {
            u32 q = tid, c = s.cnt[q], l = s.len[q];
            float* lv = s.tv + (u64)q * kc;
            u32* li = s.ti + (u64)q * kc;
            for (u32 e = 0; e < c; ++e) {
                float v = s.cv[q * KNN_RT + e];
                u32 vi = s.ci[q * KNN_RT + e];
                if (l == kc && !knn_before(v, vi, lv[kc - 1], li[kc - 1])) continue;
                u32 p = (l < kc) ? l : kc - 1;
                while (p > 0 && knn_before(v, vi, lv[p - 1], li[p - 1])) {
                    lv[p] = lv[p - 1];
                    li[p] = li[p - 1];
                    --p;
                }
                lv[p] = v;
                li[p] = vi;
                if (l < kc) ++l;
            }
            s.len[q] = l;
            s.cnt[q] = 0;
            if (l == kc) s.thr[q] = lv[kc - 1];
        }
        __syncthreads();
    }
}

// Each query slot's list into cand row `out(q)` (skipped for ~0); slots past a list's length
// (fewer references than kc) hold ~0.
template <class Out>
__device__ void knn_store(const KnnBlock& s, u32 kc, u32* __restrict__ cand, Out out) {
    for (u32 t = threadIdx.x; t < KNN_QT * kc; t += KNN_THREADS) {
        u32 q = t / kc, e = t % kc;
        u64 row = out(q);
        if (row != ~0ull) cand[row * kc + e] = e < s.len[q] ? s.ti[q * kc + e] : ~0u;
    }
}

// For each query, the `kc` references of smallest |r|^2 - 2 q.r (which ranks references by
// distance to q), in that order: cand[q * kc + t]. The references are the n rows of `xt`, named
// by `ids` when given (see knn_scan_range). The queries are rows q_start .. q_end of x, or,
// when `qlist` is given, the rows q_start + qlist[e] for e < n_list (cand row qlist[e]).
// With gridDim.y > 1 the references are split in gridDim.y spans (a multiple of 4 long), span
// y's candidates going to cand + y * cand_rows * kc (few queries, many references).
extern "C" __global__ void __launch_bounds__(KNN_THREADS)
knn_scan(const float* __restrict__ x, const float* __restrict__ xt, const float* __restrict__ norms,
         const u32* __restrict__ ids, u64 n, u32 d, u32 dpad, u64 ld, u32 kc, u64 q_start, u64 q_end,
         const u32* __restrict__ qlist, u64 n_list, u64 cand_rows, u32* __restrict__ cand) {
    extern __shared__ float smem[];
    const u64 span = ((n + gridDim.y - 1) / gridDim.y + 3) / 4 * 4;
    const u64 rb = min(n, (u64)blockIdx.y * span), re = min(n, rb + span);
    cand += (u64)blockIdx.y * cand_rows * kc;
    const KnnBlock s = knn_block(smem, dpad, kc);
    // This block's queries: entries e0.. of the list, or rows q_start + e0.. (cand row = the
    // row's offset from q_start).
    const u64 e0 = (u64)blockIdx.x * KNN_QT;
    auto query_row = [&](u32 q) -> u64 {
        u64 e = e0 + q;
        u64 row = qlist ? (e < n_list ? q_start + qlist[e] : q_end) : q_start + e;
        return row < q_end ? row : ~0ull;
    };
    knn_load_queries(s, x, d, dpad, query_row);
    knn_scan_range(s, xt, norms, ids, rb, re, d, dpad, ld, kc);
    knn_store(s, kc, cand, [&](u32 q) -> u64 {
        u64 row = query_row(q);
        return row == ~0ull ? row : row - q_start;
    });
}

// Inverted-file scan (see ivf.rs): the cells are stored list by list (positions starts[l] ..
// starts[l] + sizes[l] of `xp`/`xt`, starts a multiple of 4; perm[position] is the cell). Block
// b takes up to KNN_QT cells of one list, tiles[2b] = the list, tiles[2b+1] = the first
// position, and scans the lists probes[probe_ptr[list] .. probe_ptr[list + 1]]: each cell's
// `kc` best candidates (cell indices) into cand row position - p0, ~0 past the references
// probed.
extern "C" __global__ void __launch_bounds__(KNN_THREADS)
ivf_scan(const float* __restrict__ xp, const float* __restrict__ xt, const float* __restrict__ norms,
         const u32* __restrict__ perm, const u64* __restrict__ starts,
         const u32* __restrict__ sizes, const u32* __restrict__ probe_ptr,
         const u32* __restrict__ probes, const u32* __restrict__ tiles, u64 p0, u32 d, u32 dpad,
         u64 ld,
         u32 kc, u32* __restrict__ cand) {
    extern __shared__ float smem[];
    const KnnBlock s = knn_block(smem, dpad, kc);
    const u32 list = tiles[2 * blockIdx.x];
    const u64 first = tiles[2 * blockIdx.x + 1], end = starts[list] + sizes[list];
    auto position = [&](u32 q) -> u64 { return first + q < end ? first + q : ~0ull; };
    knn_load_queries(s, xp, d, dpad, position);
    for (u32 p = probe_ptr[list]; p < probe_ptr[list + 1]; ++p) {
        const u32 l = probes[p];
        knn_scan_range(s, xt, norms, perm, starts[l], starts[l] + sizes[l], d, dpad, ld, kc);
    }
    knn_store(s, kc, cand, [&](u32 q) -> u64 {
        u64 pos = position(q);
        return pos == ~0ull ? pos : pos - p0;
    });
}

// The same scan for listed cells (those the tensor scan could not certify, ivf_tensor.rs):
// block b takes the entries tiles[3b + 1] .. tiles[3b + 2] (at most KNN_QT, all of list
// tiles[3b]) of `qpos` (positions) and writes each one's `kc` best candidates to cand row
// crow[entry].
extern "C" __global__ void __launch_bounds__(KNN_THREADS)
ivf_scan_listed(const float* __restrict__ xp, const float* __restrict__ xt,
                const float* __restrict__ norms, const u32* __restrict__ perm,
                const u64* __restrict__ starts, const u32* __restrict__ sizes,
                const u32* __restrict__ probe_ptr, const u32* __restrict__ probes,
                const u32* __restrict__ tiles, const u32* __restrict__ qpos,
                const u32* __restrict__ crow, u32 d, u32 dpad, u64 ld, u32 kc,
                u32* __restrict__ cand) {
    extern __shared__ float smem[];
    const KnnBlock s = knn_block(smem, dpad, kc);
    const u32 list = tiles[3 * blockIdx.x], e0 = tiles[3 * blockIdx.x + 1],
              e1 = tiles[3 * blockIdx.x + 2];
    knn_load_queries(s, xp, d, dpad,
                     [&](u32 q) -> u64 { return e0 + q < e1 ? (u64)qpos[e0 + q] : ~0ull; });
    for (u32 p = probe_ptr[list]; p < probe_ptr[list + 1]; ++p) {
        const u32 l = probes[p];
        knn_scan_range(s, xt, norms, perm, starts[l], starts[l] + sizes[l], d, dpad, ld, kc);
    }
    knn_store(s, kc, cand,
              [&](u32 q) -> u64 { return e0 + q < e1 ? (u64)crow[e0 + q] : ~0ull; });
}

// A part's kNN rows (row r: position p0 + r) into cell order: out row perm[p0 + r], for the
// positions that hold a cell.
extern "C" __global__ void ivf_scatter(const u32* __restrict__ idx, const float* __restrict__ dist,
                                       const u32* __restrict__ perm, u64 p0, u64 count, u32 k,
                                       u32* __restrict__ out_idx, float* __restrict__ out_dist) {
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < count * k;
         t += (u64)gridDim.x * blockDim.x) {
        u32 cell = perm[p0 + t / k];
        if (cell == ~0u) continue;
        u64 o = (u64)cell * k + t % k;
        out_idx[o] = idx[t];
        out_dist[o] = dist[t];
    }
}

// Rows of x in list order: xp[position] = x[perm[position]], zero where perm is ~0 (padding).
extern "C" __global__ void ivf_gather(const float* __restrict__ x, const u32* __restrict__ perm,
                                      u64 positions, u32 d, float* __restrict__ xp) {
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < positions * d;
         t += (u64)gridDim.x * blockDim.x) {
        u64 p = t / d;
        u32 row = perm[p];
        xp[t] = row == ~0u ? 0.0f : x[(u64)row * d + t % d];
    }
}

// Exact distances of the candidates (f64, dimensions in order, as the CPU), the best k by
// (distance, not-self, index) with the cell itself moved first. One thread per query.
// `scratch` holds (kc + 1) doubles and u32s per query.
// Queries are the rows q_start + r, r < q_count (cand, scratch and output rows are r), or
// the rows qmap[q_start + r] when `qmap` is given (~0: none, the row is left alone). A row of
// cand holds kc candidates (~0 for none), or counts[r] when `counts` is given.
extern "C" __global__ void knn_refine(const float* __restrict__ x, const u32* __restrict__ cand,
                                      const u32* __restrict__ counts,
                                      const u32* __restrict__ qmap,
                                      u64 q_start, u64 q_count, u32 d, u32 kc, u32 k,
                                      double* __restrict__ sd, u32* __restrict__ si,
                                      u32* __restrict__ out_idx, float* __restrict__ out_dist) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < q_count;
         r += (u64)gridDim.x * blockDim.x) {
        const u64 i = qmap ? (u64)qmap[q_start + r] : q_start + r;
        if (qmap && i == 0xffffffffull) continue;
        double* dv = sd + r * (kc + 1);
        u32* dj = si + r * (kc + 1);
        const float* xi = x + i * d;
        u32 m = 0;
        bool has_self = false;
        const u32 mc = counts ? min(counts[r], kc) : kc;
        for (u32 t = 0; t < mc; ++t) {
            u32 j = cand[r * kc + t];
            if (j == ~0u) continue;  // fewer references than kc were scanned
            const float* xj = x + (u64)j * d;
            double s = 0.0;
            for (u32 u = 0; u < d; ++u) {
                double diff = (double)xi[u] - (double)xj[u];
                s = __dadd_rn(s, __dmul_rn(diff, diff));
            }
            has_self |= (j == i);
            dv[m] = sqrt(s);
            dj[m] = j;
            ++m;
        }
        if (!has_self) {
            dv[m] = 0.0;
            dj[m] = (u32)i;
            ++m;
        }
        // Insertion sort by (distance, j != i, j).
        for (u32 a = 1; a < m; ++a) {
            double v = dv[a];
            u32 j = dj[a];
            u32 b = a;
            while (b > 0) {
                double pv = dv[b - 1];
                u32 pj = dj[b - 1];
                bool before = v < pv || (v == pv && ((j != i) < (pj != i) ||
                                                     ((j != i) == (pj != i) && j < pj)));
                if (!before) break;
                dv[b] = pv;
                dj[b] = pj;
                --b;
            }
            dv[b] = v;
            dj[b] = j;
        }
        // The cell itself first, then the nearest others.
        u32 self_pos = 0;
        while (dj[self_pos] != (u32)i) ++self_pos;
        out_idx[r * k] = (u32)i;
        out_dist[r * k] = 0.0f;
        u32 w = 1;
        for (u32 a = 0; a < m && w < k; ++a) {
            if (a == self_pos) continue;
            out_idx[r * k + w] = dj[a];
            out_dist[r * k + w] = (float)dv[a];
            ++w;
        }
    }
}

// ---- UMAP connectivities ----

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

// NN-descent's local join on an approximate kNN (`descent.rs`). First the reverse lists: the
// in-degree of every cell over the directed edges (the cell itself left out) ...
extern "C" __global__ void knn_in_degree(const u32* __restrict__ idx, u64 n, u32 k,
                                         u64* __restrict__ counts) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n * k;
         e += (u64)gridDim.x * blockDim.x) {
        u32 j = idx[e];
        if (j < n && (u64)j != e / k) atomicAdd(&counts[j], 1ull);
    }
}

// ... then each edge i -> j written as i into j's list (in any order: the join's result
// depends on the lists' contents only).
extern "C" __global__ void knn_reverse_fill(const u32* __restrict__ idx, u64 n, u32 k,
                                            const u64* __restrict__ rptr,
                                            u32* __restrict__ cursor, u32* __restrict__ rev) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < n * k;
         e += (u64)gridDim.x * blockDim.x) {
        u32 j = idx[e];
        u64 i = e / k;
        if (j < n && (u64)j != i) rev[rptr[j] + atomicAdd(&cursor[j], 1u)] = (u32)i;
    }
}

__device__ __forceinline__ double descent_dist(const float* xi, const float* __restrict__ xj,
                                               u32 d) {
    double s = 0.0;
    for (u32 u = 0; u < d; ++u) {
        double diff = (double)xi[u] - (double)xj[u];
        s = __dadd_rn(s, __dmul_rn(diff, diff));
    }
    return sqrt(s);
}

// (v, j) ranks before (w, l): nearer, or as near with the smaller index.
__device__ __forceinline__ bool descent_before(double v, u32 j, double w, u32 l) {
    return v < w || (v == w && j < l);
}

#define DESCENT_WARPS 4

// One round of the local join, a warp per cell i: the candidates are the rows of its
// neighbours and of its reverse neighbours (those cells included); the best k - 1 others of
// its row and the candidates by exact f64 distance (knn_refine's sums; ties: the smaller
// index) become its row, the cell itself first. The cells are rows[0 .. count) (their rows
// written in that order: a trial on a sample) or, with rows null, every cell. `replaced`
// counts the neighbours new to the rows. Shared memory per warp: the k - 1 best (distance,
// index) sorted, and the cell's row.
extern "C" __global__ void __launch_bounds__(DESCENT_WARPS * 32)
knn_descent(const float* __restrict__ x, const u32* __restrict__ idx,
            const u64* __restrict__ rptr, const u32* __restrict__ rev,
            const u32* __restrict__ rows, u64 count, u64 n, u32 d, u32 k,
            u32* __restrict__ out_idx, float* __restrict__ out_dist,
            unsigned long long* __restrict__ replaced) {
    extern __shared__ double descent_smem[];
    const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32, m = k - 1;
    double* td = descent_smem + warp * m;
    u32* tj = (u32*)(descent_smem + DESCENT_WARPS * m) + warp * m;
    float* xi = (float*)((u32*)(descent_smem + DESCENT_WARPS * m) + DESCENT_WARPS * m) + warp * d;
    for (u64 w = blockIdx.x * (u64)DESCENT_WARPS + warp; w < count;
         w += (u64)gridDim.x * DESCENT_WARPS) {
        const u64 i = rows ? (u64)rows[w] : w;
        const u32* row = idx + i * k;
        for (u32 u = lane; u < d; u += 32) xi[u] = x[i * d + u];
        __syncwarp();
        // The row's own others (the cell and missing entries last: they rank after all).
        for (u32 t = lane; t < m; t += 32) {
            u32 j = row[1 + t];
            bool ok = j < n && (u64)j != i;
            td[t] = ok ? descent_dist(xi, x + (u64)j * d, d) : __longlong_as_double(0x7ff0000000000000ll);
            tj[t] = ok ? j : ~0u;
        }
        __syncwarp();
        if (lane == 0) {
            for (u32 a = 1; a < m; ++a) {
                double v = td[a];
                u32 j = tj[a], b = a;
                while (b > 0 && descent_before(v, j, td[b - 1], tj[b - 1])) {
                    td[b] = td[b - 1];
                    tj[b] = tj[b - 1];
                    --b;
                }
                td[b] = v;
                tj[b] = j;
            }
        }
        __syncwarp();
        const u64 r0 = rptr[i], sources = (u64)m + (rptr[i + 1] - r0), total = sources * k;
        for (u64 e0 = 0; e0 < total; e0 += 32) {
            const u64 e = e0 + lane;
            bool pass = false;
            double v = 0.0;
            u32 z = ~0u;
            if (e < total) {
                const u64 s = e / k;
                const u32 y = s < m ? row[1 + s] : rev[r0 + s - m];
                if (y < n) z = idx[(u64)y * k + e % k];
                bool fresh = z < n && (u64)z != i;
                for (u32 a = 0; a < m && fresh; ++a) fresh = tj[a] != z;
                if (fresh) {
                    v = descent_dist(xi, x + (u64)z * d, d);
                    pass = descent_before(v, z, td[m - 1], tj[m - 1]);
                }
            }
            unsigned want = __ballot_sync(0xffffffffu, pass);
            while (want) {
                const int b = __ffs(want) - 1;
                want &= want - 1;
                const double w = __shfl_sync(0xffffffffu, v, b);
                const u32 l = __shfl_sync(0xffffffffu, z, b);
                if (lane == 0 && descent_before(w, l, td[m - 1], tj[m - 1])) {
                    bool dup = false;
                    for (u32 a = 0; a < m && !dup; ++a) dup = tj[a] == l;
                    if (!dup) {
                        u32 p = m - 1;
                        while (p > 0 && descent_before(w, l, td[p - 1], tj[p - 1])) {
                            td[p] = td[p - 1];
                            tj[p] = tj[p - 1];
                            --p;
                        }
                        td[p] = w;
                        tj[p] = l;
                    }
                }
                __syncwarp();
            }
        }
        u32 fresh = 0;
        for (u32 t = lane; t < m; t += 32) {
            u32 j = tj[t];
            bool had = false;
            for (u32 a = 1; a < k && !had; ++a) had = row[a] == j;
            fresh += !had;
            out_idx[w * k + 1 + t] = j;
            out_dist[w * k + 1 + t] = (float)td[t];
        }
        for (int o = 16; o > 0; o >>= 1) fresh += __shfl_down_sync(0xffffffffu, fresh, o);
        if (lane == 0) {
            out_idx[w * k] = (u32)i;
            out_dist[w * k] = 0.0f;
            if (fresh) atomicAdd(replaced, (unsigned long long)fresh);
        }
        __syncwarp();
    }
}
