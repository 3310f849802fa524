// t-SNE's gradient descent on the GPU (tsne/gpu.rs). The repulsion is interpolated on a grid
// (Linderman et al. 2019, "FIt-SNE"): the embedding's square [lo, lo + nb h)^2 is cut into
// nb x nb boxes with 3 x 3 nodes each (a uniform grid of M = 3 nb nodes a side, spacing h / 3);
// each cell spreads its charges (1, x, y, x^2 + y^2) onto its box's nodes with Lagrange
// weights, the node potentials are the charges convolved with the kernel 1 / (1 + d^2)^2 (by
// FFT, on a 2M x 2M zero-padded grid), and each cell reads its potentials back with the same
// weights (interp.rs has the host's twin of every formula here). The spread adds fixed-point
// integers (exact and order-free) and every sum has a fixed order: the same bits every run.

#define TSNE_NODES 3

// The Lagrange weights at t in [0, 1] of the nodes (k + 1/2) / 3 (interp.rs `lagrange`).
__device__ __forceinline__ void tsne_lagrange(double t, double* w) {
    w[0] = (t - 0.5) * (t - 5.0 / 6.0) * 4.5;
    w[1] = (t - 1.0 / 6.0) * (t - 5.0 / 6.0) * -9.0;
    w[2] = (t - 1.0 / 6.0) * (t - 0.5) * 4.5;
}

// A coordinate's box (0..nb) and its place t in it (interp.rs `locate`).
__device__ __forceinline__ int tsne_locate(double v, double lo, double h, int nb, double* t) {
    double u = (v - lo) / h;
    int b = (int)floor(u);
    b = b < 0 ? 0 : (b >= nb ? nb - 1 : b);
    *t = u - (double)b;
    return b;
}

// min x, max x, min y, max y of the block's cells into part[4 blockIdx.x ...].
extern "C" __global__ void tsne_bounds(const double* __restrict__ y, u64 n,
                                       double* __restrict__ part) {
    __shared__ double s[4][256];
    double b[4] = {1e308, -1e308, 1e308, -1e308};
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x0 = y[2 * i], x1 = y[2 * i + 1];
        b[0] = fmin(b[0], x0);
        b[1] = fmax(b[1], x0);
        b[2] = fmin(b[2], x1);
        b[3] = fmax(b[3], x1);
    }
    for (int c = 0; c < 4; c++) s[c][threadIdx.x] = b[c];
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            s[0][threadIdx.x] = fmin(s[0][threadIdx.x], s[0][threadIdx.x + o]);
            s[1][threadIdx.x] = fmax(s[1][threadIdx.x], s[1][threadIdx.x + o]);
            s[2][threadIdx.x] = fmin(s[2][threadIdx.x], s[2][threadIdx.x + o]);
            s[3][threadIdx.x] = fmax(s[3][threadIdx.x], s[3][threadIdx.x + o]);
        }
        __syncthreads();
    }
    if (threadIdx.x < 4) part[4 * blockIdx.x + threadIdx.x] = s[threadIdx.x][0];
}

// The charges of each cell onto its box's 9 nodes, 4 channels of M x M fixed-point sums
// (value * scale c, a power of 2, rounded): integer additions, so the atomics' order does not
// matter.
extern "C" __global__ void tsne_spread(const double* __restrict__ y, u64 n, double lo, double h,
                                       int nb, double s0, double s1, double s2, double s3,
                                       u64* __restrict__ grid) {
    const double scale[4] = {s0, s1, s2, s3};
    const u64 m = (u64)nb * TSNE_NODES, mm = m * m;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x0 = y[2 * i], x1 = y[2 * i + 1];
        double tx, ty, wx[3], wy[3];
        int bx = tsne_locate(x0, lo, h, nb, &tx), by = tsne_locate(x1, lo, h, nb, &ty);
        tsne_lagrange(tx, wx);
        tsne_lagrange(ty, wy);
        double charge[4] = {1.0, x0, x1, x0 * x0 + x1 * x1};
        for (int ky = 0; ky < TSNE_NODES; ky++) {
            for (int kx = 0; kx < TSNE_NODES; kx++) {
                u64 node = (u64)(TSNE_NODES * by + ky) * m + (u64)(TSNE_NODES * bx + kx);
                double w = wx[kx] * wy[ky];
                for (int c = 0; c < 4; c++) {
                    long long v = __double2ll_rn(w * charge[c] * scale[c]);
                    atomicAdd(&grid[c * mm + node], (u64)v);
                }
            }
        }
    }
}

// The transforms' inputs, 5 arrays of L x L (L = 2M): the 4 channels' node sums zero-padded,
// then the kernel at every offset of the circulant embedding (offset a for a < M, a - L for
// a > M, nothing at M).
extern "C" __global__ void tsne_fill(const u64* __restrict__ grid, double s0, double s1,
                                     double s2, double s3, int m, double spacing,
                                     double* __restrict__ real) {
    const double scale[4] = {s0, s1, s2, s3};
    const u64 l = 2 * (u64)m, ll = l * l, mm = (u64)m * m;
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < ll;
         e += (u64)gridDim.x * blockDim.x) {
        u64 r = e / l, c = e % l;
        bool inside = r < (u64)m && c < (u64)m;
        for (int ch = 0; ch < 4; ch++) {
            real[ch * ll + e] =
                inside ? (double)(long long)grid[ch * mm + r * m + c] / scale[ch] : 0.0;
        }
        double k = 0.0;
        if (r != (u64)m && c != (u64)m) {
            double dr = (double)(r < (u64)m ? (long long)r : (long long)r - (long long)l) * spacing;
            double dc = (double)(c < (u64)m ? (long long)c : (long long)c - (long long)l) * spacing;
            double q = 1.0 / (1.0 + dr * dr + dc * dc);
            k = q * q;
        }
        real[4 * ll + e] = k;
    }
}

