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

extern "C" __global__ void qc_rows(
    const u64* indptr, const u32* indices, const float* data, u64 n_rows, u64 n_cols,
    const unsigned char* qc_masks, u32 n_qc, const u32* ns, u32 n_top,
    i32* n_genes, double* total, double* qc_out, double* top_out,
    u64* gene_n_cells, double* gene_sums)
{
    __shared__ double dscratch[32];
    __shared__ u64 uscratch[32];
    __shared__ u32 hist[256];
    __shared__ u32 sel[2];  // prefix, remaining
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
