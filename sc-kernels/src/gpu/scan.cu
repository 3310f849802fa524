// Exclusive prefix sums of u64 counts in three launches: per-block scans, a scan of the block
// totals (one block looping with a carry), and the block offsets added back.
#define SCAN_THREADS 1024
#define SCAN_ITEMS 4
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)

// out[i] = sum of in[tile start .. i) within the tile; block_sums[b] = tile total.
extern "C" __global__ void scan_tiles(const u64* in, u64* out, u64* block_sums, u64 n) {
    __shared__ u64 warp_tot[32];
    u64 base = (u64)blockIdx.x * SCAN_TILE + (u64)threadIdx.x * SCAN_ITEMS;
    u64 vals[SCAN_ITEMS];
    u64 mine = 0;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        vals[k] = (base + k < n) ? in[base + k] : 0ull;
        mine += vals[k];
    }
    u64 total;
    u64 incl = block_inclusive_scan(mine, warp_tot, &total);
    u64 run = incl - mine;
#pragma unroll
    for (int k = 0; k < SCAN_ITEMS; ++k) {
        if (base + k < n) out[base + k] = run;
        run += vals[k];
    }
    if (threadIdx.x == 0) block_sums[blockIdx.x] = total;
}

// In place: block_sums becomes exclusive; total[0] = the sum of all. One block.
extern "C" __global__ void scan_block_sums(u64* block_sums, u64 nb, u64* total) {
    __shared__ u64 warp_tot[32];
    u64 carry = 0;
    for (u64 start = 0; start < nb; start += SCAN_THREADS) {
        u64 i = start + threadIdx.x;
        u64 v = (i < nb) ? block_sums[i] : 0ull;
        u64 chunk;
        u64 incl = block_inclusive_scan(v, warp_tot, &chunk);
        if (i < nb) block_sums[i] = carry + incl - v;
        carry += chunk;
    }
    if (threadIdx.x == 0) total[0] = carry;
}

// out[i] += offset of its tile; out[n] = total.
extern "C" __global__ void add_tile_offsets(u64* out, const u64* block_offsets, u64 n, const u64* total) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += block_offsets[i / SCAN_TILE];
    if (i == 0) out[n] = total[0];
}
