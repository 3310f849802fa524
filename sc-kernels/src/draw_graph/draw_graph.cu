// ForceAtlas2 on the GPU: the host's tree (draw_graph/tree.rs) and forces (draw_graph/mod.rs)
// with the host's arithmetic, every addition and product rounded on its own (__dadd_rn,
// __dmul_rn: never fused), so the layout is the host's bit for bit.

#define LEAF 0x80000000u
#define NONE 0xffffffffu
// The tree is at most 64 internal levels deep (a child's common prefix is longer than its
// parent's); the walk's stack holds a pending right child per level and the next node.
#define STACK 72

struct Fa2Node {
    double comx, comy, mass, diag2;
    u32 left, right, first, last;
};

__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double norm2(double x, double y) { return add(mul(x, x), mul(y, y)); }

// The even bits of the result are v's 32 low bits (tree.rs's spread).
__device__ __forceinline__ u64 spread(u64 v) {
    u64 x = v & 0xffffffffull;
    x = (x | (x << 16)) & 0x0000ffff0000ffffull;
    x = (x | (x << 8)) & 0x00ff00ff00ff00ffull;
    x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0full;
    x = (x | (x << 2)) & 0x3333333333333333ull;
    return (x | (x << 1)) & 0x5555555555555555ull;
}

// keys[i] = the Morton code of node i's grid cell above i (tree.rs's key): the grid from
// (lo_x, lo_y) at scale cells a unit (tree.rs's grid_scale).
extern "C" __global__ void fa2_keys(const double* pos, u64 n, double lo_x, double lo_y,
                                    double scale, u32 axis_bits, u32 index_bits, u64* keys) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u64 top = (1ull << axis_bits) - 1;
    double lo[2] = {lo_x, lo_y};
    u64 q[2];
    for (int d = 0; d < 2; ++d) {
        double v = mul(sub(pos[2 * i + d], lo[d]), scale);
        u64 c = (u64)v;
        q[d] = c < top ? c : top;
    }
    keys[i] = ((spread(q[0]) | (spread(q[1]) << 1)) << index_bits) | i;
}

// The sorted nodes: order, and their positions and masses in sorted order.
extern "C" __global__ void fa2_gather(const u64* keys, u64 n, u64 mask, const double* pos,
                                      const double* mass, u32* order, double* spos,
                                      double* smass) {
    u64 s = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    u32 i = (u32)(keys[s] & mask);
    order[s] = i;
    spos[2 * s] = pos[2 * i];
    spos[2 * s + 1] = pos[2 * i + 1];
    smass[s] = mass[i];
}

__device__ __forceinline__ int delta(const u64* keys, i64 n, i64 i, i64 j) {
    if (j < 0 || j >= n) return -1;
    return __clzll(keys[i] ^ keys[j]);
}

// Internal node k (of n - 1) of the sorted keys: tree.rs's internal_node; each child's parent,
// and the node's arrival flag cleared for fa2_summarize.
extern "C" __global__ void fa2_build(const u64* keys, u64 n, Fa2Node* nodes, u32* parent,
                                     u32* leaf_parent, u32* flags) {
    u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k + 1 >= n) return;
    i64 i = (i64)k, nn = (i64)n;
    i64 d = delta(keys, nn, i, i + 1) > delta(keys, nn, i, i - 1) ? 1 : -1;
    int d_min = delta(keys, nn, i, i - d);
    i64 l_max = 2;
    while (delta(keys, nn, i, i + l_max * d) > d_min) l_max *= 2;
    i64 l = 0;
    for (i64 t = l_max / 2; t >= 1; t /= 2)
        if (delta(keys, nn, i, i + (l + t) * d) > d_min) l += t;
    i64 j = i + l * d;
    int d_node = delta(keys, nn, i, j);
    i64 s = 0, t = l;
    for (;;) {
        t = (t + 1) / 2;
        if (delta(keys, nn, i, i + (s + t) * d) > d_node) s += t;
        if (t <= 1) break;
    }
    i64 split = i + s * d + (d < 0 ? d : 0);
    i64 first = i < j ? i : j, last = i < j ? j : i;
    u32 left = split == first ? (LEAF | (u32)split) : (u32)split;
    u32 right = split + 1 == last ? (LEAF | (u32)(split + 1)) : (u32)(split + 1);
    Fa2Node* nd = &nodes[k];
    nd->left = left;
    nd->right = right;
    nd->first = (u32)first;
    nd->last = (u32)last;
    if (left & LEAF) leaf_parent[left & ~LEAF] = (u32)k; else parent[left] = (u32)k;
    if (right & LEAF) leaf_parent[right & ~LEAF] = (u32)k; else parent[right] = (u32)k;
    flags[k] = 0;
    if (k == 0) parent[0] = NONE;
}

