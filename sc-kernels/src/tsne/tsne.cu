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

// A cell's position, its box and its box's node weights along each axis (spread and
// interpolate place a cell the same way).
struct TsnePlace {
    double x0, x1, wx[3], wy[3];
    int bx, by;
};
__device__ __forceinline__ TsnePlace tsne_place(const double* __restrict__ y, u64 i, double lo,
                                                double h, int nb) {
    TsnePlace p;
    double tx, ty;
    p.x0 = y[2 * i];
    p.x1 = y[2 * i + 1];
    p.bx = tsne_locate(p.x0, lo, h, nb, &tx);
    p.by = tsne_locate(p.x1, lo, h, nb, &ty);
    tsne_lagrange(tx, p.wx);
    tsne_lagrange(ty, p.wy);
    return p;
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
        const TsnePlace p = tsne_place(y, i, lo, h, nb);
        const double x0 = p.x0, x1 = p.x1;
        double charge[4] = {1.0, x0, x1, x0 * x0 + x1 * x1};
        for (int ky = 0; ky < TSNE_NODES; ky++) {
            for (int kx = 0; kx < TSNE_NODES; kx++) {
                u64 node = (u64)(TSNE_NODES * p.by + ky) * m + (u64)(TSNE_NODES * p.bx + kx);
                double w = p.wx[kx] * p.wy[ky];
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
        const TsnePlace p = tsne_place(y, i, lo, h, nb);
        const double x0 = p.x0, x1 = p.x1;
        double phi[4] = {0.0, 0.0, 0.0, 0.0};
        for (int ky = 0; ky < TSNE_NODES; ky++) {
            for (int kx = 0; kx < TSNE_NODES; kx++) {
                u64 node = (u64)(TSNE_NODES * p.by + ky) * l + (u64)(TSNE_NODES * p.bx + kx);
                double w = p.wx[kx] * p.wy[ky] * norm;
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
// the momentum step and the new position into y_new. p_ij: the row's own entries
// (out_vals[out_ptr[i]..] times scale[0]) and its mirrors (in_src / in_vals[in_ptr[i]..], made
// once by tsne_mirrors), each its own term, in a fixed order.
extern "C" __global__ void tsne_move(const u64* __restrict__ out_ptr,
                                     const u32* __restrict__ out_cols,
                                     const double* __restrict__ out_vals,
                                     const u64* __restrict__ in_ptr,
                                     const u32* __restrict__ in_src,
                                     const double* __restrict__ in_vals,
                                     const double* __restrict__ scale,
                                     const double* __restrict__ y, const double* __restrict__ rep,
                                     const double* __restrict__ zsum, u64 n, double exaggeration,
                                     double momentum, double learning_rate,
                                     double* __restrict__ update, double* __restrict__ gains,
                                     double* __restrict__ y_new) {
    double z = fmax(zsum[0] - (double)n, 2.2250738585072014e-308);
    double weight = scale[0] * exaggeration;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        double x0 = y[2 * i], x1 = y[2 * i + 1];
        double a0 = 0.0, a1 = 0.0;
        for (u64 e = out_ptr[i]; e < out_ptr[i + 1]; e++) {
            u64 j = out_cols[e];
            double d0 = x0 - y[2 * j], d1 = x1 - y[2 * j + 1];
            double pq = out_vals[e] * weight / (1.0 + d0 * d0 + d1 * d1);
            a0 += pq * d0;
            a1 += pq * d1;
        }
        for (u64 s = in_ptr[i]; s < in_ptr[i + 1]; s++) {
            u64 j = in_src[s];
            double d0 = x0 - y[2 * j], d1 = x1 - y[2 * j + 1];
            double pq = in_vals[s] * weight / (1.0 + d0 * d0 + d1 * d1);
            a0 += pq * d0;
            a1 += pq * d1;
        }
        double g[2] = {4.0 * (a0 - rep[2 * i] / z), 4.0 * (a1 - rep[2 * i + 1] / z)};
        double pos[2] = {x0, x1};
        for (int c = 0; c < 2; c++) {
            u64 idx = 2 * i + c;
            double u = update[idx], gain = gains[idx];
            gain = u * g[c] < 0.0 ? gain + 0.2 : gain * 0.8;
            gain = fmax(gain, 0.01);
            u = momentum * u - learning_rate * gain * g[c];
            gains[idx] = gain;
            update[idx] = u;
            y_new[idx] = pos[c] + u;
        }
    }
}

// affinity.rs `conditional` for each cell, from its kNN row (kk entries, itself among them):
// its first k others into cols and their conditional probabilities into cond (row i at i k),
// the bisection on the precision to the entropy target (100 steps at most, tolerance 1e-5);
// each entry's mirror key (column << 32 | entry) into keys, and the columns' in-degrees.
extern "C" __global__ void tsne_conditional(const u32* __restrict__ knn_idx,
                                            const float* __restrict__ knn_dist, u64 n, int kk,
                                            int k, double target, u32* __restrict__ cols,
                                            double* __restrict__ cond, u64* __restrict__ keys,
                                            u64* __restrict__ indeg) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        u64 row = i * (u64)k;
        int t = 0;
        for (int a = 0; a < kk && t < k; a++) {
            u32 j = knn_idx[i * kk + a];
            if ((u64)j == i) continue;
            double d = (double)knn_dist[i * kk + a];
            cols[row + t] = j;
            cond[row + t] = d * d;
            t++;
        }
        double beta = 1.0, lo = -1.0 / 0.0, hi = 1.0 / 0.0, used = 1.0, used_sum = 1.0;
        for (int step = 0; step < 100; step++) {
            double sum = 0.0, weighted = 0.0;
            for (int a = 0; a < k; a++) {
                double d2 = cond[row + a], e = exp(-d2 * beta);
                sum += e;
                weighted += d2 * e;
            }
            if (sum == 0.0) sum = 1e-8;
            used = beta;
            used_sum = sum;
            double diff = log(sum) + beta * (weighted / sum) - target;
            if (fabs(diff) <= 1e-5) break;
            if (diff > 0.0) {
                lo = beta;
                beta = isinf(hi) ? beta * 2.0 : (beta + hi) / 2.0;
            } else {
                hi = beta;
                beta = isinf(lo) ? beta / 2.0 : (beta + lo) / 2.0;
            }
        }
        for (int a = 0; a < k; a++) {
            u64 e = row + a;
            cond[e] = exp(-cond[e] * used) / used_sum;
            u32 j = cols[e];
            keys[e] = ((u64)j << 32) | e;
            atomicAdd(&indeg[j], 1ull);
        }
    }
}

// scale[0] = 1 / (2 total[0]): the joint affinities' normalization (every conditional counted
// in its row and as its mirror).
extern "C" __global__ void tsne_normalization(const double* __restrict__ total,
                                              double* __restrict__ scale) {
    if (threadIdx.x == 0 && blockIdx.x == 0) scale[0] = 1.0 / fmax(2.0 * total[0], 2.220446049250313e-16);
}

// Each mirror's source row and value, gathered once from its sorted key (column << 32 | the
// entry e of vals, from row e / k): the descent's 1,000 iterations then read them in order
// instead of dividing and reading vals[e] at random each time.
extern "C" __global__ void tsne_mirrors(const u64* __restrict__ keys, u64 len, u64 k,
                                        const double* __restrict__ vals, u32* __restrict__ src,
                                        double* __restrict__ out) {
    for (u64 s = blockIdx.x * (u64)blockDim.x + threadIdx.x; s < len;
         s += (u64)gridDim.x * blockDim.x) {
        u64 e = keys[s] & 0xffffffffull;
        src[s] = (u32)(e / k);
        out[s] = vals[e];
    }
}
