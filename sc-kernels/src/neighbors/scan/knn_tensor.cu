// Exact kNN candidates from FP16 tensor-core products (see tensor.rs for the bound).
//
// Data are centred (distances do not change), scaled by a power of two (exact) so that they fit
// FP16's range, and packed in chunks of 128 rows: the chunk holds, for each 16-dimension step s
// and each pair of 8-row tiles t2, 32 lanes x 4 words (each two FP16 values, the lower dimension
// in the low half) in the order the m16n8k16 mma wants them (as B: b0, b1 of tile 2 t2, then of
// tile 2 t2 + 1; the same four words are a0, a2, a1, a3 of the A fragment of rows 16 t2 ..). One
// chunk is both a block's queries and a tile of references.
//
// A block owns 128 queries, warp w the 16 of pair w; every reference chunk passes through shared
// memory (double-buffered with cp.async when it fits). Two passes over the references, the same
// products (the same bits) in both:
// 1. `knn_tensor_bound`: per query, U = the k-th smallest UPPER bound S~ + eps of the score
//    |r|^2 - 2 q.r over the references (a sorted list of k values per query);
// 2. `knn_tensor_collect`: every reference whose LOWER bound S~ - eps is at most U is a
//    candidate (appended, no sorting). The k nearest are all among them: each has an exact
//    score at most the k-th exact score, which is at most U. A query with more than `width`
//    candidates is flagged; the host runs the f32 scan for it.
#define KT_Q 128       // queries per block (one packed chunk)
#define KT_R 128       // references per chunk
#define KT_WARPS 8
#define KT_THREADS 256
#define KT_CAP 16      // pass 1: values buffered per query before each merge

// Two values rounded to FP16 (to nearest, subnormals kept): lo in the low half.
__device__ __forceinline__ u32 to_f16x2(float lo, float hi) {
    u32 r = 0;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

// Value t of row r of x, centred and scaled (0 past d).
__device__ __forceinline__ float tc_value(const float* __restrict__ x, const float* __restrict__ mean,
                                          u64 r, u32 d, u32 t, float scale) {
    return t < d ? __fmul_rn(__fsub_rn(x[r * d + t], mean[t]), scale) : 0.0f;
}

// The row of x behind packed row r: row0 + r, or ids[row0 + r] when a map is given (~0 for a
// padding row: zero values, and bounds that no comparison passes).
__device__ __forceinline__ u64 tc_row(const u32* __restrict__ ids, u64 row0, u64 r) {
    if (!ids) return row0 + r;
    u32 i = ids[row0 + r];
    return i == ~0u ? ~0ull : (u64)i;
}

// Rows row0 .. row0 + count of x (or of its map, see tc_row), minus `mean`, times `scale`,
// rounded to FP16, packed into ceil(count / 128) chunks of ks * 1024 words (zero past count
// and past d). One thread per word.
extern "C" __global__ void tc_pack(const float* __restrict__ x, const float* __restrict__ mean,
                                   const u32* __restrict__ ids, u64 row0, u64 count, u32 d,
                                   u32 ks, float scale, u32* __restrict__ packed) {
    const u64 per_chunk = (u64)ks * 1024;
    const u64 total = (count + KT_R - 1) / KT_R * per_chunk;
    for (u64 o = blockIdx.x * (u64)blockDim.x + threadIdx.x; o < total;
         o += (u64)gridDim.x * blockDim.x) {
        u64 chunk = o / per_chunk;
        u32 rem = (u32)(o % per_chunk);
        u32 comp = rem & 3, lane = (rem >> 2) & 31, st2 = rem >> 7;
        u32 t2 = st2 & 7, s = st2 >> 3;
        u32 odd = comp >> 1, hi = comp & 1, g = lane >> 2, tg = lane & 3;
        u32 j = (t2 * 2 + odd) * 8 + g;
        u32 t = s * 16 + hi * 8 + tg * 2;
        u64 r = chunk * KT_R + j;
        u32 w = 0;
        if (r < count) {
            u64 row = tc_row(ids, row0, r);
            if (row != ~0ull)
                w = to_f16x2(tc_value(x, mean, row, d, t, scale),
                             tc_value(x, mean, row, d, t + 1, scale));
        }
        packed[o] = w;
    }
}

// Per row i < n of x (or of its map, see tc_row), centred and scaled: the squared norm s in
// f32 (dimensions in order), nrm = |r| rounded up, and the per-reference parts of the score's
// bounds, rb_lo = s - b, rb_up = s + b with b = kb |r|^2 + kf |r|. A padding row gets NaN
// bounds: no threshold passes them.
extern "C" __global__ void tc_row_terms(const float* __restrict__ x, const float* __restrict__ mean,
                                        const u32* __restrict__ ids, u64 n, u32 d, float scale,
                                        float kb, float kf, float* __restrict__ rb_lo,
                                        float* __restrict__ rb_up, float* __restrict__ nrm) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 row = tc_row(ids, 0, i);
        if (row == ~0ull) {
            nrm[i] = 0.0f;
            rb_lo[i] = __int_as_float(0x7fc00000);
            rb_up[i] = __int_as_float(0x7fc00000);
            continue;
        }
        float s = 0.0f;
        for (u32 t = 0; t < d; ++t) {
            float v = tc_value(x, mean, row, d, t, scale);
            s = __fadd_rn(s, __fmul_rn(v, v));
        }
        float m = __fmul_rn(sqrtf(s), 1.0000153f);  // 1 + 2^-16: at least |r|
        nrm[i] = m;
        float b = __fadd_rn(__fmul_rn(kb, __fmul_rn(m, m)), __fmul_rn(kf, m));
        rb_lo[i] = __fsub_rn(s, b);
        rb_up[i] = __fadd_rn(s, b);
    }
}

