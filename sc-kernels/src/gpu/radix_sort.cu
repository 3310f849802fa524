// Least-significant-digit radix sort of u64 keys, 8 bits a pass, three launches a pass: a
// histogram of each tile's digits, an exclusive scan of the histograms in digit-major order
// (scan.cu: each tile's first position for each digit), and a stable scatter. Every count is an
// integer, so the result does not depend on the order threads run in.
#define RS_THREADS 256
#define RS_ITEMS 16
#define RS_TILE (RS_THREADS * RS_ITEMS)
#define RS_DIGITS 256
#define RS_WARPS (RS_THREADS / 32)

// counts[d * n_tiles + tile] = the keys of the tile whose digit at `shift` is d.
extern "C" __global__ void radix_histogram(const u64* keys, u64 n, u32 shift, u64 n_tiles,
                                           u64* counts) {
    __shared__ u32 hist[RS_DIGITS];
    hist[threadIdx.x] = 0u;
    __syncthreads();
    u64 base = (u64)blockIdx.x * RS_TILE;
    for (int k = 0; k < RS_ITEMS; ++k) {
        u64 i = base + (u64)k * RS_THREADS + threadIdx.x;
        if (i < n) atomicAdd(&hist[(u32)(keys[i] >> shift) & 255u], 1u);
    }
    __syncthreads();
    counts[(u64)threadIdx.x * n_tiles + blockIdx.x] = (u64)hist[threadIdx.x];
}

// Each tile's keys to their places: offsets[d * n_tiles + tile] is where the tile's first key of
// digit d goes. Stable: the tile is read in rounds of RS_THREADS keys in order, and a key's
// place counts the keys of its digit before it in earlier rounds (next[d]), in earlier warps of
// its round (per-warp counts) and in lower lanes of its warp (__match_any_sync).
extern "C" __global__ void radix_scatter(const u64* keys, u64* out, u64 n, u32 shift, u64 n_tiles,
                                         const u64* offsets) {
    __shared__ u64 next[RS_DIGITS];
    __shared__ u32 warp_counts[RS_WARPS][RS_DIGITS];
    int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    next[t] = offsets[(u64)t * n_tiles + blockIdx.x];
    u64 base = (u64)blockIdx.x * RS_TILE;
    for (int k = 0; k < RS_ITEMS; ++k) {
        for (int w = 0; w < RS_WARPS; ++w) warp_counts[w][t] = 0u;
        __syncthreads();
        u64 i = base + (u64)k * RS_THREADS + t;
        bool valid = i < n;
        u64 key = valid ? keys[i] : 0ull;
        u32 d = (u32)(key >> shift) & 255u;
        // Past the end, a digit no key has: those lanes match only each other.
        u32 peers = __match_any_sync(FULL_MASK, valid ? d : RS_DIGITS);
        u32 before = __popc(peers & ((1u << lane) - 1u));
        if (valid && before == 0u) warp_counts[warp][d] = __popc(peers);
        __syncthreads();
        if (valid) {
            u64 pos = next[d] + before;
            for (int w = 0; w < warp; ++w) pos += warp_counts[w][d];
            out[pos] = key;
        }
        __syncthreads();
        u32 round = 0u;
        for (int w = 0; w < RS_WARPS; ++w) round += warp_counts[w][t];
        next[t] += round;
        __syncthreads();
    }
}
