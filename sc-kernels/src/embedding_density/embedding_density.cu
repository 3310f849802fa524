// embedding_density/mod.rs `kernel_sums` on the GPU: for each point i of a group, the sum over
// every point j (itself included) of exp(-(ia dx^2 + 2 ib dx dy + ic dy^2) / 2). The
// differences and the quadratic form are f64, the exponential f32 (relative error about 1e-6,
// far inside the 1e-4 the scaled densities are held to), the sum f64 in the order of j: the
// same bits every run. A block stages a tile of the points in shared memory and each thread
// runs its point over it.

#define ED_TILE 256

extern "C" __global__ void embedding_density_sums(const double* __restrict__ xy, u64 n, double ia,
                                                  double ib, double ic, double* __restrict__ z) {
    __shared__ double tx[ED_TILE], ty[ED_TILE];
    const u64 i = blockIdx.x * (u64)ED_TILE + threadIdx.x;
    const double x = i < n ? xy[2 * i] : 0.0, y = i < n ? xy[2 * i + 1] : 0.0;
    double s = 0.0;
    for (u64 base = 0; base < n; base += ED_TILE) {
        const u64 j = base + threadIdx.x;
        __syncthreads();
        if (j < n) {
            tx[threadIdx.x] = xy[2 * j];
            ty[threadIdx.x] = xy[2 * j + 1];
        }
        __syncthreads();
        const int m = (int)(n - base < ED_TILE ? n - base : ED_TILE);
        for (int t = 0; t < m; t++) {
            const double dx = x - tx[t], dy = y - ty[t];
            const double q = ia * dx * dx + 2.0 * ib * dx * dy + ic * dy * dy;
            s += (double)__expf((float)(-0.5 * q));
        }
    }
    if (i < n) z[i] = s;
}