// c += a b for the A fragment a = (a0, a1, a2, a3) in order (see tc_stream: the queries' words
// are put in this order once a block has loaded them) and the B fragment b = (b0, b1).
__device__ __forceinline__ void mma_f16(float* c, float4 a, float2 b) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(__float_as_uint(a.x)), "r"(__float_as_uint(a.y)), "r"(__float_as_uint(a.z)),
          "r"(__float_as_uint(a.w)), "r"(__float_as_uint(b.x)), "r"(__float_as_uint(b.y)));
#endif
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if __CUDA_ARCH__ >= 800
    u32 s = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_one() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

// Chunk c of the references (packed values, rb, nrm) into shared memory, asynchronously.
__device__ __forceinline__ void tc_load_chunk(const float* __restrict__ refs,
                                              const float* __restrict__ rb,
                                              const float* __restrict__ nrm, u64 n, u32 ks,
                                              u64 c, float* bs, float* rbs, float* rms) {
    const u32 per_chunk = ks * 1024;
    const float* src = refs + c * per_chunk;
    for (u32 t = threadIdx.x; t < per_chunk / 4; t += KT_THREADS) cp_async16(bs + t * 4, src + t * 4);
    // rb and nrm: 128 each, in 16-byte pieces where the chunk is whole, else one by one.
    u64 r0 = c * KT_R;
    if (r0 + KT_R <= n && (r0 & 3) == 0) {
        u32 t = threadIdx.x;
        if (t < 32) cp_async16(rbs + t * 4, rb + r0 + t * 4);
        else if (t < 64) cp_async16(rms + (t - 32) * 4, nrm + r0 + (t - 32) * 4);
    } else {
        // Past n: NaN bounds, which no threshold passes (as a padding slot's).
        for (u32 t = threadIdx.x; t < KT_R; t += KT_THREADS) {
            bool in = r0 + t < n;
            rbs[t] = in ? rb[r0 + t] : __int_as_float(0x7fc00000);
            rms[t] = in ? nrm[r0 + t] : 0.0f;
        }
    }
    cp_async_commit();
}

