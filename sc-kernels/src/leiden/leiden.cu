// The parallel Leiden algorithm's rounds (leiden/parallel.rs is the CPU twin, function for
// function). Weights, strengths and community totals are 64-bit fixed-point integers summed with
// integer atomics: exact in any order. Gains are computed in f64 with the twin's operation order
// (the `_rn` intrinsics forbid fused multiply-adds), and every decision is an arg-max under a
// total order (value, then smallest id), so the result does not depend on the order threads run
// in or on where a key lands in a hash table: the same bits as the twin.
//
// Neighbour sums per community use one open-addressing table per node (per coarse row when
// aggregating) in global memory: a power of two of at least twice the row's length, cleared by
// its warp before use, keys inserted with atomicCAS, weights added with atomicAdd.

#define EMPTY_KEY 0xffffffffu

// parallel.rs `coloured`.
__device__ __forceinline__ bool coloured(u64 seed, u64 stream, u64 v) {
    return (hash3(seed, stream, v) & 1ull) == 0ull;
}

// parallel.rs `may_move`.
__device__ __forceinline__ bool may_move(u64 seed, u64 stream, u64 v) {
    return (hash3(seed, stream, v) & 3ull) == 0ull;
}

// parallel.rs `gumbel`.
__device__ __forceinline__ double gumbel(u64 seed, u64 stream, u32 v, u32 r) {
    u64 h = hash3(seed, stream | 1ull, ((u64)v << 32) | (u64)r);
    double u = __dmul_rn(__dadd_rn((double)(h >> 12), 0.5), 2.220446049250313e-16);
    return -ln_pos(-ln_pos(u));
}

// Consts::gain: w - (k K) scale.
__device__ __forceinline__ double gain_of(u64 w, u64 k, u64 big_k, double scale) {
    return __dsub_rn((double)w, __dmul_rn(__dmul_rn((double)k, (double)big_k), scale));
}

// Consts::well_connected: ext >= (s (c - s)) scale.
__device__ __forceinline__ bool well_connected(u64 ext, u64 s, u64 c, double scale) {
    return (double)ext >= __dmul_rn(__dmul_rn((double)s, (double)(c - s)), scale);
}

// Consts::key: (gain unit) / beta + noise.
__device__ __forceinline__ double key_of(double gain, double unit, double beta, double noise) {
    return __dadd_rn(__ddiv_rn(__dmul_rn(gain, unit), beta), noise);
}

__device__ __forceinline__ bool better(double v, u32 id, double best, u32 best_id) {
    return v > best || (v == best && id < best_id);
}

// The warp's best (value, id); every lane gets it.
__device__ __forceinline__ void warp_best(double* v, u32* id) {
    for (int o = 16; o > 0; o >>= 1) {
        double ov = __shfl_xor_sync(FULL_MASK, *v, o);
        u32 oi = __shfl_xor_sync(FULL_MASK, *id, o);
        if (better(ov, oi, *v, *id)) {
            *v = ov;
            *id = oi;
        }
    }
}

__device__ __forceinline__ void table_add(u32* keys, u64* vals, u64 mask, u32 key, u64 w) {
    u64 s = (u64)(key * 2654435761u) & mask;
    while (true) {
        u32 k = atomicCAS(&keys[s], EMPTY_KEY, key);
        if (k == EMPTY_KEY || k == key) {
            atomicAdd(&vals[s], w);
            return;
        }
        s = (s + 1) & mask;
    }
}

__device__ __forceinline__ void table_clear(u32* keys, u64* vals, u64 size, int lane) {
    for (u64 i = lane; i < size; i += 32) {
        __stcg(&keys[i], EMPTY_KEY);
        __stcg(&vals[i], 0ull);
    }
}

