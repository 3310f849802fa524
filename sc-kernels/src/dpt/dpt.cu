// dpt's distance of every cell from one cell (dpt/mod.rs `distance_row`): a thread a cell,
// its two sums over the components in order in f32, every operation rounded on its own (the
// host's): the same bits; infinite in another connected component.
extern "C" __global__ void dpt_distance_row(const float* __restrict__ basis, u64 n, u32 k,
                                            const float* __restrict__ evals, float stationary,
                                            u64 from, const u32* __restrict__ component,
                                            float* __restrict__ out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        if (component[i] != component[from]) {
            out[i] = __int_as_float(0x7f800000);
            continue;
        }
        const float* a = basis + from * k;
        const float* b = basis + i * k;
        float scaled = 0.0f, still = 0.0f;
        for (u32 j = 0; j < k; ++j) {
            const float diff = __fsub_rn(a[j], b[j]);
            if (evals[j] < stationary) {
                const float v = __fmul_rn(__fdiv_rn(evals[j], __fsub_rn(1.0f, evals[j])), diff);
                scaled = __fadd_rn(scaled, __fmul_rn(v, v));
            } else {
                still = __fadd_rn(still, __fmul_rn(diff, diff));
            }
        }
        out[i] = __fsqrt_rn(__fadd_rn(scaled, still));
    }
}
