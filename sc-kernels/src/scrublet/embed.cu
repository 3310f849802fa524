// Scrublet's embedding on the GPU (prepare_gpu.rs): `rows` rows from `row0` of a CSR matrix as
// dense row-major f32, each value times its gene's factor in f64 (the z-scores before
// centring: the PCA centres). One block of threads per row.
extern "C" __global__ void scrublet_scaled_rows(const u64* __restrict__ indptr,
                                                const u32* __restrict__ indices,
                                                const float* __restrict__ data, u64 row0,
                                                u64 rows, u64 g, const double* __restrict__ factor,
                                                float* __restrict__ out) {
    for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
        float* o = out + r * g;
        for (u64 j = threadIdx.x; j < g; j += blockDim.x) o[j] = 0.0f;
        __syncthreads();
        for (u64 p = indptr[row0 + r] + threadIdx.x; p < indptr[row0 + r + 1]; p += blockDim.x) {
            u32 j = indices[p];
            o[j] = (float)((double)data[p] * factor[j]);
        }
        __syncthreads();
    }
}