// Node v's row summed by key into its own hash table (`keys`/`vals` from tbl_off[v], a warp
// per node): key(u) of each neighbour u other than v, EMPTY_KEY to leave u out.
struct RowTable {
    u32* K;
    u64* V;
    u64 size;
};
template <typename Key>
__device__ __forceinline__ RowTable row_table(const u64* indptr, const u32* indices, const u64* w,
                                              const u64* tbl_off, u32* keys, u64* vals, u64 v,
                                              int lane, Key key) {
    const u64 tb = tbl_off[v], beg = indptr[v], end = indptr[v + 1];
    const RowTable t{keys + tb, vals + tb, tbl_off[v + 1] - tb};
    table_clear(t.K, t.V, t.size, lane);
    __syncwarp();
    for (u64 e = beg + lane; e < end; e += 32) {
        u32 u = indices[e];
        if ((u64)u == v) continue;
        u32 c = key(u);
        if (c != EMPTY_KEY) table_add(t.K, t.V, t.size - 1, c, w[e]);
    }
    __syncwarp();
    return t;
}

__device__ __forceinline__ u64 table_size_for(u64 len) {
    if (len == 0) return 0;
    u64 s = 1;
    while (s < 2 * len) s <<= 1;
    return s;
}

#define WARP_LOOP(v, n)                                                                  \
    int lane = threadIdx.x & 31;                                                         \
    u64 first_warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;                  \
    u64 n_warps = ((u64)gridDim.x * blockDim.x) >> 5;                                    \
    for (u64 v = first_warp; v < (n); v += n_warps)

// sizes[v]: the table of row v (a power of two >= 2 * its length, 0 for an empty row).
extern "C" __global__ void table_sizes(const u64* indptr, u64 n, u64* sizes) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) sizes[v] = table_size_for(indptr[v + 1] - indptr[v]);
}

// The same from lengths.
extern "C" __global__ void table_sizes_of_lens(const u64* lens, u64 n, u64* sizes) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) sizes[v] = table_size_for(lens[v]);
}

extern "C" __global__ void iota_u32(u32* out, u64 n) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) out[v] = (u32)v;
}

extern "C" __global__ void copy_u32(const u32* in, u32* out, u64 n) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) out[v] = in[v];
}

extern "C" __global__ void fill_empty(u32* keys, u64 n) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) keys[v] = EMPTY_KEY;
}

// Strength and size of each community (arrays zeroed).
extern "C" __global__ void comm_totals(const u32* part, const u64* strength, u64 n,
                                       u64* comm_strength, u32* comm_size) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    atomicAdd(&comm_strength[part[v]], strength[v]);
    atomicAdd(&comm_size[part[v]], 1u);
}

// parallel.rs `best_move` for the nodes that may move in a round (a warp per node): target[v].
extern "C" __global__ void lm_best(const u64* indptr, const u32* indices, const u64* w,
                                   const u64* strength, const u32* part,
                                   const u64* comm_strength, const u32* comm_size,
                                   const u64* tbl_off, u32* keys, u64* vals, u64 n,
                                   double scale, int up, u64 seed, u64 stream, u32* target) {
    WARP_LOOP(v, n) {
        u32 cur = part[v];
        if (!may_move(seed, stream, v)) {
            if (lane == 0) target[v] = cur;
            continue;
        }
        const RowTable t = row_table(indptr, indices, w, tbl_off, keys, vals, v, lane,
                                     [&](u32 u) { return part[u]; });
        u32* K = t.K;
        u64* V = t.V;
        const u64 ts = t.size;
        u64 k = strength[v];
        u64 w_cur = 0;
        double best = __longlong_as_double((long long)0xfff0000000000000ull);
        u32 best_c = EMPTY_KEY;
        for (u64 i = lane; i < ts; i += 32) {
            u32 c = __ldcg(&K[i]);
            if (c == EMPTY_KEY) continue;
            u64 wc = __ldcg(&V[i]);
            if (c == cur) {
                w_cur = wc;
                continue;
            }
            if (up ? c > cur : c < cur) {
                double g = gain_of(wc, k, comm_strength[c], scale);
                if (better(g, c, best, best_c)) {
                    best = g;
                    best_c = c;
                }
            }
        }
        w_cur = warp_sum_u64(w_cur);
        warp_best(&best, &best_c);
        if (lane == 0) {
            double stay = gain_of(w_cur, k, comm_strength[cur] - k, scale);
            if (comm_size[v] == 0 && comm_size[cur] > 1 && better(0.0, (u32)v, best, best_c)) {
                best = 0.0;
                best_c = (u32)v;
            }
            target[v] = best > stay ? best_c : cur;
        }
        __syncwarp();
    }
}

