// log1p on the stored values: ln(1 + x) in f32, then divided by ln(base) in f64 when a base
// is given (inv_ln_base = 0: natural log), as the CPU reference does.
extern "C" __global__ void log1p_values(float* data, u64 n, double ln_base) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float v = log1pf(data[i]);
        data[i] = (ln_base == 0.0) ? v : (float)((double)v / ln_base);
    }
}