// The products of warp `warp`'s 16 queries (as, packed, each A fragment in order) with a chunk
// of 128 references (bs, packed): acc[t][e] for reference 8 t + 2 tg + (e & 1), query row g
// (e < 2) or g + 8. The addresses step from two bases, so the loads take constant offsets.
__device__ __forceinline__ void tc_products(float (*acc)[4], const float* as, const float* bs,
                                            u32 ks, u32 warp, u32 lane) {
#pragma unroll
    for (int t = 0; t < 16; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
    const float4* ap = (const float4*)as + warp * 32 + lane;
    const float4* bp = (const float4*)bs + lane;
    for (u32 s = 0; s < ks; ++s, ap += 256, bp += 256) {
        const float4 a = *ap;
#pragma unroll
        for (int t2 = 0; t2 < 8; ++t2) {
            const float4 b = bp[t2 * 32];
            mma_f16(acc[2 * t2], a, make_float2(b.x, b.y));
            mma_f16(acc[2 * t2 + 1], a, make_float2(b.z, b.w));
        }
    }
}

// The products acc (tc_products) turned in place into bounds, rb[j] - 2 q.r + sign ka |q| |r_j|
// (sign +1: upper bounds of pass 1, -1: lower bounds of pass 2; qk_a, qk_b = ka |q| of the
// rows g and g + 8), with the least of each row's: (lo_a, lo_b). NaN bounds (padding) never
// count as least.
template <int SIGN>
__device__ __forceinline__ void tc_bounds(float (*acc)[4], const float* rbs, const float* rms,
                                          u32 tg, float qk_a, float qk_b, float& lo_a,
                                          float& lo_b) {
    lo_a = __int_as_float(0x7f800000);
    lo_b = lo_a;
    const float2* rb2 = (const float2*)rbs + tg;
    const float2* rm2 = (const float2*)rms + tg;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
        const float2 rb = rb2[t * 4];
        const float2 rm = rm2[t * 4];
        const float ma = SIGN > 0 ? rm.x : -rm.x, mb = SIGN > 0 ? rm.y : -rm.y;
        acc[t][0] = __fmaf_rn(ma, qk_a, __fmaf_rn(-2.0f, acc[t][0], rb.x));
        acc[t][1] = __fmaf_rn(mb, qk_a, __fmaf_rn(-2.0f, acc[t][1], rb.y));
        acc[t][2] = __fmaf_rn(ma, qk_b, __fmaf_rn(-2.0f, acc[t][2], rb.x));
        acc[t][3] = __fmaf_rn(mb, qk_b, __fmaf_rn(-2.0f, acc[t][3], rb.y));
        lo_a = fminf(lo_a, fminf(acc[t][0], acc[t][1]));
        lo_b = fminf(lo_b, fminf(acc[t][2], acc[t][3]));
    }
}

// Shared memory both passes start with: the block's queries, the reference chunks (nbuf of
// them) with their rb and nrm values.
struct TcShared {
    float* as;
    float* bsb;
    float* rbsb;
    float* rmsb;
    float* rest;  // what follows, for the pass's own arrays
};

__device__ __forceinline__ TcShared tc_shared(float* smem, u32 ks, u32 nbuf) {
    const u32 per_chunk = ks * 1024;
    TcShared t;
    t.as = smem;
    t.bsb = t.as + per_chunk;
    t.rbsb = t.bsb + (u64)nbuf * per_chunk;
    t.rmsb = t.rbsb + nbuf * KT_R;
    t.rest = t.rmsb + nbuf * KT_R;
    return t;
}

// The reference chunks a block streams: all of them (the exact kNN) ...
struct TcAllChunks {
    u64 count, i;
    __device__ bool next(u64& c) {
        if (i == count) return false;
        c = i++;
        return true;
    }
};

// ... or those of the lists probes[p .. pend] (the inverted file: list l is the chunks
// cstart[l] .. cstart[l] + ccount[l]).
struct TcProbedChunks {
    const u32* probes;
    const u32* cstart;
    const u32* ccount;
    u32 p, pend, c, cend;
    __device__ bool next(u64& out) {
        while (c == cend) {
            if (p == pend) return false;
            u32 l = probes[p++];
            c = cstart[l];
            cend = c + ccount[l];
        }
        out = c++;
        return true;
    }
};

