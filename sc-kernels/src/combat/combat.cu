// ComBat's passes over the cells (combat/mod.rs `Passes`, `Term::add_row`,
// `Fit::adjusted_row`): a thread a gene of a chunk of a batch's cells, each term made from X as
// the host makes it (f64, every operation rounded on its own), the chunk summed in order; the
// chunks' totals then added in order per batch. The host's sums, bit for bit.

#define COMBAT_WEIGHTED 0
#define COMBAT_RESIDUAL 1
#define COMBAT_STANDARD 2
#define COMBAT_SQUARED 3

struct CombatModel {
    const double* cov;  // n_cov x n
    u64 n;
    u32 n_cov, n_batches;
    u64 g;
    const double *beta, *grand, *var, *sd;  // p x g, g, g, g
};

// Model::covariate_parts (one gene).
__device__ __forceinline__ double combat_cov_part(const CombatModel& m, u64 j, u64 c) {
    double t = 0.0;
    for (u32 k = 0; k < m.n_cov; ++k)
        t = __dadd_rn(t, __dmul_rn(m.cov[(u64)k * m.n + j], m.beta[(u64)(m.n_batches + k) * m.g + c]));
    return t;
}

// standard.
__device__ __forceinline__ double combat_standard(const CombatModel& m, double y, u64 j, u64 c) {
    if (m.var[c] == 0.0) return 0.0;
    return __ddiv_rn(__dsub_rn(y, __dadd_rn(m.grand[c], combat_cov_part(m, j, c))), m.sd[c]);
}

// Term::add_row (one value).
__device__ __forceinline__ double combat_term(const CombatModel& m, int term, int weight,
                                              const double* centre, double y, u64 j, u32 b,
                                              u64 c) {
    switch (term) {
        case COMBAT_WEIGHTED:
            return weight < 0 ? y : __dmul_rn(m.cov[(u64)weight * m.n + j], y);
        case COMBAT_RESIDUAL: {
            double r = __dsub_rn(y, __dadd_rn(m.beta[(u64)b * m.g + c], combat_cov_part(m, j, c)));
            return __dmul_rn(r, r);
        }
        case COMBAT_STANDARD:
            return combat_standard(m, y, j, c);
        default: {
            double t = __dsub_rn(combat_standard(m, y, j, c), centre[(u64)b * m.g + c]);
            return __dmul_rn(t, t);
        }
    }
}

// Chunk `chunk0 + blockIdx.y`'s sums (its `count` members from `first`, all of batch `batch`),
// a thread a gene, into `partial`'s row `blockIdx.y`.
extern "C" __global__ void combat_chunk_sums(
    const float* __restrict__ x, const u32* __restrict__ members,
    const u64* __restrict__ first, const u32* __restrict__ count, const u32* __restrict__ batch,
    u64 chunk0, int term, int weight, const double* __restrict__ cov, u64 n, u32 n_cov,
    u32 n_batches, u64 g, const double* __restrict__ beta, const double* __restrict__ grand,
    const double* __restrict__ var, const double* __restrict__ sd,
    const double* __restrict__ centre, double* __restrict__ partial) {
    const u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g) return;
    const CombatModel m = {cov, n, n_cov, n_batches, g, beta, grand, var, sd};
    const u64 t = chunk0 + blockIdx.y;
    const u32* cells = members + first[t];
    const u32 b = batch[t];
    double acc = 0.0;
    for (u32 i = 0; i < count[t]; ++i) {
        const u64 j = cells[i];
        acc = __dadd_rn(acc, combat_term(m, term, weight, centre, (double)x[j * g + c], j, b, c));
    }
    partial[(u64)blockIdx.y * g + c] = acc;
}

// Each batch's row of `out` (batch blockIdx.y): its chunks' totals (`partial` rows
// `lo[b] - chunk0 .. hi[b] - chunk0`) added in order; batches with no chunk here are left.
extern "C" __global__ void combat_fold(const double* __restrict__ partial,
                                       const u64* __restrict__ lo, const u64* __restrict__ hi,
                                       u64 chunk0, u64 chunk1, u64 g, double* __restrict__ out) {
    const u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u32 b = blockIdx.y;
    if (c >= g || lo[b] < chunk0 || hi[b] > chunk1) return;
    double acc = 0.0;
    for (u64 t = lo[b]; t < hi[b]; ++t) acc = __dadd_rn(acc, partial[(t - chunk0) * g + c]);
    out[(u64)b * g + c] = acc;
}

// Fit::adjusted_row of every value, in place (X's f32 values replaced by the adjusted f64 ones,
// rounded to f32).
extern "C" __global__ void combat_adjust(
    float* __restrict__ x, const u32* __restrict__ batches, const double* __restrict__ cov,
    u64 n, u32 n_cov, u32 n_batches, u64 g, const double* __restrict__ beta,
    const double* __restrict__ grand, const double* __restrict__ var,
    const double* __restrict__ sd, const double* __restrict__ gamma_star,
    const double* __restrict__ delta_star) {
    const CombatModel m = {cov, n, n_cov, n_batches, g, beta, grand, var, sd};
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n * g;
         e += (u64)gridDim.x * blockDim.x) {
        const u64 j = e / g, c = e % g, i = (u64)batches[j] * g + c;
        const double s = combat_standard(m, (double)x[e], j, c);
        const double v = __dmul_rn(__ddiv_rn(__dsub_rn(s, gamma_star[i]), __dsqrt_rn(delta_star[i])), sd[c]);
        x[e] = (float)__dadd_rn(v, __dadd_rn(grand[c], combat_cov_part(m, j, c)));
    }
}
