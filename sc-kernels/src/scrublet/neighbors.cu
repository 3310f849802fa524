// Scrublet's neighbour counts (neighbors_gpu.rs): for each point, the doublets (cells >= n_obs)
// among its `keep` nearest other candidates, by (squared f64 distance, cell index), the host's
// order (neighbors.rs) with the same sums.
//
// A block takes QB points of one list at a time (a tile, fetched from a shared counter), which
// share their candidates (the cells of the lists that list probes). Their distances are
// computed once, into the block's own slot of `scratch` (a row of keys per point: the f64
// distance's bits, the top bit set for a doublet, NONE for no candidate), with each point's
// smallest and largest key; the bits those share are every key's. Then a radix select on the
// stored keys: each pass histograms the next 8 bits (256 bins, and the doublets' own
// histogram) of the keys that match the point's prefix so far, takes the bins below the one
// holding the `need`-th key whole, and goes on inside that bin, until the bin is taken whole or
// its keys are equal; equal keys order by index, so observed cells (< n_obs) come before
// doublets. A point whose smallest key is 0 coincides with a candidate (`coincident`).

#define QB 32
#define BINS 256
#define MAXD 64
#define DOUBLET (1ull << 63)
#define NONE 0x7fffffffffffffffull  // above every distance's bits, +inf included

__device__ __forceinline__ double sq_dist(const double* q, const float* x, u32 d) {
    double s = 0.0;
    for (u32 t = 0; t < d; ++t) {
        double u = q[t] - (double)x[t];
        s = __dadd_rn(s, __dmul_rn(u, u));  // no fused multiply-add: the host's bits
    }
    return s;
}

