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
