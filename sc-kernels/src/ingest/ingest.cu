// ingest's projection on the reference's principal axes (ingest/mod.rs `project_pca`): a warp
// a new cell, a lane a component (every 32nd), each summing the cell's stored values times the
// axes' rows in the row's order, in f64, unfused (the host's operations): the same bits.
extern "C" __global__ void ingest_project(const u64* __restrict__ indptr,
                                          const u32* __restrict__ indices,
                                          const float* __restrict__ values, u64 n,
                                          const float* __restrict__ basis, u32 k,
                                          const double* __restrict__ shift,
                                          float* __restrict__ out) {
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const u32 lane = threadIdx.x % 32;
    if (warp >= n) return;
    const u64 start = indptr[warp], end = indptr[warp + 1];
    for (u32 c = lane; c < k; c += 32) {
        double acc = 0.0;
        for (u64 e = start; e < end; ++e)
            acc = __dadd_rn(acc, __dmul_rn((double)values[e], (double)basis[(u64)indices[e] * k + c]));
        out[warp * k + c] = (float)__dsub_rn(acc, shift[c]);
    }
}
