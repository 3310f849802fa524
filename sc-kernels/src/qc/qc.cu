// calculate_qc_metrics: one block per cell (grid-stride over cells). Per cell: total, non-zero
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

// Block-wide exclusive scan of one (count, sum) pair per thread, blockDim.x == 256.
__device__ void block_exclusive_scan_pair(u32 c, double sm, u32* c_out, double* s_out,
                                          u32* wc, double* ws) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 ci = c;
    double si = sm;
    for (int o = 1; o < 32; o <<= 1) {
        u32 nc = __shfl_up_sync(FULL_MASK, ci, o);
        double ns = __shfl_up_sync(FULL_MASK, si, o);
        if (lane >= o) { ci += nc; si += ns; }
    }
    if (lane == 31) { wc[warp] = ci; ws[warp] = si; }
    __syncthreads();
    u32 cw = 0;
    double sw = 0.0;
    for (int w = 0; w < warp; ++w) { cw += wc[w]; sw += ws[w]; }
    *c_out = cw + ci - c;
    *s_out = sw + si - sm;
    __syncthreads();
}

extern "C" __global__ void qc_rows(
    const u64* indptr, const u32* indices, const float* data, u64 n_rows, u64 n_cols,
    const unsigned char* qc_masks, u32 n_qc, const u32* ns, u32 n_top,
    i32* n_genes, double* total, double* qc_out, double* top_out,
    u64* gene_n_cells, double* gene_sums)
{
    __shared__ double dscratch[32];
    __shared__ u64 uscratch[32];
    __shared__ u32 hist[SMALL_INT_BINS];
    __shared__ u32 sel[2];  // prefix, remaining
    __shared__ u32 wc[32];
    __shared__ double ws[32];
    __shared__ double top_small[16];
    for (u64 row = blockIdx.x; row < n_rows; row += gridDim.x) {
        u64 s = indptr[row], e = indptr[row + 1];
        u64 len = e - s;
        double t = 0.0;
        u64 nz = 0;
        for (u64 p = s + threadIdx.x; p < e; p += blockDim.x) {
            float v = data[p];
            u32 c = indices[p];
            t += (double)v;
            if (v != 0.0f) {
                nz += 1;
                atomicAdd(&gene_n_cells[c], 1ull);
                atomicAdd(&gene_sums[c], (double)v);
            }
        }
        t = block_sum_f64(t, dscratch);
        nz = block_sum_u64(nz, uscratch);
        if (threadIdx.x == 0) {
            total[row] = t;
            n_genes[row] = (i32)nz;
        }
        for (u32 q = 0; q < n_qc; ++q) {
            const unsigned char* m = qc_masks + (u64)q * n_cols;
            double a = 0.0;
            for (u64 p = s + threadIdx.x; p < e; p += blockDim.x)
                if (m[indices[p]]) a += (double)data[p];
            a = block_sum_f64(a, dscratch);
            if (threadIdx.x == 0) qc_out[(u64)q * n_rows + row] = a;
        }
        // Counts are small non-negative integers: one histogram gives every top-n sum at once
        // (the CPU reference's counting sort); otherwise a radix select per n.
        int small = 1;
        for (u64 p = s + threadIdx.x; p < e; p += blockDim.x) {
            float v = data[p];
            small &= (v >= 0.0f && v < (float)SMALL_INT_BINS && v == truncf(v));
        }
        small = __syncthreads_and(small) && n_top <= 16 && blockDim.x == 256;
        if (small && n_top > 0) {
            for (int b = threadIdx.x; b < SMALL_INT_BINS; b += blockDim.x) hist[b] = 0;
            __syncthreads();
            for (u64 p = s + threadIdx.x; p < e; p += blockDim.x) atomicAdd(&hist[(int)data[p]], 1u);
            __syncthreads();
            // Thread t owns bins 1023 - 4t down to 1020 - 4t: an ascending scan over threads
            // counts the values in higher bins.
            int hi_bin = SMALL_INT_BINS - 1 - 4 * threadIdx.x;
            u32 c = 0;
            double sm = 0.0;
            for (int b = hi_bin; b > hi_bin - 4; --b) { c += hist[b]; sm += (double)b * hist[b]; }
            u32 above;
            double sum_above;
            block_exclusive_scan_pair(c, sm, &above, &sum_above, wc, ws);
            for (u32 k = 0; k < n_top; ++k) {
                u32 n = ns[k];
                if (len <= (u64)n) {
                    if (threadIdx.x == 0) top_small[k] = t;
                } else if (above < n && n <= above + c) {
                    u32 taken = above;
                    double acc = sum_above;
                    for (int b = hi_bin; b > hi_bin - 4 && taken < n; --b) {
                        u32 take = min(hist[b], n - taken);
                        acc += (double)b * take;
                        taken += take;
                    }
                    top_small[k] = acc;
                }
            }
            __syncthreads();
            if (threadIdx.x == 0)
                for (u32 k = 0; k < n_top; ++k) top_out[(u64)k * n_rows + row] = top_small[k];
            __syncthreads();
            continue;
        }
        for (u32 k = 0; k < n_top; ++k) {
            u32 n = ns[k];
            if (len <= (u64)n) {
                // Fewer stored values than n: all of them (as the CPU reference sums them).
                if (threadIdx.x == 0) top_out[(u64)k * n_rows + row] = t;
                continue;
            }
            u32 prefix = 0, remaining = n;
            for (int shift = 24; shift >= 0; shift -= 8) {
                u32 hi = (shift == 24) ? 0u : (0xffffffffu << (shift + 8));
                for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
                __syncthreads();
                for (u64 p = s + threadIdx.x; p < e; p += blockDim.x) {
                    u32 u = order_bits(data[p]);
                    if ((u & hi) == (prefix & hi)) atomicAdd(&hist[(u >> shift) & 255u], 1u);
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    u32 acc = 0;
                    int d = 255;
                    for (; d > 0; --d) {
                        if (acc + hist[d] >= remaining) break;
                        acc += hist[d];
                    }
                    sel[0] = prefix | ((u32)d << shift);
                    sel[1] = remaining - acc;
                }
                __syncthreads();
                prefix = sel[0];
                remaining = sel[1];
                __syncthreads();
            }
            // prefix: the n-th largest value; `remaining` of its copies belong to the top n.
            double a = 0.0;
            for (u64 p = s + threadIdx.x; p < e; p += blockDim.x) {
                float v = data[p];
                if (order_bits(v) > prefix) a += (double)v;
            }
            a = block_sum_f64(a, dscratch);
            if (threadIdx.x == 0)
                top_out[(u64)k * n_rows + row] = a + (double)remaining * (double)from_order_bits(prefix);
        }
    }
}