// Channels 0..3 of the spectra times channel 4's (the kernel's), complex, interleaved.
extern "C" __global__ void tsne_multiply(double* __restrict__ spectra, u64 len) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < 4 * len;
         e += (u64)gridDim.x * blockDim.x) {
        u64 f = e % len;
        double kr = spectra[2 * (4 * len + f)], ki = spectra[2 * (4 * len + f) + 1];
        double ar = spectra[2 * e], ai = spectra[2 * e + 1];
        spectra[2 * e] = ar * kr - ai * ki;
        spectra[2 * e + 1] = ar * ki + ai * kr;
    }
}

// Each cell's potentials read back from the nodes (the inverse transforms, divided by L^2):
// its repulsion sum_j q_ij^2 (y_i - y_j) into rep, and its share of the normalization,
// sum_j q_ij with itself (about 1) included, into zpart (reduced by tsne_sum).
extern "C" __global__ void tsne_interpolate(const double* __restrict__ y, u64 n, double lo,
                                            double h, int nb, const double* __restrict__ real,
                                            double* __restrict__ rep, double* __restrict__ zcell) {
    const u64 m = (u64)nb * TSNE_NODES, l = 2 * m, ll = l * l;
    const double norm = 1.0 / (double)ll;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x0 = y[2 * i], x1 = y[2 * i + 1];
        double tx, ty, wx[3], wy[3];
        int bx = tsne_locate(x0, lo, h, nb, &tx), by = tsne_locate(x1, lo, h, nb, &ty);
        tsne_lagrange(tx, wx);
        tsne_lagrange(ty, wy);
        double phi[4] = {0.0, 0.0, 0.0, 0.0};
        for (int ky = 0; ky < TSNE_NODES; ky++) {
            for (int kx = 0; kx < TSNE_NODES; kx++) {
                u64 node = (u64)(TSNE_NODES * by + ky) * l + (u64)(TSNE_NODES * bx + kx);
                double w = wx[kx] * wy[ky] * norm;
                for (int c = 0; c < 4; c++) phi[c] += w * real[c * ll + node];
            }
        }
        rep[2 * i] = x0 * phi[0] - phi[1];
        rep[2 * i + 1] = x1 * phi[0] - phi[2];
        zcell[i] = (1.0 + x0 * x0 + x1 * x1) * phi[0] - 2.0 * (x0 * phi[1] + x1 * phi[2]) + phi[3];
    }
}

// sum of v[0..n) in a fixed order: each block its grid-stride share (tree within the block),
// then (a launch of one block over the blocks' sums) the total into out[0].
extern "C" __global__ void tsne_sum(const double* __restrict__ v, u64 n, double* __restrict__ out) {
    __shared__ double scratch[32];
    double s = 0.0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        s += v[i];
    s = block_sum_f64(s, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// One iteration's move of each cell (mod.rs `optimize`): the gradient
// 4 (exaggeration sum_j p_ij q_ij (y_i - y_j) - rep_i / Z), Z = zsum - n, then the gains,
// the momentum step and the new position into y_new.
extern "C" __global__ void tsne_move(const u64* __restrict__ indptr, const u32* __restrict__ indices,
                                     const double* __restrict__ p, const double* __restrict__ y,
                                     const double* __restrict__ rep, const double* __restrict__ zsum,
                                     u64 n, double exaggeration, double momentum,
                                     double learning_rate, double* __restrict__ update,
                                     double* __restrict__ gains, double* __restrict__ y_new) {
    double z = fmax(zsum[0] - (double)n, 2.2250738585072014e-308);
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x0 = y[2 * i], x1 = y[2 * i + 1];
        double a0 = 0.0, a1 = 0.0;
        for (u64 e = indptr[i]; e < indptr[i + 1]; e++) {
            u64 j = indices[e];
            double d0 = x0 - y[2 * j], d1 = x1 - y[2 * j + 1];
            double q = 1.0 / (1.0 + d0 * d0 + d1 * d1);
            a0 += p[e] * exaggeration * q * d0;
            a1 += p[e] * exaggeration * q * d1;
        }
        double g[2] = {4.0 * (a0 - rep[2 * i] / z), 4.0 * (a1 - rep[2 * i + 1] / z)};
        double pos[2] = {x0, x1};
        for (int c = 0; c < 2; c++) {
            u64 k = 2 * i + c;
            double u = update[k], gain = gains[k];
            gain = u * g[c] < 0.0 ? gain + 0.2 : gain * 0.8;
            gain = fmax(gain, 0.01);
            u = momentum * u - learning_rate * gain * g[c];
            gains[k] = gain;
            update[k] = u;
            y_new[k] = pos[c] + u;
        }
    }
}
