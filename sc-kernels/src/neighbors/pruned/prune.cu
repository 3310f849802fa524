// Lists of an inverted file that provably hold none of a list's exact neighbours (mod.rs beside this file).
//
// The cells are reached list by list through the tensor scan's slots: list l holds the slots
// starts[l] .. starts[l] + sizes[l], ids[slot] its cell (~0: padding). Squared distances are
// formed in f64 from the f32 rows of x (n x d) and the centroids c (nl x d).
//
// Two lower bounds on |q - r| for a query q of list A and any cell r of list L:
// - the ball: |q - c_L| - R_L, with R_L the largest |r - c_L| over L's cells;
// - the bisector of c_A and c_L: h(y) = (|y - c_A|^2 - |y - c_L|^2) / (2 |c_L - c_A|) is y's
//   signed distance to it, and h changes by at most |y - y'| between two points, so
//   |q - r| >= h(r) - h(q) >= (gap[L][A] - (|q - c_A|^2 - |q - c_L|^2)) / (2 |c_L - c_A|),
//   gap[L][A] = min over r in L of |r - c_A|^2 - |r - c_L|^2 (`prune_gaps`).
// List L is kept for A when some q of A has both bounds at most D_q, an upper bound of the
// distance to its k-th neighbour (`prune_lists`). Slack: f64 rounding is ~1e-14 of the squared
// norms involved; every comparison gives away 1e-10 of them, so rounding only keeps lists.
#define PR_THREADS 256
#define PR_M 64  // cells per tile (8 per thread, one column of centroids)
#define PR_C 32  // centroids per tile
#define PR_TOL 1e-10

// Shared memory: the cells' rows xs[PR_M][dp], the centroids' cs[PR_C][dp] (dp odd: the
// column reads of cs fall in distinct banks), per cell |x|^2, |x - c_own|^2, a third value and
// whether it is a cell; per centroid |c|^2 and a second value.
struct PrTiles {
    double* xs;
    double* cs;
    double* xn;
    double* own;
    double* extra;
    double* cn;
    double* cextra;
    int* ok;
};

__device__ __forceinline__ PrTiles pr_tiles(double* smem, u32 dp) {
    PrTiles t;
    t.xs = smem;
    t.cs = t.xs + PR_M * dp;
    t.xn = t.cs + PR_C * dp;
    t.own = t.xn + PR_M;
    t.extra = t.own + PR_M;
    t.cn = t.extra + PR_M;
    t.cextra = t.cn + PR_C;
    t.ok = (int*)(t.cextra + PR_C);
    return t;
}