struct Summary {
    double comx, comy, mass, lo[2], hi[2];
};

// Child c's summary: a leaf's point, or an internal node's as its summarizer stored it (read
// from L2: another thread of this launch wrote it).
__device__ __forceinline__ Summary child_summary(u32 c, const double* spos, const double* smass,
                                                 const Fa2Node* nodes, const double* boxes) {
    Summary r;
    if (c & LEAF) {
        u32 s = c & ~LEAF;
        r.comx = r.lo[0] = r.hi[0] = spos[2 * s];
        r.comy = r.lo[1] = r.hi[1] = spos[2 * s + 1];
        r.mass = smass[s];
    } else {
        r.comx = __ldcg(&nodes[c].comx);
        r.comy = __ldcg(&nodes[c].comy);
        r.mass = __ldcg(&nodes[c].mass);
        for (int d = 0; d < 2; ++d) {
            r.lo[d] = __ldcg(&boxes[4 * c + d]);
            r.hi[d] = __ldcg(&boxes[4 * c + 2 + d]);
        }
    }
    return r;
}

// Each internal node's summary from its children's (tree.rs's combine and diag2), bottom-up:
// a thread per leaf climbs, and the second to reach a node summarizes it and goes on.
extern "C" __global__ void fa2_summarize(u64 n, const double* spos, const double* smass,
                                         Fa2Node* nodes, double* boxes, const u32* parent,
                                         const u32* leaf_parent, u32* flags) {
    u64 s = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    u32 p = leaf_parent[s];
    while (p != NONE) {
        __threadfence();
        if (atomicAdd(&flags[p], 1u) == 0) return;
        __threadfence();
        Fa2Node* nd = &nodes[p];
        Summary l = child_summary(nd->left, spos, smass, nodes, boxes);
        Summary r = child_summary(nd->right, spos, smass, nodes, boxes);
        double mass = add(l.mass, r.mass);
        double comx = add(mul(l.mass, l.comx), mul(r.mass, r.comx)) / mass;
        double comy = add(mul(l.mass, l.comy), mul(r.mass, r.comy)) / mass;
        double lo[2], hi[2];
        for (int d = 0; d < 2; ++d) {
            lo[d] = fmin(l.lo[d], r.lo[d]);
            hi[d] = fmax(l.hi[d], r.hi[d]);
            __stcg(&boxes[4 * p + d], lo[d]);
            __stcg(&boxes[4 * p + 2 + d], hi[d]);
        }
        __stcg(&nd->comx, comx);
        __stcg(&nd->comy, comy);
        __stcg(&nd->mass, mass);
        __stcg(&nd->diag2, norm2(sub(hi[0], lo[0]), sub(hi[1], lo[1])));
        p = parent[p];
    }
}

