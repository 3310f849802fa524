// Synthetic counts made on the device, cell by cell: the same hashes, draws and formulas as
// the CPU twin (synth/mod.rs), so both give the same gene sets, and the same counts wherever
// the device's log/exp/cos round as the host's (they differ in the last bit at most, which
// moves a count only when a quotient lands within that bit of an integer).
//
// One block of SYNTH_THREADS threads per cell; the cell's gene set is a bitmap in dynamic
// shared memory. Run twice: first with indptr == 0 (writes each row's length), then with the
// scanned offsets (writes the rows, gene indices ascending). A cell's batch and type come from
// integer hashes alone: the host takes them from the CPU twin.

#define SYNTH_THREADS 256
#define GOLDEN 0x9e3779b97f4a7c15ull
#define VALUE_SALT 0x5851f42d4c957f2dull
#define C_BATCH 0ull
#define C_TYPE 1ull
#define C_LOW 2ull
#define C_WANTED 3ull
#define C_LIB1 4ull
#define C_LIB2 5ull
#define C_DRAW0 16ull
#define MAX_DRAWS_PER_GENE 64ull

__device__ __forceinline__ u64 cell_key(u64 seed, u64 cell) {
    return mix64(seed ^ mix64((cell + 1ull) * GOLDEN));
}
__device__ __forceinline__ u64 rnd(u64 key, u64 counter) {
    return mix64(key + (counter + 1ull) * GOLDEN);
}
__device__ __forceinline__ double unit01(u64 r) {
    return (double)(r >> 11) * __longlong_as_double(0x3CA0000000000000ll);  // 2^-53
}
__device__ __forceinline__ u64 below(u64 r, u64 n) { return ((r >> 32) * n) >> 32; }

// The model's scalars, in the order the launch passes them.
struct SynthParams {
    u64 seed, first_cell, n_cells;
    u32 n_genes, n_batches, n_types, gpc_lo, gpc_hi, lq_lo, lq_hi, nb_shape;
    double lq_fraction, density, library_sigma, mean_extra;
};

extern "C" __global__ void synth_cells(u64 seed, u64 first_cell, u64 n_cells, u32 n_genes,
                                       u32 n_batches, u32 n_types, u32 gpc_lo, u32 gpc_hi,
                                       u32 lq_lo, u32 lq_hi, u32 nb_shape, double lq_fraction,
                                       double density, double library_sigma, double mean_extra,
                                       const float* __restrict__ prob,
                                       const u32* __restrict__ alias,
                                       const double* __restrict__ relative,
                                       const u64* __restrict__ cell_list, u64* row_lengths,
                                       const u64* indptr, u32* indices, float* data) {
    const SynthParams p = {seed,    first_cell, n_cells,     n_genes,       n_batches,
                           n_types, gpc_lo,     gpc_hi,      lq_lo,         lq_hi,
                           nb_shape, lq_fraction, density, library_sigma, mean_extra};
    extern __shared__ u32 bits[];
    __shared__ u32 found_sh;
    __shared__ u64 warp_tot[32];
    u64 local = blockIdx.x;
    if (local >= p.n_cells) return;
    // Consecutive cells from first_cell, or the cells cell_list names.
    u64 cell = cell_list ? cell_list[local] : p.first_cell + local;
    u64 key = cell_key(p.seed, cell);
    u32 batch = (u32)below(rnd(key, C_BATCH), p.n_batches);
    u32 type = (u32)below(rnd(key, C_TYPE), p.n_types);
    bool low = unit01(rnd(key, C_LOW)) < p.lq_fraction;
    u32 lo = low ? p.lq_lo : p.gpc_lo, hi = low ? p.lq_hi : p.gpc_hi;
    u64 drawn = lo + below(rnd(key, C_WANTED), (u64)(hi - lo) + 1ull);
    double w = round((double)drawn * p.density);
    u64 wanted = w < 1.0 ? 1ull : (w > (double)p.n_genes ? (u64)p.n_genes : (u64)w);
    u64 group = (u64)batch * p.n_types + type;
    const float* gp = prob + group * p.n_genes;
    const u32* ga = alias + group * p.n_genes;

    u32 words = (p.n_genes + 31) / 32;
    for (u32 i = threadIdx.x; i < words; i += blockDim.x) bits[i] = 0u;
    if (threadIdx.x == 0) found_sh = 0u;
    __syncthreads();
    u64 cap = wanted * MAX_DRAWS_PER_GENE, draws = 0;
    for (;;) {
        u64 f = found_sh;
        u64 more = min(wanted - f, cap - draws);
        __syncthreads();  // every thread has read found_sh before it changes
        if (more == 0) break;
        for (u64 t = threadIdx.x; t < more; t += blockDim.x) {
            u64 r = rnd(key, C_DRAW0 + draws + t);
            u32 i = (u32)below(r, p.n_genes);
            float u = (float)(u32)(r & 0xffffffull) * (1.0f / 16777216.0f);
            u32 g = (u < gp[i]) ? i : ga[i];
            u32 bit = 1u << (g & 31);
            u32 old = atomicOr(&bits[g >> 5], bit);
            if (!(old & bit)) atomicAdd(&found_sh, 1u);
        }
        draws += more;
        __syncthreads();
    }
    if (indptr == 0) {
        if (threadIdx.x == 0) row_lengths[local] = found_sh;
        return;
    }

    // Each thread writes the genes of a contiguous run of words, after those of the threads
    // before it.
    u32 per = (words + blockDim.x - 1) / blockDim.x;
    u32 w0 = min(words, threadIdx.x * per), w1 = min(words, w0 + per);
    u64 mine = 0;
    for (u32 i = w0; i < w1; ++i) mine += __popc(bits[i]);
    u64 total;
    u64 pos = indptr[local] + block_inclusive_scan(mine, warp_tot, &total) - mine;

    double u1 = 1.0 - unit01(rnd(key, C_LIB1));
    double u2 = unit01(rnd(key, C_LIB2));
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    double library = exp(p.library_sigma * z);
    double scale = p.mean_extra * library;
    const double* rel = relative + group * p.n_genes;
    double shape = (double)p.nb_shape;
    u64 vkey = key ^ VALUE_SALT;
    for (u32 i = w0; i < w1; ++i) {
        u32 b = bits[i];
        while (b) {
            u32 g = i * 32 + __ffs(b) - 1;
            b &= b - 1;
            double mu = scale * rel[g];
            double k = 0.0;
            if (mu > 0.0) {
                double log_q = log(mu / (shape + mu));
                for (u32 j = 0; j < p.nb_shape; ++j) {
                    double u = 1.0 - unit01(rnd(vkey, (u64)g * p.nb_shape + j));
                    k += fmin(floor(log(u) / log_q), 1e7);
                }
            }
            indices[pos] = g;
            data[pos] = (float)(1.0 + k);
            ++pos;
        }
    }
}
