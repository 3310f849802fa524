// k-means' Lloyd iterations on the GPU with the host's bits (kmeans/mod.rs): the assignment's
// dot products summed over the columns in order, and each chunk of ROWS rows' cluster sums in
// row order, every product and sum rounded on its own (never fused).

#define KMEANS_ROWS 2048  // kmeans::ROWS

// Row i's nearest centroid (mod.rs's assign and nearest): norms[c] - 2 x_i.c_c in f32, the
// first on ties; a label that changes sets *changed.
extern "C" __global__ void kmeans_assign(const float* x, u64 n, u32 d, u32 k,
                                         const float* centroids, const float* norms,
                                         u32* labels, u32* changed) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* z = x + i * d;
    float best = __int_as_float(0x7f800000);  // +infinity
    u32 label = 0;
    for (u32 c = 0; c < k; ++c) {
        const float* cc = centroids + (u64)c * d;
        float dot = 0.0f;
        for (u32 j = 0; j < d; ++j) dot = __fadd_rn(dot, __fmul_rn(z[j], cc[j]));
        float v = __fsub_rn(norms[c], __fmul_rn(2.0f, dot));
        if (v < best) {
            best = v;
            label = c;
        }
    }
    if (labels[i] != label) {
        labels[i] = label;
        atomicOr(changed, 1u);
    }
}

// Chunk first_chunk + blockIdx.x's sums (mod.rs's lloyd): for each cluster c its rows' column
// sums at part[c * d + j] and its count at part[k * d + c], the rows added in order from 0, in
// f64; part holds k * d + k values a chunk. Each thread owns columns (thread 0 the counts too),
// kept in shared memory when use_shared (the host sized it), else in place in part.
extern "C" __global__ void kmeans_chunk_sums(const float* x, u64 n, u32 d, u32 k,
                                             const u32* labels, u64 first_chunk, u32 use_shared,
                                             double* part) {
    extern __shared__ double shared_acc[];
    u64 len = (u64)k * d + k;
    double* out = part + (u64)blockIdx.x * len;
    double* acc = use_shared ? shared_acc : out;
    // Each thread zeroes what only it adds to: its columns of every cluster, thread 0 the counts.
    for (u32 c = 0; c < k; ++c)
        for (u32 j = threadIdx.x; j < d; j += blockDim.x) acc[(u64)c * d + j] = 0.0;
    if (threadIdx.x == 0)
        for (u32 c = 0; c < k; ++c) acc[(u64)k * d + c] = 0.0;
    u64 start = (first_chunk + blockIdx.x) * KMEANS_ROWS;
    u64 end = start + KMEANS_ROWS < n ? start + KMEANS_ROWS : n;
    for (u64 i = start; i < end; ++i) {
        u32 c = labels[i];
        const float* z = x + i * d;
        double* a = acc + (u64)c * d;
        for (u32 j = threadIdx.x; j < d; j += blockDim.x) a[j] = __dadd_rn(a[j], (double)z[j]);
        if (threadIdx.x == 0) acc[(u64)k * d + c] = __dadd_rn(acc[(u64)k * d + c], 1.0);
    }
    if (use_shared) {
        __syncthreads();
        for (u64 e = threadIdx.x; e < len; e += blockDim.x) out[e] = acc[e];
    }
}

// k-means++'s pass for one centre (mod.rs's HostDistances::distances): out[i] = row i's squared
// distance to centre in f64 (dist2: the columns in order), or the lesser of it and closest[i]
// when closest is given.
extern "C" __global__ void kmeans_distances(const float* x, u64 n, u32 d, const float* centre,
                                            const double* closest, double* out) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* z = x + i * d;
    double s = 0.0;
    for (u32 j = 0; j < d; ++j) {
        double t = __dsub_rn((double)z[j], (double)centre[j]);
        s = __dadd_rn(s, __dmul_rn(t, t));
    }
    out[i] = closest ? fmin(closest[i], s) : s;
}

// part[c] = the sum of v over chunk c of KMEANS_ROWS rows, in order (HostDistances::potential).
extern "C" __global__ void kmeans_chunk_totals(const double* v, u64 n, double* part) {
    u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 start = c * KMEANS_ROWS;
    if (start >= n) return;
    u64 end = start + KMEANS_ROWS < n ? start + KMEANS_ROWS : n;
    double s = -0.0;
    for (u64 i = start; i < end; ++i) s = __dadd_rn(s, v[i]);
    part[c] = s;
}
