// scale with zero-centring into a dense row-major matrix: (x - mean) / std in f64, clipped to
// +-max_value (has_max = 0: no clipping), rounded to f32. One block per row: the row is first
// filled with each column's value of a zero entry, then the stored values are written.
extern "C" __global__ void scale_to_dense(const u64* indptr, const u32* indices, const float* data,
                                          u64 n_rows, u64 n_cols, const double* mean,
                                          const double* std_, const float* zero_val, int has_max,
                                          double max_value, float* out) {
    for (u64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        float* row = out + r * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) row[j] = zero_val[j];
        __syncthreads();
        for (u64 p = indptr[r] + threadIdx.x; p < indptr[r + 1]; p += blockDim.x) {
            u32 j = indices[p];
            double v = ((double)data[p] - mean[j]) / std_[j];
            if (has_max) {
                if (v > max_value) v = max_value;
                else if (v < -max_value) v = -max_value;
            }
            row[j] = (float)v;
        }
        __syncthreads();
    }
}

// scale of a dense row-major matrix in place, as the CPU's scale_dense rounds it: centred
// (center = 1) in f64 and rounded to f32, divided by the deviation in f64 and rounded, clipped
// at max_value (has_max = 1; below -max_value only when centred). Blocks over rows.
extern "C" __global__ void scale_dense_in_place(float* x, u64 n_rows, u64 n_cols,
                                                const double* mean, const double* std_,
                                                int center, int has_max, double max_value) {
    for (u64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        float* row = x + r * n_cols;
        for (u64 j = threadIdx.x; j < n_cols; j += blockDim.x) {
            float t = row[j];
            if (center) t = __double2float_rn(__dsub_rn((double)t, mean[j]));
            t = __double2float_rn(__ddiv_rn((double)t, std_[j]));
            double v = (double)t;
            if (has_max) {
                if (v > max_value) v = max_value;
                else if (center && v < -max_value) v = -max_value;
            }
            row[j] = (float)v;
        }
    }
}
