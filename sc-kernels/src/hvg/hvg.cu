// seurat_v3's second pass: per group of rows (codes[row] < n_groups, or one group when codes is
// null) and column, the sums and sums of squares of min(x, clip[group][col]) over the stored
// values, in f64 as the CPU reference (fmin, like f64::min, returns x when the clip is NaN).
// One warp per row; sums, sq: n_groups x n_cols, zeroed by the caller.
extern "C" __global__ void clipped_moments(const u64* indptr, const u32* indices, const float* data,
                                           u64 n_rows, u64 n_cols, const u32* codes,
                                           const double* clip, double* sums, double* sq) {
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    u64 lane = threadIdx.x & 31;
    for (u64 row = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; row < n_rows; row += warps) {
        u64 off = codes ? (u64)codes[row] * n_cols : 0;
        for (u64 p = indptr[row] + lane; p < indptr[row + 1]; p += 32) {
            u64 j = off + indices[p];
            double e = fmin((double)data[p], clip[j]);
            atomicAdd(&sums[j], e);
            atomicAdd(&sq[j], e * e);
        }
    }
}
