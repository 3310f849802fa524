// A CSR matrix written into a zeroed dense row-major one: blocks over rows, a block's threads
// over the row's stored values (column indices within a row are distinct).
extern "C" __global__ void csr_to_dense(const u64* indptr, const u32* indices, const float* data,
                                        u64 n_rows, u64 n_cols, float* out) {
    for (u64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        float* row = out + r * n_cols;
        for (u64 p = indptr[r] + threadIdx.x; p < indptr[r + 1]; p += blockDim.x)
            row[indices[p]] = data[p];
    }
}
