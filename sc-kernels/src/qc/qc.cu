// calculate_qc_metrics: one warp per cell (grid-stride over cells). Per cell: total, non-zero
// count, the sums over each QC variable's genes and the sums of the n largest values (radix
// select on the order-preserving bits of the floats, 8 bits a pass). Per gene: sums and
// non-zero counts by atomics (exact for counts: f64 sums of integers).

// Unsigned order of these bits is the order of the (finite) floats.
__device__ __forceinline__ u32 order_bits(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_order_bits(u32 u) {
    u32 b = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    return __uint_as_float(b);
}

#define SMALL_INT_BINS 1024
// Rows (warps) per block of qc_rows; blockDim.x must be 32 * QC_WARPS.
#define QC_WARPS 8
// QC variables summed in the first pass over a row (the rest take a pass each).
#define QC_INLINE 4

// One warp per row, QC_WARPS rows per block, each warp with its own histogram in shared memory:
// no block-wide barriers, so a short row costs a few warp passes over its values, not a chain
// of __syncthreads (a block per row left the multiprocessors waiting on latency). One pass over
// a row of counts does everything: totals, QC variables, the per-gene sums and the histogram
// of the top-n sums (built as if the row were small integers, and dropped when it is not).
//
// Per gene, a value that is a small integer goes to gene_packed by one 64-bit atomic (count in
// the low 32 bits, sum in the high 32): half the atomics of a count and a sum apart, which bound
// this kernel. Rows [row_begin, row_end) of at most PACKED_ROWS (gpu.rs) keep each packed sum
// under 2^32; qc_unpack_genes then moves them into gene_n_cells and gene_sums.
extern "C" __global__ void __launch_bounds__(32 * QC_WARPS) qc_rows(
    const u64* indptr, const u32* indices, const float* data, u64 row_begin, u64 row_end,
    u64 n_rows, u64 n_cols, const unsigned char* qc_masks, u32 n_qc, const u32* ns, u32 n_top,
    i32* n_genes, double* total, double* qc_out, double* top_out,
    u64* gene_n_cells, double* gene_sums, u64* gene_packed)
{
    __shared__ u32 hists[QC_WARPS][SMALL_INT_BINS];
    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    u32* hist = hists[warp];
    const u64 warps_total = (u64)gridDim.x * QC_WARPS;
    const u32 n_inline = min(n_qc, (u32)QC_INLINE);
    for (u64 row = row_begin + (u64)blockIdx.x * QC_WARPS + warp; row < row_end; row += warps_total) {
        const u64 s = indptr[row], e = indptr[row + 1];
        const u64 len = e - s;
        if (n_top > 0) {
            for (u32 b = lane; b < SMALL_INT_BINS; b += 32) hist[b] = 0;
            __syncwarp();
        }
        double t = 0.0;
        double qa[QC_INLINE] = {0.0, 0.0, 0.0, 0.0};
        u64 nz = 0;
        // Counts are small non-negative integers: the histogram gives every top-n sum at once
        // (the CPU reference's counting sort); otherwise a radix select per n.
        int small = 1;
        for (u64 p = s + lane; p < e; p += 32) {
            float v = data[p];
            u32 c = indices[p];
            t += (double)v;
            int si = (v >= 0.0f && v < (float)SMALL_INT_BINS && v == truncf(v));
            small &= si;
            if (v != 0.0f) {
                nz += 1;
                if (si) {
                    atomicAdd(&gene_packed[c], ((u64)(u32)v << 32) | 1ull);
                } else {
                    atomicAdd(&gene_n_cells[c], 1ull);
                    atomicAdd(&gene_sums[c], (double)v);
                }
            }
#pragma unroll
            for (u32 q = 0; q < QC_INLINE; ++q)
                if (q < n_inline && qc_masks[(u64)q * n_cols + c]) qa[q] += (double)v;
            if (si && n_top > 0) atomicAdd(&hist[(int)v], 1u);
        }
        t = __shfl_sync(FULL_MASK, warp_sum_f64(t), 0);
        nz = warp_sum_u64(nz);
        small = __all_sync(FULL_MASK, small) && n_top <= 16;
        if (lane == 0) {
            total[row] = t;
            n_genes[row] = (i32)nz;
        }
#pragma unroll
        for (u32 q = 0; q < QC_INLINE; ++q) {
            double a = warp_sum_f64(qa[q]);
            if (q < n_inline && lane == 0) qc_out[(u64)q * n_rows + row] = a;
        }
        for (u32 q = QC_INLINE; q < n_qc; ++q) {
            const unsigned char* m = qc_masks + (u64)q * n_cols;
            double a = 0.0;
            for (u64 p = s + lane; p < e; p += 32)
                if (m[indices[p]]) a += (double)data[p];
            a = warp_sum_f64(a);
            if (lane == 0) qc_out[(u64)q * n_rows + row] = a;
        }
        if (n_top == 0) continue;
        __syncwarp();
        if (small) {
            // Lane l owns bins 1023 - 32 l down to 992 - 32 l: an exclusive scan over the
            // lanes counts the values in higher bins.
            const int hi_bin = SMALL_INT_BINS - 1 - 32 * (int)lane;
            u32 c = 0;
            double sm = 0.0;
            for (int b = hi_bin; b > hi_bin - 32; --b) { c += hist[b]; sm += (double)b * hist[b]; }
            u32 above = c;
            double sum_above = sm;
            for (int o = 1; o < 32; o <<= 1) {
                u32 nc = __shfl_up_sync(FULL_MASK, above, o);
                double nsm = __shfl_up_sync(FULL_MASK, sum_above, o);
                if ((int)lane >= o) { above += nc; sum_above += nsm; }
            }
            above -= c;
            sum_above -= sm;
            for (u32 k = 0; k < n_top; ++k) {
                u32 n = ns[k];
                if (len <= (u64)n) {
                    // Fewer stored values than n: all of them (as the CPU reference sums them).
                    if (lane == 0) top_out[(u64)k * n_rows + row] = t;
                } else if (above < n && n <= above + c) {
                    u32 taken = above;
                    double acc = sum_above;
                    for (int b = hi_bin; b > hi_bin - 32 && taken < n; --b) {
                        u32 take = min(hist[b], n - taken);
                        acc += (double)b * take;
                        taken += take;
                    }
                    top_out[(u64)k * n_rows + row] = acc;
                }
            }
            __syncwarp();
            continue;
        }
        for (u32 k = 0; k < n_top; ++k) {
            u32 n = ns[k];
            if (len <= (u64)n) {
                if (lane == 0) top_out[(u64)k * n_rows + row] = t;
                continue;
            }
            // Radix select of the n-th largest value, 8 bits a pass, in the warp's first 256 bins.
            u32 prefix = 0, remaining = n;
            for (int shift = 24; shift >= 0; shift -= 8) {
                u32 hi = (shift == 24) ? 0u : (0xffffffffu << (shift + 8));
                for (u32 b = lane; b < 256; b += 32) hist[b] = 0;
                __syncwarp();
                for (u64 p = s + lane; p < e; p += 32) {
                    u32 u = order_bits(data[p]);
                    if ((u & hi) == (prefix & hi)) atomicAdd(&hist[(u >> shift) & 255u], 1u);
                }
                __syncwarp();
                // Lane l owns digits 255 - 8 l down to 248 - 8 l; the digit holding the
                // remaining-th largest is found by a scan over the lanes.
                const int hi_d = 255 - 8 * (int)lane;
                u32 c = 0;
                for (int d = hi_d; d > hi_d - 8; --d) c += hist[d];
                u32 above = c;
                for (int o = 1; o < 32; o <<= 1) {
                    u32 nc = __shfl_up_sync(FULL_MASK, above, o);
                    if ((int)lane >= o) above += nc;
                }
                above -= c;
                u32 found = 0, digit = 0, rem = 0;
                if (above < remaining && remaining <= above + c) {
                    u32 acc = above;
                    int d = hi_d;
                    for (; d > hi_d - 8; --d) {
                        if (acc + hist[d] >= remaining) break;
                        acc += hist[d];
                    }
                    found = 1;
                    digit = (u32)d;
                    rem = remaining - acc;
                }
                // One lane finds it (the values matching the prefix number at least
                // `remaining`); were none to, digit 0 is what a serial walk would end on.
                u32 ballot = __ballot_sync(FULL_MASK, found);
                u32 owner = ballot ? __ffs(ballot) - 1 : 0;
                digit = __shfl_sync(FULL_MASK, digit, owner);
                rem = ballot ? __shfl_sync(FULL_MASK, rem, owner) : remaining;
                prefix |= digit << shift;
                remaining = rem;
                __syncwarp();
            }
            // prefix: the n-th largest value; `remaining` of its copies belong to the top n.
            double a = 0.0;
            for (u64 p = s + lane; p < e; p += 32) {
                float v = data[p];
                if (order_bits(v) > prefix) a += (double)v;
            }
            a = warp_sum_f64(a);
            if (lane == 0)
                top_out[(u64)k * n_rows + row] = a + (double)remaining * (double)from_order_bits(prefix);
        }
    }
}

// gene_n_cells += the packed counts, gene_sums += the packed sums; gene_packed = 0.
extern "C" __global__ void qc_unpack_genes(u64* gene_packed, u64 n_cols, u64* gene_n_cells,
                                           double* gene_sums) {
    for (u64 g = (u64)blockIdx.x * blockDim.x + threadIdx.x; g < n_cols;
         g += (u64)gridDim.x * blockDim.x) {
        u64 v = gene_packed[g];
        if (v != 0) {
            gene_n_cells[g] += v & 0xffffffffull;
            gene_sums[g] += (double)(v >> 32);
            gene_packed[g] = 0;
        }
    }
}