extern "C" __global__ void scrublet_counts(
    const float* __restrict__ xp,        // positions x d, list order (padding rows unused)
    const u32* __restrict__ perm,        // position -> cell (~0: padding)
    const u64* __restrict__ starts,      // per list
    const u32* __restrict__ sizes,       // per list
    const u32* __restrict__ probe_ptr,   // CSR over lists
    const u32* __restrict__ probes,
    const u32* __restrict__ tiles,       // (list, first position) per tile
    u32 n_tiles,
    u32* __restrict__ next_tile,         // the tiles handed out so far (starts at 0)
    u64* __restrict__ scratch,           // gridDim.x slots of QB x stride keys
    u64 stride,                          // the most candidates of any list
    u32 n_obs, u32 keep, u32 d,
    u32* __restrict__ counts,            // per cell
    u32* __restrict__ coincident)
{
    extern __shared__ double smem[];
    double* qs = smem;                                 // QB x d
    u32* hist = (u32*)(qs + QB * d);                   // QB x BINS
    u32* simh = hist + QB * BINS;                      // QB x BINS
    __shared__ u64 kmin[QB], kmax[QB], pref[QB];
    __shared__ u32 nbits[QB], need[QB], below[QB], done[QB], cell[QB];
    __shared__ u32 zero_seen, tile;

    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
    u64* keys = scratch + (u64)blockIdx.x * QB * stride;
    float xr[MAXD];

    for (;;) {
        if (tid == 0) tile = atomicAdd(next_tile, 1u);
        __syncthreads();
        const u32 t = tile;
        if (t >= n_tiles) return;
        const u32 l = tiles[2 * t];
        const u64 p0 = tiles[2 * t + 1];
        const u64 end = starts[l] + sizes[l];
        const u32 nq = end - p0 < (u64)QB ? (u32)(end - p0) : (u32)QB;
        for (u32 i = tid; i < nq * d; i += blockDim.x)
            qs[i] = (double)xp[(p0 + i / d) * d + i % d];
        if (tid < QB) {
            kmin[tid] = ~0ull; kmax[tid] = 0ull; pref[tid] = 0ull;
            nbits[tid] = 0; need[tid] = keep; below[tid] = 0;
            done[tid] = (tid >= nq || keep == 0) ? 1u : 0u;
            cell[tid] = tid < nq ? perm[p0 + tid] : ~0u;
        }
        if (tid == 0) zero_seen = 0;
        __syncthreads();

        // The keys of every candidate, and each point's smallest and largest (warp-reduced,
        // then shared atomics).
        const u32 pb = probe_ptr[l], pe = probe_ptr[l + 1];
        u64 n_cand = 0;
        for (u32 pi = pb; pi < pe; ++pi) {
            const u32 m = probes[pi];
            const u64 s = starts[m], e = s + sizes[m];
            for (u64 base = s; base < e; base += blockDim.x) {
                const u64 c = base + tid;
                const u32 cc = c < e ? perm[c] : ~0u;
                if (cc != ~0u) for (u32 k = 0; k < d; ++k) xr[k] = xp[c * d + k];
                const u64 slot = n_cand + (c - s);
                for (u32 q = 0; q < nq; ++q) {
                    u64 lo = ~0ull, hi = 0ull;
                    if (cc != ~0u && cc != cell[q]) {
                        const u64 key = (u64)__double_as_longlong(sq_dist(qs + q * d, xr, d));
                        lo = key; hi = key;
                        keys[q * stride + slot] = key | (cc >= n_obs ? DOUBLET : 0ull);
                    } else if (c < e) {
                        keys[q * stride + slot] = NONE;
                    }
                    for (int o = 16; o > 0; o >>= 1) {
                        const u64 a = __shfl_xor_sync(FULL_MASK, lo, o);
                        const u64 b = __shfl_xor_sync(FULL_MASK, hi, o);
                        lo = a < lo ? a : lo;
                        hi = b > hi ? b : hi;
                    }
                    if (lane == 0 && lo != ~0ull) {
                        atomicMin(&kmin[q], lo);
                        atomicMax(&kmax[q], hi);
                    }
                }
            }
            n_cand += e - s;
        }
        __syncthreads();
        if (tid < nq) {
            if (kmin[tid] == 0ull) zero_seen = 1;
            if (kmin[tid] == ~0ull) {
                done[tid] = 1;  // no candidate: nothing to count
            } else {
                const u32 nb = kmin[tid] == kmax[tid] ? 64u
                                                     : (u32)__clzll((long long)(kmin[tid] ^ kmax[tid]));
                nbits[tid] = nb;
                pref[tid] = nb == 0 ? 0ull : kmin[tid] >> (64 - nb);
            }
        }
        __syncthreads();

        while (__syncthreads_or(tid < nq && !done[tid])) {
            for (u32 i = tid; i < QB * BINS; i += blockDim.x) { hist[i] = 0; simh[i] = 0; }
            __syncthreads();
            // A warp per point: its row of keys read once per pass.
            for (u32 q = warp; q < nq; q += warps) {
                if (done[q]) continue;
                const u64* row = keys + q * stride;
                const u32 nb = nbits[q], w = 64u - nb < 8u ? 64u - nb : 8u;
                const u64 p = pref[q];
                for (u64 c = lane; c < n_cand; c += 32) {
                    const u64 raw = row[c];
                    if (raw == NONE) continue;
                    const u64 key = raw & ~DOUBLET;
                    if (nb > 0 && (key >> (64 - nb)) != p) continue;
                    const u32 digit = w == 0 ? 0u : (u32)((key << nb) >> (64 - w));
                    atomicAdd(&hist[q * BINS + digit], 1u);
                    if (raw & DOUBLET) atomicAdd(&simh[q * BINS + digit], 1u);
                }
            }
            __syncthreads();
            if (tid < nq && !done[tid]) {
                const u32 q = tid, nb = nbits[q], w = 64u - nb < 8u ? 64u - nb : 8u;
                const u32* h = hist + q * BINS;
                const u32* sh = simh + q * BINS;
                u32 acc = 0, sims = 0, b = 0;
                const u32 nbins = 1u << w;
                while (b < nbins && acc + h[b] < need[q]) { acc += h[b]; sims += sh[b]; ++b; }
                below[q] += sims;
                if (b == nbins) {
                    done[q] = 1;  // fewer candidates than `keep`: all of them
                } else {
                    const u32 left = need[q] - acc;
                    if (h[b] == left) {
                        below[q] += sh[b];
                        done[q] = 1;
                    } else if (w == 0) {
                        // Equal keys: by index, the observed cells first.
                        const u32 obs = h[b] - sh[b];
                        below[q] += left > obs ? left - obs : 0u;
                        done[q] = 1;
                    } else {
                        need[q] = left;
                        pref[q] = (pref[q] << w) | b;
                        nbits[q] = nb + w;
                    }
                }
            }
        }
        if (tid < nq) counts[cell[tid]] = below[tid];
        if (tid == 0 && zero_seen) atomicOr(coincident, 1u);
        __syncthreads();
    }
}
