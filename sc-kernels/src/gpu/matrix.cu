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
// offsets_bad refuses).
extern "C" __global__ void offsets_widen(const int* src, u64 n, u64* dst) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = (u64)(long long)src[i];
}

// *bad = 1 unless the n_rows + 1 offsets go from 0 to nnz without going back.
extern "C" __global__ void offsets_bad(const u64* p, u64 n_rows, u64 nnz, u32* bad) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i <= n_rows; i += (u64)gridDim.x * blockDim.x) {
        const bool wrong = (i == 0 && p[0] != 0) || (i == n_rows && p[i] != nnz) || (i > 0 && p[i] < p[i - 1]);
        if (wrong) atomicOr(bad, 1u);
    }
}

// dst[i] = src[i] (row offsets below 2^31 narrowed to int32, as scipy and cupyx keep them).
extern "C" __global__ void offsets_narrow(const u64* src, u64 n, int* dst) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        dst[i] = (int)src[i];
}
