// NN-descent's local join on an approximate kNN (`mod.rs` beside this file). First the reverse lists: the
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
            td[t] = ok ? exact_distance(xi, x + (u64)j * d, d) : __longlong_as_double(0x7ff0000000000000ll);
            tj[t] = ok ? j : ~0u;
        }
        __syncwarp();
        if (lane == 0) {
            for (u32 a = 1; a < m; ++a) {
                double v = td[a];
                u32 j = tj[a], b = a;
                while (b > 0 && nearer_first(v, j, td[b - 1], tj[b - 1])) {
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
                    v = exact_distance(xi, x + (u64)z * d, d);
                    pass = nearer_first(v, z, td[m - 1], tj[m - 1]);
                }
            }
            unsigned want = __ballot_sync(0xffffffffu, pass);
            while (want) {
                const int b = __ffs(want) - 1;
                want &= want - 1;
                const double w = __shfl_sync(0xffffffffu, v, b);
                const u32 l = __shfl_sync(0xffffffffu, z, b);
                if (lane == 0 && nearer_first(w, l, td[m - 1], tj[m - 1])) {
                    bool dup = false;
                    for (u32 a = 0; a < m && !dup; ++a) dup = tj[a] == l;
                    if (!dup) {
                        u32 p = m - 1;
                        while (p > 0 && nearer_first(w, l, td[p - 1], tj[p - 1])) {
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