// Streams the chunks of `seq` through shared memory and calls epi(c, bs, rbs, rms) with chunk
// c in place (all threads; the epilogue may synchronise its warp only). The block's queries
// (`qpacked`, one packed chunk) are loaded first, and their words put in the A fragment's
// order.
template <typename Seq, typename Epi>
__device__ __forceinline__ void tc_stream(const float* __restrict__ refs, const float* __restrict__ rb,
                                          const float* __restrict__ nrm, u64 n, u32 ks,
                                          const float* __restrict__ qpacked, u32 nbuf,
                                          const TcShared& sh, Seq seq, Epi epi) {
    const u32 per_chunk = ks * 1024;
    for (u32 t = threadIdx.x; t < per_chunk / 4; t += KT_THREADS) cp_async16(sh.as + t * 4, qpacked + t * 4);
    cp_async_commit();
    // The queries serve only as A: their words (a0, a2, a1, a3) in the packed order are put in
    // the fragment's order once, so every product reads them as they lie.
    cp_async_wait_all();
    __syncthreads();
    for (u32 t = threadIdx.x; t < per_chunk / 4; t += KT_THREADS) {
        float4* w = (float4*)sh.as + t;
        const float y = w->y;
        w->y = w->z;
        w->z = y;
    }
    __syncthreads();
    u64 cur = 0;
    bool has = seq.next(cur);
    if (nbuf == 2 && has) tc_load_chunk(refs, rb, nrm, n, ks, cur, sh.bsb, sh.rbsb, sh.rmsb);
    for (u32 i = 0; has; ++i) {
        u64 nxt = 0;
        const bool more = seq.next(nxt);
        const u32 buf = (nbuf == 2) ? (i & 1) : 0;
        if (nbuf == 2) {
            if (more) {
                const u32 nb = (i + 1) & 1;
                tc_load_chunk(refs, rb, nrm, n, ks, nxt, sh.bsb + (u64)nb * per_chunk,
                              sh.rbsb + nb * KT_R, sh.rmsb + nb * KT_R);
                cp_async_wait_one();
            } else {
                cp_async_wait_all();
            }
        } else {
            tc_load_chunk(refs, rb, nrm, n, ks, cur, sh.bsb, sh.rbsb, sh.rmsb);
            cp_async_wait_all();
        }
        __syncthreads();
        epi(cur, sh.bsb + (u64)buf * per_chunk, sh.rbsb + buf * KT_R, sh.rmsb + buf * KT_R);
        __syncthreads();
        cur = nxt;
        has = more;
    }
    cp_async_wait_all();
    __syncthreads();
}

