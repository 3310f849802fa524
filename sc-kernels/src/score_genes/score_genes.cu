// score_genes on the device with the host's bits (mod.rs): per column, the values of a fixed
// chunk of rows added one after another (the rows densified; a zero adds nothing), NaN values
// counted instead; per row, its stored values of the wanted columns in storage order. Every
// operation rounded as the host rounds it (never fused).

// Per chunk c (of n_chunks from first_chunk on) and column j: the sum of the non-NaN values and
// the number of NaN values over the chunk's rows, into partial[c * 2 * n_cols + j] and
// partial[c * 2 * n_cols + n_cols + j]. x holds the rows from row0 on, dense.
extern "C" __global__ void score_nan_chunk_sums(const float* x, u64 row0, u64 n_rows, u64 n_cols,
                                                u64 chunk_rows, u64 first_chunk, u64 n_chunks,
                                                double* partial) {
    const u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_chunks * n_cols) return;
    const u64 c = t / n_cols, j = t % n_cols;
    const u64 r0 = (first_chunk + c) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n_rows);
    double s = 0.0, nan = 0.0;
    for (u64 i = r0; i < r1; ++i) {
        const double v = (double)x[(i - row0) * n_cols + j];
        if (isnan(v)) nan = __dadd_rn(nan, 1.0);
        else s = __dadd_rn(s, v);
    }
    partial[c * 2 * n_cols + j] = s;
    partial[c * 2 * n_cols + n_cols + j] = nan;
}

// Per row: the mean of its stored values in the columns marked 1 (listed genes) and 2
// (controls) in `mark`, NaN values left out, over n_listed and n_control columns.
extern "C" __global__ void score_row_means(const u64* indptr, const u32* indices, const float* data,
                                           u64 n_rows, const u8* mark, double n_listed,
                                           double n_control, double* listed, double* control) {
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < n_rows; r += (u64)gridDim.x * blockDim.x) {
        double s1 = 0.0, s2 = 0.0;
        u64 nan1 = 0, nan2 = 0;
        for (u64 p = indptr[r]; p < indptr[r + 1]; ++p) {
            const u8 m = mark[indices[p]];
            if (m == 0) continue;
            const double v = (double)data[p];
            if (m == 1) {
                if (isnan(v)) ++nan1;
                else s1 = __dadd_rn(s1, v);
            } else {
                if (isnan(v)) ++nan2;
                else s2 = __dadd_rn(s2, v);
            }
        }
        listed[r] = __ddiv_rn(s1, __dsub_rn(n_listed, (double)nan1));
        control[r] = __ddiv_rn(s2, __dsub_rn(n_control, (double)nan2));
    }
}