// Streams the cells of list l past every centroid: `prep(i, slot)` per cell tile row (thread
// i < PR_M) after its values are in place, `cprep(jj, j)` per centroid tile row (thread jj <
// PR_C), then `epi(j, D[8], cells)` by every thread: centroid j = j0 + (tid & 31) and the
// squared distances D[i] of cells (tid >> 5) + 8 i of the tile. `epi` may synchronise the block.
template <typename Prep, typename CPrep, typename Epi>
__device__ __forceinline__ void pr_stream(const float* __restrict__ x, const double* __restrict__ c,
                                          const u32* __restrict__ ids, const u64* __restrict__ starts,
                                          const u32* __restrict__ sizes, u32 nl, u32 d, u32 l,
                                          const PrTiles& sh, u32 dp, Prep prep, CPrep cprep, Epi epi) {
    const u32 tid = threadIdx.x, jj = tid & 31, w = tid >> 5;
    const u64 s0 = starts[l], s1 = s0 + sizes[l];
    const double* cl = c + (u64)l * d;
    for (u64 m0 = s0; m0 < s1; m0 += PR_M) {
        __syncthreads();
        for (u32 e = tid; e < PR_M * d; e += PR_THREADS) {
            u32 i = e / d, t = e % d;
            u32 cell = m0 + i < s1 ? ids[m0 + i] : ~0u;
            sh.xs[i * dp + t] = cell == ~0u ? 0.0 : (double)x[(u64)cell * d + t];
        }
        __syncthreads();
        if (tid < PR_M) {
            u32 cell = m0 + tid < s1 ? ids[m0 + tid] : ~0u;
            double s = 0.0, o = 0.0;
            for (u32 t = 0; t < d; ++t) {
                double v = sh.xs[tid * dp + t];
                s = fma(v, v, s);
                o = fma(v - cl[t], v - cl[t], o);
            }
            sh.xn[tid] = s;
            sh.own[tid] = o;
            sh.ok[tid] = cell != ~0u;
            prep(tid, m0 + tid);
        }
        for (u32 j0 = 0; j0 < nl; j0 += PR_C) {
            __syncthreads();
            for (u32 e = tid; e < PR_C * d; e += PR_THREADS) {
                u32 i = e / d, t = e % d;
                sh.cs[i * dp + t] = j0 + i < nl ? c[(u64)(j0 + i) * d + t] : 0.0;
            }
            if (tid < PR_C && j0 + tid < nl) {
                const double* cj = c + (u64)(j0 + tid) * d;
                double s = 0.0;
                for (u32 t = 0; t < d; ++t) s = fma(cj[t], cj[t], s);
                sh.cn[tid] = s;
                cprep(tid, j0 + tid);
            }
            __syncthreads();
            double acc[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = 0.0;
            for (u32 t = 0; t < d; ++t) {
                double cv = sh.cs[jj * dp + t];
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[i] = fma(sh.xs[(w + 8 * i) * dp + t], cv, acc[i]);
            }
            const double cnj = j0 + jj < nl ? sh.cn[jj] : 0.0;
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = sh.xn[w + 8 * i] + cnj - 2.0 * acc[i];
            epi(j0 + jj, acc);
        }
    }
}

// gap[l * nl + j] for every centroid j (+inf for an empty list), radius[l] = R_l (rounded up),
// norm2[l] = the largest |r|^2 of l's cells. One block a list.
extern "C" __global__ void __launch_bounds__(PR_THREADS)
prune_gaps(const float* __restrict__ x, const double* __restrict__ c, const u32* __restrict__ ids,
           const u64* __restrict__ starts, const u32* __restrict__ sizes, u32 nl, u32 d, u32 dp,
           double* __restrict__ gap, double* __restrict__ radius, double* __restrict__ norm2) {
    extern __shared__ double pr_smem[];
    const PrTiles sh = pr_tiles(pr_smem, dp);
    __shared__ double red[8][32];
    __shared__ double big[2];
    const u32 l = blockIdx.x, tid = threadIdx.x, jj = tid & 31, w = tid >> 5;
    if (tid == 0) big[0] = big[1] = 0.0;
    for (u32 j = tid; j < nl; j += PR_THREADS) gap[(u64)l * nl + j] = __longlong_as_double(0x7ff0000000000000ll);
    __syncthreads();
    pr_stream(x, c, ids, starts, sizes, nl, d, l, sh, dp,
              [&](u32 i, u64) {
                  // Non-negative doubles order as their bits do (NaN above +inf: kept).
                  if (sh.ok[i]) {
                      atomicMax((unsigned long long*)&big[0], (unsigned long long)__double_as_longlong(sh.own[i]));
                      atomicMax((unsigned long long*)&big[1], (unsigned long long)__double_as_longlong(sh.xn[i]));
                  }
              },
              [&](u32, u32) {},
              [&](u32 j, const double* D) {
                  double m = __longlong_as_double(0x7ff0000000000000ll);
#pragma unroll
                  for (int i = 0; i < 8; ++i)
                      if (sh.ok[w + 8 * i]) m = fmin(m, D[i] - sh.own[w + 8 * i]);
                  red[w][jj] = m;
                  __syncthreads();
                  if (tid < 32 && j < nl) {
                      double v = red[0][tid];
                      for (u32 r = 1; r < 8; ++r) v = fmin(v, red[r][tid]);
                      u64 at = (u64)l * nl + j;
                      gap[at] = fmin(gap[at], v);
                  }
              });
    __syncthreads();
    if (tid == 0) {
        radius[l] = sqrt(big[0]) * (1.0 + PR_TOL);
        norm2[l] = big[1];
    }
}

// keep[a * nl + l] = 1 when list l may hold a neighbour of a cell of list a (block a), else
// 0. D_q from the tensor scan's pass 1: tau[slot] bounds the k-th score, nrm[slot] |q|, both
// in the frame scaled by `scale`; D_q^2 <= (nrm^2 + tau) / scale^2, given 1e-4 of slack.
// A query without a finite bound keeps every list.
extern "C" __global__ void __launch_bounds__(PR_THREADS)
prune_lists(const float* __restrict__ x, const double* __restrict__ c, const u32* __restrict__ ids,
            const u64* __restrict__ starts, const u32* __restrict__ sizes, u32 nl, u32 d, u32 dp,
            const double* __restrict__ gap, const double* __restrict__ radius,
            const double* __restrict__ norm2, const float* __restrict__ tau,
            const float* __restrict__ nrm, float scale, u8* __restrict__ keep) {
    extern __shared__ double pr_smem[];
    const PrTiles sh = pr_tiles(pr_smem, dp);
    u8* kept = (u8*)(sh.ok + PR_M);  // nl flags
    const u32 a = blockIdx.x, tid = threadIdx.x, w = tid >> 5;
    for (u32 j = tid; j < nl; j += PR_THREADS) kept[j] = j == a;
    const double* ca = c + (u64)a * d;
    const double inv = 1.0 / (double)scale;
    pr_stream(x, c, ids, starts, sizes, nl, d, a, sh, dp,
              [&](u32 i, u64 slot) {
                  double dq = __longlong_as_double(0x7ff0000000000000ll);
                  if (sh.ok[i]) {
                      double q2 = (double)nrm[slot] * (double)nrm[slot];
                      double s = (q2 + (double)tau[slot]) * (1.0 + 1e-4) + 1e-4 * q2;
                      // NaN (no bound) stays NaN: no comparison with it prunes.
                      dq = sqrt(fmax(s, 0.0)) * inv;
                      if (!(s == s)) dq = s;
                  }
                  sh.extra[i] = dq;
              },
              [&](u32 jj, u32 j) {
                  // 1 / (2 |c_a - c_j|), the distance formed directly (no cancellation between
                  // close centroids); 0 for the same point (no bisector).
                  const double* cj = c + (u64)j * d;
                  double s = 0.0;
                  for (u32 t = 0; t < d; ++t) s = fma(ca[t] - cj[t], ca[t] - cj[t], s);
                  sh.cextra[jj] = s > 0.0 ? 0.5 / sqrt(s) : 0.0;
              },
              [&](u32 j, const double* D) {
                  if (j >= nl || sizes[j] == 0) return;
                  const double rl = radius[j], gl = gap[(u64)j * nl + a], nj = norm2[j];
                  const double half = sh.cextra[j & 31], cnj = sh.cn[j & 31];
                  bool any = false;
#pragma unroll
                  for (int i = 0; i < 8; ++i) {
                      const u32 m = w + 8 * i;
                      if (!sh.ok[m]) continue;
                      const double tol = PR_TOL * (sh.xn[m] + cnj + nj + sh.own[m]);
                      const double dq = sh.extra[m], reach = dq + rl;
                      // The ball: |q - c_l| - R_l <= D_q, squared; the bisector's bound.
                      const bool ball = !(D[i] - tol > reach * reach);
                      const bool plane = !(half > 0.0 && (gl - (sh.own[m] - D[i]) - 2.0 * tol) * half > dq);
                      any |= ball && plane;
                  }
                  if (any) kept[j] = 1;
              });
    __syncthreads();
    for (u32 j = tid; j < nl; j += PR_THREADS) keep[(u64)a * nl + j] = kept[j];
}