// Pass 1 of a block: per query row qr of its packed queries `qpacked` (squared-norm bound
// terms from qn[qr], written when valid(qr)), the k-th smallest upper bound over the chunks of
// `seq`, without the query's own term qc = kc_err |q|^2 + kf |q| + ke, plus twice it:
// tau_out[qr] = U' + 2 qc, the threshold pass 2 compares lower bounds (also without qc) with.
// rb_up[r] = |r|^2 + kb |r|^2 + kf |r|; the upper bound is rb_up - 2 q.r + ka |q||r| (+ qc).
template <typename Seq, typename Valid>
__device__ __forceinline__ void tc_bound_block(
    const float* __restrict__ refs, const float* __restrict__ rb_up, const float* __restrict__ nrm,
    u64 n, u32 ks, const float* __restrict__ qpacked, const float* __restrict__ qn, Valid valid,
    u32 k, float ka, float kc_err, float kf, float ke, u32 nbuf, Seq seq,
    float* __restrict__ tau_out) {
    extern __shared__ float4 smem4[];
    const TcShared sh = tc_shared((float*)smem4, ks, nbuf);
    float* thr = sh.rest;                       // 128
    u32* cnt = (u32*)(thr + KT_Q);              // 128
    u32* len = cnt + KT_Q;                      // 128
    float* bv = (float*)(len + KT_Q);           // 128 * CAP
    float* lists = bv + KT_Q * KT_CAP;          // 128 * k

    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 g = lane >> 2, tg = lane & 3;
    for (u32 q = tid; q < KT_Q; q += KT_THREADS) {
        thr[q] = __int_as_float(0x7f800000);
        cnt[q] = 0;
        len[q] = 0;
    }
    const u32 qa_row = warp * 16 + g, qb_row = qa_row + 8;
    const float qa_k = valid(qa_row) ? __fmul_rn(ka, qn[qa_row]) : 0.0f;
    const float qb_k = valid(qb_row) ? __fmul_rn(ka, qn[qb_row]) : 0.0f;

    tc_stream(refs, rb_up, nrm, n, ks, qpacked, nbuf, sh, seq,
              [&](u64 c, const float* bs, const float* rbs, const float* rms) {
        float acc[16][4];
        tc_products(acc, sh.as, bs, ks, warp, lane);
        float lo_a, lo_b;
        tc_bounds<1>(acc, rbs, rms, tg, qa_k, qb_k, lo_a, lo_b);
        // Past the first chunks few upper bounds fall below a query's k-th: most warps have
        // none to merge.
        if (!__any_sync(FULL_MASK, lo_a < thr[qa_row] || lo_b < thr[qb_row])) return;
        // Upper bounds below a query's k-th go to its buffer, CAP at a time: values that did
        // not fit are offered again once the merge has lowered the threshold.
        unsigned long long pushed = 0;
        for (;;) {
            const float ta = thr[qa_row], tb = thr[qb_row];
#pragma unroll
            for (int t = 0; t < 16; ++t) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    u32 qr = (e < 2) ? qa_row : qb_row;
                    float v = acc[t][e];
                    unsigned long long bit = 1ull << (t * 4 + e);
                    if (!(pushed & bit) && v < ((e < 2) ? ta : tb)) {
                        u32 p = atomicAdd(&cnt[qr], 1u);
                        if (p < KT_CAP) {
                            bv[qr * KT_CAP + p] = v;
                            pushed |= bit;
                        }
                    }
                }
            }
            __syncwarp();
            bool over = false;
            if (lane < 16) {
                u32 qr = warp * 16 + lane, l = len[qr], m = min(cnt[qr], (u32)KT_CAP);
                float* lv = lists + qr * k;
                over = cnt[qr] > KT_CAP;
                for (u32 e = 0; e < m; ++e) {
                    float v = bv[qr * KT_CAP + e];
                    if (l == k && !(v < lv[k - 1])) continue;
                    u32 p = (l < k) ? l : k - 1;
                    while (p > 0 && v < lv[p - 1]) {
                        lv[p] = lv[p - 1];
                        --p;
                    }
                    lv[p] = v;
                    if (l < k) ++l;
                }
                len[qr] = l;
                cnt[qr] = 0;
                if (l == k) thr[qr] = lv[k - 1];
            }
            bool again = __any_sync(FULL_MASK, over);
            __syncwarp();
            if (!again) break;
        }
    });

    if (lane < 16) {
        u32 qr = warp * 16 + lane;
        if (valid(qr)) {
            float m = qn[qr];
            float qc = __fadd_rn(__fadd_rn(__fmul_rn(kc_err, __fmul_rn(m, m)), __fmul_rn(kf, m)), ke);
            // Fewer than k references seen: +inf, every reference is a candidate.
            float kth = len[qr] == k ? lists[qr * k + k - 1] : __int_as_float(0x7f800000);
            tau_out[qr] = __fadd_rn(kth, __fmul_rn(2.0f, qc));
        }
    }
}

