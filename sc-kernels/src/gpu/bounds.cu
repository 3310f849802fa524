// The bounding box of 2-D points on the device (gpu/bounds.rs).

// min x, min y, max x, max y of the points (x, y interleaved) of this block's grid-stride share
// into part[4 blockIdx.x ...] (+-infinity where it has none). 256 threads a block.
extern "C" __global__ void box_2d_parts(const double* __restrict__ p, u64 n,
                                        double* __restrict__ part) {
    __shared__ double s[4][256];
    const double inf = __longlong_as_double((long long)0x7ff0000000000000ull);
    double b[4] = {inf, inf, -inf, -inf};
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x = p[2 * i], y = p[2 * i + 1];
        b[0] = fmin(b[0], x);
        b[1] = fmin(b[1], y);
        b[2] = fmax(b[2], x);
        b[3] = fmax(b[3], y);
    }
    for (int c = 0; c < 4; c++) s[c][threadIdx.x] = b[c];
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            s[0][threadIdx.x] = fmin(s[0][threadIdx.x], s[0][threadIdx.x + o]);
            s[1][threadIdx.x] = fmin(s[1][threadIdx.x], s[1][threadIdx.x + o]);
            s[2][threadIdx.x] = fmax(s[2][threadIdx.x], s[2][threadIdx.x + o]);
            s[3][threadIdx.x] = fmax(s[3][threadIdx.x], s[3][threadIdx.x + o]);
        }
        __syncthreads();
    }
    if (threadIdx.x < 4) part[4 * blockIdx.x + threadIdx.x] = s[threadIdx.x][0];
}