// The moves applied; moved[round] counts them.
extern "C" __global__ void lm_apply(u32* part, const u32* target, const u64* strength,
                                    u64* comm_strength, u32* comm_size, u64 n, u64* moved,
                                    u32 round) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    bool moves = false;
    if (v < n) {
        u32 from = part[v], to = target[v];
        if (from != to) {
            u64 k = strength[v];
            atomicAdd(&comm_strength[from], 0ull - k);
            atomicSub(&comm_size[from], 1u);
            atomicAdd(&comm_strength[to], k);
            atomicAdd(&comm_size[to], 1u);
            part[v] = to;
            moves = true;
        }
    }
    unsigned b = __ballot_sync(FULL_MASK, moves);
    if ((threadIdx.x & 31) == 0 && b) atomicAdd(&moved[round], (u64)__popc(b));
}

// Renumbering: used[part[v]] = 1 (zeroed before), then the scan's offsets applied.
extern "C" __global__ void mark_used(const u32* part, u64 n, u64* used) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) used[part[v]] = 1ull;
}

extern "C" __global__ void apply_map(u32* part, u64 n, const u64* map) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) part[v] = (u32)map[part[v]];
}

// parallel.rs `refined_totals` (a warp per node; arrays zeroed).
extern "C" __global__ void ref_totals(const u64* indptr, const u32* indices, const u64* w,
                                      const u64* strength, const u32* part, const u32* refined,
                                      u64 n, u32* rsize, u64* rstrength, u64* rext) {
    WARP_LOOP(v, n) {
        u32 p = part[v], r = refined[v];
        u64 ext = 0;
        for (u64 e = indptr[v] + lane; e < indptr[v + 1]; e += 32) {
            u32 u = indices[e];
            if ((u64)u != v && part[u] == p && refined[u] != r) ext += w[e];
        }
        ext = warp_sum_u64(ext);
        if (lane == 0) {
            atomicAdd(&rsize[r], 1u);
            atomicAdd(&rstrength[r], strength[v]);
            atomicAdd(&rext[r], ext);
        }
    }
}

// The round's movers: not yet visited, alone, coloured; marked visited; count[round] counts.
extern "C" __global__ void ref_movers(const u32* refined, const u32* rsize, u64 n, u64 seed,
                                      u64 stream, u8* visited, u8* mover, u64* count, u32 round) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    bool m = false;
    if (v < n) {
        m = !visited[v] && rsize[refined[v]] == 1u && coloured(seed, stream, v);
        mover[v] = m ? 1 : 0;
        if (m) visited[v] = 1;
    }
    unsigned b = __ballot_sync(FULL_MASK, m);
    if ((threadIdx.x & 31) == 0 && b) atomicAdd(&count[round], (u64)__popc(b));
}