// Pass 2 of a block: the candidates of each valid query row qr: every reference of the chunks
// of `seq` whose lower bound (rb_lo - 2 q.r - ka |q||r|, rb_lo = |r|^2 - kb |r|^2 - kf |r|)
// is at most tau[qr]: cand[qr * width + p] (the reference's row, or ids[row] with a map),
// p < width; counts[qr] = how many (at most width); a query with more is flagged
// (uncertain[qr] = 1) and counted.
template <typename Seq, typename Valid>
__device__ __forceinline__ void tc_collect_block(
    const float* __restrict__ refs, const float* __restrict__ rb_lo, const float* __restrict__ nrm,
    u64 n, u32 ks, const float* __restrict__ qpacked, const float* __restrict__ qn, Valid valid,
    float ka, u32 nbuf, Seq seq, const float* __restrict__ tau, u32 width,
    const u32* __restrict__ ids, u32* __restrict__ cand, u32* __restrict__ counts,
    u8* __restrict__ uncertain, u32* __restrict__ n_uncertain) {
    extern __shared__ float4 smem4[];
    const TcShared sh = tc_shared((float*)smem4, ks, nbuf);
    u32* cnt = (u32*)sh.rest;  // 128

    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const u32 g = lane >> 2, tg = lane & 3;
    for (u32 q = tid; q < KT_Q; q += KT_THREADS) cnt[q] = 0;
    const u32 qa_row = warp * 16 + g, qb_row = qa_row + 8;
    const bool qa_in = valid(qa_row), qb_in = valid(qb_row);
    const float qa_k = qa_in ? __fmul_rn(ka, qn[qa_row]) : 0.0f;
    const float qb_k = qb_in ? __fmul_rn(ka, qn[qb_row]) : 0.0f;
    // Not a query: -inf, nothing is collected.
    const float ta = qa_in ? tau[qa_row] : __int_as_float(0xff800000);
    const float tb = qb_in ? tau[qb_row] : __int_as_float(0xff800000);

    tc_stream(refs, rb_lo, nrm, n, ks, qpacked, nbuf, sh, seq,
              [&](u64 c, const float* bs, const float* rbs, const float* rms) {
        float acc[16][4];
        tc_products(acc, sh.as, bs, ks, warp, lane);
        float lo_a, lo_b;
        tc_bounds<-1>(acc, rbs, rms, tg, qa_k, qb_k, lo_a, lo_b);
        // Few references are candidates: most threads have none in a chunk.
        if (!(lo_a <= ta || lo_b <= tb)) return;
        const u64 r0 = c * KT_R;
#pragma unroll
        for (int t = 0; t < 16; ++t) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                u32 j = t * 8 + tg * 2 + (e & 1);
                if (acc[t][e] <= ((e < 2) ? ta : tb)) {
                    u32 qr = (e < 2) ? qa_row : qb_row;
                    u32 p = atomicAdd(&cnt[qr], 1u);
                    if (p < width) cand[(u64)qr * width + p] = ids ? ids[r0 + j] : (u32)(r0 + j);
                }
            }
        }
    });

    for (u32 qr = tid; qr < KT_Q; qr += KT_THREADS) {
        if (!valid(qr)) continue;
        u32 m = cnt[qr];
        counts[qr] = min(m, width);
        uncertain[qr] = m > width ? 1 : 0;
        if (m > width) atomicAdd(n_uncertain, 1u);
    }
}

// Pass 1 of the exact kNN: the queries are rows q_row0 + q of the references, q < q_count,
// packed in `queries` (block b: chunk b); tau[q].
extern "C" __global__ void __launch_bounds__(KT_THREADS)
knn_tensor_bound(const float* __restrict__ refs, const float* __restrict__ rb_up,
                 const float* __restrict__ nrm, u64 n, u32 ks, const float* __restrict__ queries,
                 u64 q_row0, u64 q_count, u32 k, float ka, float kc_err, float kf, float ke,
                 u32 nbuf, float* __restrict__ tau) {
    const u64 q0 = (u64)blockIdx.x * KT_Q;
    tc_bound_block(refs, rb_up, nrm, n, ks, queries + (u64)blockIdx.x * ks * 1024,
                   nrm + q_row0 + q0, [&](u32 qr) { return q0 + qr < q_count; }, k, ka, kc_err,
                   kf, ke, nbuf, TcAllChunks{(n + KT_R - 1) / KT_R, 0}, tau + q0);
}

// Pass 2 of the exact kNN (queries as in pass 1): cand[q * width ..], counts[q], uncertain[q].
extern "C" __global__ void __launch_bounds__(KT_THREADS)
knn_tensor_collect(const float* __restrict__ refs, const float* __restrict__ rb_lo,
                   const float* __restrict__ nrm, u64 n, u32 ks, const float* __restrict__ queries,
                   u64 q_row0, u64 q_count, float ka, u32 nbuf, const float* __restrict__ tau,
                   u32 width, u32* __restrict__ cand, u32* __restrict__ counts,
                   u8* __restrict__ uncertain, u32* __restrict__ n_uncertain) {
    const u64 q0 = (u64)blockIdx.x * KT_Q;
    tc_collect_block(refs, rb_lo, nrm, n, ks, queries + (u64)blockIdx.x * ks * 1024,
                     nrm + q_row0 + q0, [&](u32 qr) { return q0 + qr < q_count; }, ka, nbuf,
                     TcAllChunks{(n + KT_R - 1) / KT_R, 0}, tau + q0, width, nullptr,
                     cand + q0 * width, counts + q0, uncertain + q0, n_uncertain);
}

