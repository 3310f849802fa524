// rank_genes_groups' per-gene passes on the GPU (gpu.rs): the per-group moments as exact
// fixed-point integer sums, and the Wilcoxon rank sums from each gene's values sorted on the
// device. Every sum is an integer, so neither depends on the order threads run in; explicit
// zeros (and -0.0) are skipped, as the CPU's gene columns skip them.

// A key whose unsigned order is the numeric order of finite floats (rank_genes/gene_stats.rs).
__device__ __forceinline__ u32 order_key(float v) {
    u32 b = __float_as_uint(v);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}

// One warp per row: each gene's count of stored non-zero values and the largest |value| (as
// the bits of a non-negative float, whose order is the numeric one); first_bad[0] the first
// position of a value that is not finite, first_bad[1] of a gene index out of range (both
// u64::MAX when there are none; the other kernels run only then).
extern "C" __global__ void rg_scan_values(const u64* indptr, const u32* indices, const float* data,
                                          u64 n_rows, u64 n_genes, u64* nnz_gene, u32* max_bits,
                                          u64* first_bad) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        u32 m = 0u;
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            float v = data[p];
            u32 gene = indices[p];
            u32 a = __float_as_uint(v) & 0x7fffffffu;
            if (gene >= n_genes) {
                atomicMin(&first_bad[1], p);
            } else if (a >= 0x7f800000u) {
                atomicMin(&first_bad[0], p);
            } else if (v != 0.0f) {
                atomicAdd(&nnz_gene[gene], 1ull);
                m = a > m ? a : m;
            }
        }
        for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(FULL_MASK, m, o));
        if (lane == 0 && m) atomicMax(max_bits, m);
    }
}

// One thread: the row, gene index and value bits of stored value `p` (for the error message).
extern "C" __global__ void rg_describe(const u64* indptr, const u32* indices, const float* data,
                                       u64 n_rows, u64 p, u64* out) {
    u64 lo = 0, hi = n_rows;  // the row r with indptr[r] <= p < indptr[r + 1]
    while (hi - lo > 1) {
        u64 mid = lo + (hi - lo) / 2;
        if (indptr[mid] <= p) lo = mid; else hi = mid;
    }
    out[0] = lo;
    out[1] = indices[p];
    out[2] = __float_as_uint(data[p]);
}

// One warp per row: per group and gene (group-major), the sums of round(v * s1) and of
// round(fl32(v * v) * s2) (s1, s2 powers of two, so the products are exact and the only rounding
// is the conversion, half to even, as fixed_moments.rs does) and the count of non-zero values.
extern "C" __global__ void rg_moments(const u64* indptr, const u32* indices, const float* data,
                                      const u32* groups, u64 n_rows, u64 n_genes, double s1,
                                      double s2, u64* sum, u64* sum_sq, u64* nnz) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        u64 off = (u64)groups[row] * n_genes;
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            float v = data[p];
            if (v == 0.0f) continue;
            u64 j = off + indices[p];
            atomicAdd(&sum[j], (u64)__double2ll_rn(__dmul_rn((double)v, s1)));
            atomicAdd(&sum_sq[j], (u64)__double2ll_rn(__dmul_rn((double)__fmul_rn(v, v), s2)));
            atomicAdd(&nnz[j], 1ull);
        }
    }
}

// One warp per row: the non-zero values of genes gene0 .. gene0 + n_chunk as keys
// (gene - gene0 | order_key(value) | group, the group in the low `gb` bits), each gene's keys
// together from its start in `cursor` (advanced atomically: their order inside the gene is
// arbitrary until sorted).
extern "C" __global__ void rg_keys(const u64* indptr, const u32* indices, const float* data,
                                   const u32* groups, u64 n_rows, u32 gene0, u32 n_chunk, u32 gb,
                                   u64* cursor, u64* keys) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        u64 g = (u64)groups[row];
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            u32 local = indices[p] - gene0;  // wraps for genes below the chunk
            float v = data[p];
            if (local >= n_chunk || v == 0.0f) continue;
            u64 at = atomicAdd(&cursor[local], 1ull);
            keys[at] = ((u64)local << (32 + gb)) | ((u64)order_key(v) << gb) | g;
        }
    }
}

// One thread per sorted key; the first key of each run of equal values of a gene walks the run:
// the run's ranks are first + 1 ..= first + run (1-based, the gene's zeros sitting between its
// negative and positive values), so each of its keys adds twice their average rank,
// 2 first + run + 1, to its group's sum; the run adds run^3 - run to the gene's tie term (a
// 128-bit sum kept in two words) and, when negative, run to the gene's negatives.
extern "C" __global__ void rg_rank_runs(const u64* keys, u64 n, u32 gb, const u64* gene_start,
                                        u64 n_cells, u32 gene0, u64 n_genes, u64* twice,
                                        u64* ties_lo, u64* ties_hi, u64* negatives) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 gmask = (1ull << gb) - 1ull;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        u64 hi = keys[i] >> gb;
        if (i > 0 && (keys[i - 1] >> gb) == hi) continue;
        u64 end = i + 1;
        while (end < n && (keys[end] >> gb) == hi) ++end;
        u64 run = end - i;
        u32 local = (u32)(hi >> 32);
        bool positive = (u32)hi >= 0x80000000u;
        u64 gene = (u64)gene0 + local;
        u64 start = gene_start[local];
        u64 zeros = n_cells - (gene_start[local + 1] - start);
        u64 first = (i - start) + (positive ? zeros : 0ull);
        u64 twice_rank = 2ull * first + run + 1ull;
        for (u64 j = i; j < end;) {
            u64 g = keys[j] & gmask;
            u64 k = j + 1;
            while (k < end && (keys[k] & gmask) == g) ++k;
            atomicAdd(&twice[g * n_genes + gene], (k - j) * twice_rank);
            j = k;
        }
        if (!positive) atomicAdd(&negatives[gene], run);
        if (run > 1) {
            u64 sq = run * run;
            u64 lo = sq * run, top = __umul64hi(sq, run);
            top -= (lo < run);
            lo -= run;
            u64 old = atomicAdd(&ties_lo[gene], lo);
            u64 carry = (old + lo < old) ? 1ull : 0ull;
            if (top + carry) atomicAdd(&ties_hi[gene], top + carry);
        }
    }
}
