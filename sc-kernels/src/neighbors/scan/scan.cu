// The kNN scan and the exact refinement (see device.rs for the plan). Products that decide a result
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

// Inverted-file scan (see ../ivf/ and ../lists/): the cells are stored list by list (positions starts[l] ..
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

// The same scan for listed cells (those the tensor scan could not certify, lists/packed.rs):
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
            has_self |= (j == i);
            dv[m] = exact_distance(xi, x + (u64)j * d, d);
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

// Exact distances of the candidates (f64, dimensions in order, as the CPU), the best k by
// (distance, index), the query no different from the others (bbknn's search of every cell
// among a batch's). One thread per query row r < q_count; a row of cand holds kc candidates
// (~0 for none: a batch of fewer); `scratch` holds kc doubles and u32s per query.
extern "C" __global__ void knn_refine_among(const float* __restrict__ x,
                                            const u32* __restrict__ cand, u64 q_count, u32 d,
                                            u32 kc, u32 k, double* __restrict__ sd,
                                            u32* __restrict__ si, u32* __restrict__ out_idx,
                                            float* __restrict__ out_dist) {
    for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < q_count;
         r += (u64)gridDim.x * blockDim.x) {
        double* dv = sd + r * kc;
        u32* dj = si + r * kc;
        const float* xi = x + r * d;
        u32 m = 0;
        for (u32 t = 0; t < kc; ++t) {
            const u32 j = cand[r * kc + t];
            if (j == ~0u) continue;
            // Insertion by (distance, index).
            const double v = exact_distance(xi, x + (u64)j * d, d);
            u32 b = m++;
            while (b > 0 && nearer_first(v, j, dv[b - 1], dj[b - 1])) {
                dv[b] = dv[b - 1];
                dj[b] = dj[b - 1];
                --b;
            }
            dv[b] = v;
            dj[b] = j;
        }
        for (u32 a = 0; a < k; ++a) {
            out_idx[r * k + a] = a < m ? dj[a] : ~0u;
            out_dist[r * k + a] = a < m ? (float)dv[a] : 0.0f;
        }
    }
}