// Node order[s]'s force (mod.rs's forces): the walk's repulsion (tree.rs's walk, left child
// first), then gravity, then its edges' attraction. A thread per sorted position, so a warp's
// nodes are near each other and walk alike.
extern "C" __global__ void fa2_forces(u64 n, const Fa2Node* nodes, const u32* order,
                                      const double* spos, const double* smass, const double* pos,
                                      const u64* indptr, const u32* indices, const float* weights,
                                      double scaling_ratio, double gravity, double theta2,
                                      double* force) {
    u64 s = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n) return;
    u32 i = order[s];
    double px = spos[2 * s], py = spos[2 * s + 1], mi = smass[s];
    double ax = 0.0, ay = 0.0;
    u32 stack[STACK];
    int top = 0;
    stack[top++] = 0;
    while (top > 0) {
        u32 c = stack[--top];
        double yx, yy, m;
        if (c & LEAF) {
            u32 t = c & ~LEAF;
            if (t == s) continue;
            yx = spos[2 * t];
            yy = spos[2 * t + 1];
            m = smass[t];
        } else {
            const Fa2Node* nd = &nodes[c];
            bool whole = false;
            if (s < nd->first || s > nd->last) {
                double d2 = norm2(sub(px, nd->comx), sub(py, nd->comy));
                whole = d2 > 0.0 && nd->diag2 < mul(theta2, d2);
            }
            if (!whole) {
                stack[top++] = nd->right;
                stack[top++] = nd->left;
                continue;
            }
            yx = nd->comx;
            yy = nd->comy;
            m = nd->mass;
        }
        double dx = sub(px, yx), dy = sub(py, yy);
        double d2 = norm2(dx, dy);
        if (d2 > 0.0) {
            double factor = mul(mul(scaling_ratio, mi), m) / d2;
            ax = add(ax, mul(dx, factor));
            ay = add(ay, mul(dy, factor));
        }
    }
    double dist = sqrt(norm2(px, py));
    if (dist > 0.0) {
        double factor = mul(mi, gravity) / dist;
        ax = sub(ax, mul(px, factor));
        ay = sub(ay, mul(py, factor));
    }
    for (u64 e = indptr[i]; e < indptr[i + 1]; ++e) {
        u32 j = indices[e];
        double w = (double)weights[e];
        ax = sub(ax, mul(sub(px, pos[2 * j]), w));
        ay = sub(ay, mul(sub(py, pos[2 * j + 1]), w));
    }
    force[2 * i] = ax;
    force[2 * i + 1] = ay;
}

// Node i's swinging and traction (mod.rs's swing_and_traction).
__device__ __forceinline__ void swing_and_traction(const double* old, const double* f,
                                                   const double* mass, u64 i, double* out) {
    double ox = old[2 * i], oy = old[2 * i + 1], fx = f[2 * i], fy = f[2 * i + 1], m = mass[i];
    out[0] = mul(m, sqrt(norm2(sub(ox, fx), sub(oy, fy))));
    out[1] = mul(mul(0.5, m), sqrt(norm2(add(ox, fx), add(oy, fy))));
}

// A warp per chunk of 1024 nodes (the first_chunk + w-th of count): the chunk's swinging and
// traction totals as eigsh's lane_sum adds them, into part[2 w] and part[2 w + 1].
extern "C" __global__ void fa2_speed_parts(const double* old, const double* force,
                                           const double* mass, u64 n, u64 first_chunk, u64 count,
                                           double* part) {
    u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    u32 lane = threadIdx.x & 31;
    if (w >= count) return;
    u64 start = (first_chunk + w) * 1024;
    double acc[2] = {-0.0, -0.0};
    for (u64 i = start + lane; i < start + 1024 && i < n; i += 32) {
        double t[2];
        swing_and_traction(old, force, mass, i, t);
        acc[0] = add(acc[0], t[0]);
        acc[1] = add(acc[1], t[1]);
    }
    acc[0] = warp_sum_f64(acc[0]);
    acc[1] = warp_sum_f64(acc[1]);
    if (lane == 0) {
        part[2 * w] = acc[0];
        part[2 * w + 1] = acc[1];
    }
}

// Each node moves by its force times step / (1 + sqrt(step swinging)) (mod.rs's loop).
extern "C" __global__ void fa2_move(double* pos, const double* force, const double* old,
                                    const double* mass, u64 n, double step) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double t[2];
    swing_and_traction(old, force, mass, i, t);
    double factor = step / add(1.0, sqrt(mul(step, t[0])));
    pos[2 * i] = add(pos[2 * i], mul(force[2 * i], factor));
    pos[2 * i + 1] = add(pos[2 * i + 1], mul(force[2 * i + 1], factor));
}
