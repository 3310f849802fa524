// Rows first_row .. first_row + n_rows of a CSR matrix written into a dense row-major one
// (row first_row + r into out's row r): one block per row (grid-stride), which zeroes the row,
// then writes its stored values (column indices within a row are distinct).
extern "C" __global__ void csr_to_dense(const u64* __restrict__ indptr,
                                        const u32* __restrict__ indices,
                                        const float* __restrict__ data, u64 first_row, u64 n_rows,
                                        u64 n_cols, float* __restrict__ out) {
    for (u64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        float* row = out + r * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) row[j] = 0.0f;
        __syncthreads();
        for (u64 p = indptr[first_row + r] + threadIdx.x; p < indptr[first_row + r + 1]; p += blockDim.x)
            row[indices[p]] = data[p];
        __syncthreads();
    }
}

// dst[i] = src[i] (int32 row offsets widened; a negative one becomes a huge value, which
// csr_structure refuses).
extern "C" __global__ void offsets_widen(const int* src, u64 n, u64* dst) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = (u64)(long long)src[i];
}

// What the steps trust of a lent CSR matrix, into found[4] (zeros at first): found[0] != 0
// unless the n_rows + 1 offsets go from 0 to nnz without going back; found[2] = max over rows
// with a column index at or past n_cols of ~row (0 when none: the first such row is ~found[2]);
// found[1] != 0 when a row's indices do not increase (unsorted, or a column twice: then
// csr_duplicates tells). A warp a row, each row's range clamped to the nnz values, so that the
// checks need one wait even when the offsets are wrong.
extern "C" __global__ void csr_structure(const u64* p, const u32* indices, u64 n_rows, u64 n_cols,
                                         u64 nnz, u64* found) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i <= n_rows; i += threads) {
        const bool wrong = (i == 0 && p[0] != 0) || (i == n_rows && p[i] != nnz) || (i > 0 && p[i] < p[i - 1]);
        if (wrong) atomicOr(&found[0], 1ull);
    }
    const u32 lane = threadIdx.x & 31;
    const u64 warps = threads >> 5;
    for (u64 r = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < n_rows; r += warps) {
        const u64 a = min(p[r], nnz), b = min(p[r + 1], nnz);
        bool past = false, not_rising = false;
        for (u64 q = a + lane; q < b; q += 32) {
            past |= indices[q] >= n_cols;
            not_rising |= q + 1 < b && indices[q] >= indices[q + 1];
        }
        if (__any_sync(FULL_MASK, past) && lane == 0) atomicMax(&found[2], ~r);
        if (__any_sync(FULL_MASK, not_rising) && lane == 0) atomicOr(&found[1], 1ull);
    }
}

// For matrices whose rows csr_structure found not increasing (valid offsets, indices below
// n_cols): found[3] = max over rows holding a column twice of ~row. A block a row (grid-stride):
// its threads set the row's columns' bits in the block's own n_cols-bit map of seen (zeros at
// first), a bit already set being a column twice, then clear them for the next row.
extern "C" __global__ void csr_duplicates(const u64* p, const u32* indices, u64 n_rows, u64 n_cols,
                                          u32* seen, u64* found) {
    u32* bits = seen + (u64)blockIdx.x * ((n_cols + 31) / 32);
    for (u64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        bool twice = false;
        for (u64 q = p[r] + threadIdx.x; q < p[r + 1]; q += blockDim.x) {
            const u32 j = indices[q], bit = 1u << (j & 31);
            twice |= (atomicOr(&bits[j >> 5], bit) & bit) != 0;
        }
        if (__syncthreads_or(twice) && threadIdx.x == 0) atomicMax(&found[3], ~r);
        for (u64 q = p[r] + threadIdx.x; q < p[r + 1]; q += blockDim.x) {
            const u32 j = indices[q];
            atomicAnd(&bits[j >> 5], ~(1u << (j & 31)));
        }
        __syncthreads();
    }
}

// dst[i] = src[i] (row offsets below 2^31 narrowed to int32, as scipy and cupyx keep them).
extern "C" __global__ void offsets_narrow(const u64* src, u64 n, int* dst) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = (int)src[i];
}