// The inverted file (lists/packed.rs): the cells packed list by list, list l in the chunks
// cstart[l] .. cstart[l] + ccount[l] (ids[slot] its cell, ~0 in a list's last chunk past its
// cells). Block b takes the chunk tiles[2b + 1] of list tiles[2b] as its queries and streams
// the chunks of the lists probes[probe_ptr[list] .. probe_ptr[list + 1]].
struct IvfTile {
    u32 list;
    u64 q0;  // the block's first slot
    __device__ IvfTile(const u32* tiles) : list(tiles[2 * blockIdx.x]), q0((u64)tiles[2 * blockIdx.x + 1] * KT_Q) {}
};

// Pass 1 of the inverted file: tau[slot].
extern "C" __global__ void __launch_bounds__(KT_THREADS)
ivf_tensor_bound(const float* __restrict__ refs, const float* __restrict__ rb_up,
                 const float* __restrict__ nrm, u64 n, u32 ks, const u32* __restrict__ ids,
                 const u32* __restrict__ tiles, const u32* __restrict__ probe_ptr,
                 const u32* __restrict__ probes, const u32* __restrict__ cstart,
                 const u32* __restrict__ ccount, u32 k, float ka, float kc_err, float kf, float ke,
                 u32 nbuf, float* __restrict__ tau) {
    const IvfTile tile(tiles);
    const u64 q0 = tile.q0;
    TcProbedChunks seq{probes, cstart, ccount, probe_ptr[tile.list], probe_ptr[tile.list + 1], 0, 0};
    tc_bound_block(refs, rb_up, nrm, n, ks, refs + (q0 / KT_Q) * ks * 1024, nrm + q0,
                   [&](u32 qr) { return ids[q0 + qr] != ~0u; }, k, ka, kc_err, kf, ke, nbuf,
                   seq, tau + q0);
}

// Pass 2 of the inverted file, for the slots from s0 (the blocks' slots lie in s0 ..): rows
// slot - s0 of cand (cells), counts and uncertain.
extern "C" __global__ void __launch_bounds__(KT_THREADS)
ivf_tensor_collect(const float* __restrict__ refs, const float* __restrict__ rb_lo,
                   const float* __restrict__ nrm, u64 n, u32 ks, const u32* __restrict__ ids,
                   const u32* __restrict__ tiles, const u32* __restrict__ probe_ptr,
                   const u32* __restrict__ probes, const u32* __restrict__ cstart,
                   const u32* __restrict__ ccount, float ka, u32 nbuf, const float* __restrict__ tau,
                   u64 s0, u32 width, u32* __restrict__ cand, u32* __restrict__ counts,
                   u8* __restrict__ uncertain, u32* __restrict__ n_uncertain) {
    const IvfTile tile(tiles);
    const u64 q0 = tile.q0, row0 = q0 - s0;
    TcProbedChunks seq{probes, cstart, ccount, probe_ptr[tile.list], probe_ptr[tile.list + 1], 0, 0};
    tc_collect_block(refs, rb_lo, nrm, n, ks, refs + (q0 / KT_Q) * ks * 1024, nrm + q0,
                     [&](u32 qr) { return ids[q0 + qr] != ~0u; }, ka, nbuf, seq, tau + q0, width,
                     ids, cand + row0 * width, counts + row0, uncertain + row0, n_uncertain);
}

// Column sums in f64 and largest magnitudes of rows [b * per, (b + 1) * per) of x, one block
// each: partial[b * d + t], largest[b * d + t]. (The centre only has to be some vector near the
// data: the bound counts its rounding; the magnitudes choose the scale.)
extern "C" __global__ void tc_column_sums(const float* __restrict__ x, u64 n, u32 d, u64 per,
                                          double* __restrict__ partial,
                                          float* __restrict__ largest) {
    u64 r0 = blockIdx.x * per, r1 = min(n, r0 + per);
    for (u32 t = threadIdx.x; t < d; t += blockDim.x) {
        double s = 0.0;
        float m = 0.0f;
        for (u64 i = r0; i < r1; ++i) {
            float v = x[i * d + t];
            s += (double)v;
            m = fmaxf(m, fabsf(v));
        }
        partial[(u64)blockIdx.x * d + t] = s;
        largest[(u64)blockIdx.x * d + t] = m;
    }
}
