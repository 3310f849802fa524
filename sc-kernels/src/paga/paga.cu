// PAGA's edge counts between groups (paga/mod.rs `group_edge_counts`): each stored entry of
// the graph one directed edge from its row's group to its column's. Integer counts, so the
// order of the additions does not matter: the host's counts exactly. A block counts its rows
// in shared memory when the groups' square fits (`shared` set), then adds them to `counts`.
extern "C" __global__ void paga_edge_counts(const u64* __restrict__ indptr,
                                            const u32* __restrict__ indices,
                                            const u32* __restrict__ groups, u64 n, u32 n_groups,
                                            int shared, unsigned long long* __restrict__ counts) {
    extern __shared__ unsigned int local[];
    const u32 cells = n_groups * n_groups;
    if (shared) {
        for (u32 e = threadIdx.x; e < cells; e += blockDim.x) local[e] = 0;
        __syncthreads();
    }
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u32 row = groups[i] * n_groups;
        for (u64 e = indptr[i]; e < indptr[i + 1]; ++e) {
            const u32 cell = row + groups[indices[e]];
            if (shared)
                atomicAdd(&local[cell], 1u);
            else
                atomicAdd(&counts[cell], 1ull);
        }
    }
    if (shared) {
        __syncthreads();
        for (u32 e = threadIdx.x; e < cells; e += blockDim.x)
            if (local[e]) atomicAdd(&counts[e], (unsigned long long)local[e]);
    }
}
