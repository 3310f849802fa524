// normalize_total: per-cell totals (f64, rounded to f32 as the CPU does), the genes above
// max_fraction of some cell's total, and the division of each row by its factor. One warp a row.

#define WARP_ROWS_LOOP(n) \
    u64 warps = ((u64)gridDim.x * blockDim.x) >> 5; \
    u32 lane = threadIdx.x & 31; \
    for (u64 r = (((u64)blockIdx.x * blockDim.x) + threadIdx.x) >> 5; r < (n); r += warps)

__device__ __forceinline__ bool not_count(float v) {
    return !(v >= 0.0f && v <= 3.402823466e38f);  // FLT_MAX: NaN and inf fail
}

// keep: per gene, 0 = left out of the totals; null = every gene counts. bad: set to 1 when a
// value is not a count (negative, NaN or infinite), so the division is refused before it
// writes anything (the check costs no pass of its own); null = not checked.
extern "C" __global__ void row_totals(const u64* indptr, const u32* indices, const float* data,
                                      u64 n_rows, const unsigned char* keep, float* counts,
                                      unsigned int* bad) {
    WARP_ROWS_LOOP(n_rows) {
        double s = 0.0;
        bool found = false;
        for (u64 p = indptr[r] + lane; p < indptr[r + 1]; p += 32) {
            float v = data[p];
            found |= not_count(v);
            if (!keep || keep[indices[p]]) s += (double)v;
        }
        s = warp_sum_f64(s);
        if (lane == 0) counts[r] = (float)s;
        if (bad && __any_sync(FULL_MASK, found) && lane == 0) *bad = 1u;
    }
}

extern "C" __global__ void mark_high(const u64* indptr, const u32* indices, const float* data,
                                     u64 n_rows, const float* counts, double max_fraction,
                                     unsigned char* high) {
    WARP_ROWS_LOOP(n_rows) {
        double lim = max_fraction * (double)counts[r];
        for (u64 p = indptr[r] + lane; p < indptr[r + 1]; p += 32)
            if ((double)data[p] > lim) high[indices[p]] = 1;
    }
}

extern "C" __global__ void divide_rows(const u64* indptr, float* data, u64 n_rows, const float* factor) {
    WARP_ROWS_LOOP(n_rows) {
        float f = factor[r];
        if (f == 0.0f) f = 1.0f;
        for (u64 p = indptr[r] + lane; p < indptr[r + 1]; p += 32) data[p] = data[p] / f;
    }
}

// Sets *bad to 1 when pred holds for one of the n values, in one read at full width (16-byte
// loads; an unaligned head and the tail one value a thread).
template <typename Pred>
__device__ __forceinline__ void flag_any(const float* data, u64 n, unsigned int* bad, Pred pred) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 head = ((16 - ((u64)data & 15)) & 15) / 4;
    if (head > n) head = n;
    const u64 quads = (n - head) / 4;
    bool found = t < head && pred(data[t]);
    const float4* q = (const float4*)(data + head);
    for (u64 i = t; i < quads; i += stride) {
        float4 v = q[i];
        found |= pred(v.x) | pred(v.y) | pred(v.z) | pred(v.w);
    }
    for (u64 i = head + 4 * quads + t; i < n; i += stride) found |= pred(data[i]);
    if (__any_sync(FULL_MASK, found) && (threadIdx.x & 31) == 0) *bad = 1u;
}

struct NotCount {
    __device__ bool operator()(float v) const { return not_count(v); }
};

// A value with a fractional part, NaN included (scanpy's `x == floor(x)` fails).
struct NotWhole {
    __device__ bool operator()(float v) const { return !(v == floorf(v)); }
};

// Sets *bad to 1 when a value is not a count: the check normalize_rows needs before its first
// write.
extern "C" __global__ void not_counts(const float* data, u64 n, unsigned int* bad) {
    flag_any(data, n, bad, NotCount());
}

// Sets *bad to 1 when a value is not a whole number (scanpy's raw-count warnings).
extern "C" __global__ void not_whole(const float* data, u64 n, unsigned int* bad) {
    flag_any(data, n, bad, NotWhole());
}

// With a given target and no gene excluded: totals and division in one pass per row (the row is
// still in cache for the second read). Same f32 arithmetic as row_totals + divide_rows, and each
// lane adds its values in the same order; four loads a lane are in flight at once (a row of a
// thousand values is then eight rounds, not thirty-two). counts: null = not wanted. bad: the
// flag not_counts set before it on the stream; when set, nothing is written.
extern "C" __global__ void normalize_rows(const u64* indptr, float* data, u64 n_rows, float target,
                                          float* counts, const unsigned int* bad) {
    if (*bad) return;
    WARP_ROWS_LOOP(n_rows) {
        const u64 end = indptr[r + 1];
        u64 p = indptr[r] + lane;
        double s = 0.0;
        for (; p + 96 < end; p += 128) {
            float v0 = data[p], v1 = data[p + 32], v2 = data[p + 64], v3 = data[p + 96];
            s += (double)v0;
            s += (double)v1;
            s += (double)v2;
            s += (double)v3;
        }
        for (; p < end; p += 32) s += (double)data[p];
        s = warp_sum_f64(s);
        s = __shfl_sync(FULL_MASK, s, 0);
        float c = (float)s;
        if (counts && lane == 0) counts[r] = c;
        float f = c / target;
        if (f == 0.0f) f = 1.0f;
        for (p = indptr[r] + lane; p + 96 < end; p += 128) {
            float v0 = data[p], v1 = data[p + 32], v2 = data[p + 64], v3 = data[p + 96];
            data[p] = v0 / f;
            data[p + 32] = v1 / f;
            data[p + 64] = v2 / f;
            data[p + 96] = v3 / f;
        }
        for (; p < end; p += 32) data[p] = data[p] / f;
    }
}
