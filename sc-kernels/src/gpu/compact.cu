// Row and column selection of a CSR matrix: lengths, a prefix sum (scan.cu), then the copy.
// One warp per output row; the order of the stored values within a row is kept.

#define WARP_ROWS_LOOP(n) \
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5; \
    u32 lane = threadIdx.x & 31; \
    for (u64 r = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; r < (n); r += warps)

extern "C" __global__ void gathered_row_lengths(const u64* indptr, const u64* rows, u64 m, u64* lens) {
    u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < m) lens[k] = indptr[rows[k] + 1] - indptr[rows[k]];
}

extern "C" __global__ void gather_rows(const u64* indptr, const u32* indices, const float* data,
                                       const u64* rows, u64 m, const u64* out_indptr,
                                       u32* out_indices, float* out_data) {
    WARP_ROWS_LOOP(m) {
        u64 s = indptr[rows[r]], e = indptr[rows[r] + 1], o = out_indptr[r];
        for (u64 p = s + lane; p < e; p += 32) {
            out_indices[o + (p - s)] = indices[p];
            out_data[o + (p - s)] = data[p];
        }
    }
}

// new_col[j] < 0: column j is dropped.
extern "C" __global__ void kept_col_lengths(const u64* indptr, const u32* indices, u64 n_rows,
                                            const i32* new_col, u64* lens) {
    WARP_ROWS_LOOP(n_rows) {
        u64 c = 0;
        for (u64 p = indptr[r] + lane; p < indptr[r + 1]; p += 32) c += (new_col[indices[p]] >= 0);
        c = warp_sum_u64(c);
        if (lane == 0) lens[r] = c;
    }
}

extern "C" __global__ void compact_cols(const u64* indptr, const u32* indices, const float* data,
                                        u64 n_rows, const i32* new_col, const u64* out_indptr,
                                        u32* out_indices, float* out_data) {
    WARP_ROWS_LOOP(n_rows) {
        u64 o = out_indptr[r];
        u64 s = indptr[r], e = indptr[r + 1];
        for (u64 base = s; base < e; base += 32) {
            u64 p = base + lane;
            i32 nc = (p < e) ? new_col[indices[p]] : -1;
            u32 ballot = __ballot_sync(FULL_MASK, nc >= 0);
            if (nc >= 0) {
                u64 at = o + __popc(ballot & ((1u << lane) - 1u));
                out_indices[at] = (u32)nc;
                out_data[at] = data[p];
            }
            o += __popc(ballot);
        }
    }
}