// parallel.rs `refine_one` for the movers (a warp per node): target[v] (refined[v] otherwise).
extern "C" __global__ void ref_best(const u64* indptr, const u32* indices, const u64* w,
                                    const u64* strength, const u32* part,
                                    const u64* comm_strength, const u32* refined,
                                    const u8* mover, const u32* rsize, const u64* rstrength,
                                    const u64* rext, const u64* tbl_off, u32* keys, u64* vals,
                                    u64 n, double scale, double unit, double beta, u64 seed,
                                    u64 stream, u32* target) {
    WARP_LOOP(v, n) {
        u32 own = refined[v];
        if (!mover[v]) {
            if (lane == 0) target[v] = own;
            continue;
        }
        u32 p = part[v];
        u64 total = comm_strength[p], k = strength[v];
        if (!well_connected(rext[own], k, total, scale)) {
            if (lane == 0) target[v] = own;
            continue;
        }
        const RowTable t =
            row_table(indptr, indices, w, tbl_off, keys, vals, v, lane,
                      [&](u32 u) { return part[u] == p ? refined[u] : EMPTY_KEY; });
        u32* K = t.K;
        u64* V = t.V;
        const u64 ts = t.size;
        double best = key_of(0.0, unit, beta, gumbel(seed, stream, (u32)v, own));
        u32 best_r = own;
        for (u64 i = lane; i < ts; i += 32) {
            u32 r = __ldcg(&K[i]);
            if (r == EMPTY_KEY || r == own) continue;
            if (rsize[r] < 2u && mover[r]) continue;
            u64 s = rstrength[r];
            if (!well_connected(rext[r], s, total, scale)) continue;
            double g = gain_of(__ldcg(&V[i]), k, s, scale);
            if (g >= 0.0) {
                double key = key_of(g, unit, beta, gumbel(seed, stream, (u32)v, r));
                if (better(key, r, best, best_r)) {
                    best = key;
                    best_r = r;
                }
            }
        }
        warp_best(&best, &best_r);
        if (lane == 0) target[v] = best_r;
        __syncwarp();
    }
}

// next_part[into[v]] = part[v] (every member writes the same value).
extern "C" __global__ void next_partition(const u32* into, const u32* part, u64 n, u32* next_part) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) next_part[into[v]] = part[v];
}

// node_of[i] = into[node_of[i]].
extern "C" __global__ void compose(u32* node_of, const u32* into, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) node_of[i] = into[node_of[i]];
}

// Coarse rows' length bounds and strengths (arrays zeroed).
extern "C" __global__ void agg_sizes(const u64* indptr, const u32* into, const u64* strength,
                                     u64 n, u64* lens, u64* cstrength) {
    u64 v = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= n) return;
    atomicAdd(&lens[into[v]], indptr[v + 1] - indptr[v]);
    atomicAdd(&cstrength[into[v]], strength[v]);
}

// Every edge between two communities added to its coarse row's table (a warp per fine node).
extern "C" __global__ void agg_insert(const u64* indptr, const u32* indices, const u64* w,
                                      const u32* into, u64 n, const u64* tbl_off, u32* keys,
                                      u64* vals) {
    WARP_LOOP(v, n) {
        u32 r = into[v];
        u64 tb = tbl_off[r], ts = tbl_off[r + 1] - tb;
        for (u64 e = indptr[v] + lane; e < indptr[v + 1]; e += 32) {
            u32 t = into[indices[e]];
            if (t != r) table_add(keys + tb, vals + tb, ts - 1, t, w[e]);
        }
    }
}

// Distinct targets of each coarse row (a warp per row).
extern "C" __global__ void agg_count(const u64* tbl_off, const u32* keys, u64 k, u64* counts) {
    WARP_LOOP(r, k) {
        u64 tb = tbl_off[r], ts = tbl_off[r + 1] - tb;
        u64 c = 0;
        for (u64 i = lane; i < ts; i += 32) c += keys[tb + i] != EMPTY_KEY ? 1ull : 0ull;
        c = warp_sum_u64(c);
        if (lane == 0) counts[r] = c;
    }
}

// The coarse rows written in table order (a warp per row).
extern "C" __global__ void agg_compact(const u64* tbl_off, const u32* keys, const u64* vals,
                                       u64 k, const u64* indptr, u32* indices, u64* w) {
    WARP_LOOP(r, k) {
        u64 tb = tbl_off[r], ts = tbl_off[r + 1] - tb;
        u64 base = indptr[r];
        for (u64 i0 = 0; i0 < ts; i0 += 32) {
            u64 i = i0 + lane;
            bool occupied = i < ts && keys[tb + i] != EMPTY_KEY;
            unsigned b = __ballot_sync(FULL_MASK, occupied);
            if (occupied) {
                u64 pos = base + __popc(b & ((1u << lane) - 1u));
                indices[pos] = keys[tb + i];
                w[pos] = vals[tb + i];
            }
            base += __popc(b);
        }
    }
}
