"""diffmap's orthogonalization step at N rows (default 1,000,000) and C basis columns (36),
variant kernels side by side with CuPy (session 46): the tile kernel of session 45 (rows in
order), diffmap.cu's (a block of 4 warps a block of 1,024 rows), and diffmap.cu's kernel with
other shapes (LR rows a lane, 16-64; W warps sharing a block of 32 LR rows through shared memory;
G dot products at once); then the blocks' sums added in order by add_chunks (a thread a column) or add_chunks_warp (a warp a column).
Prints ms per step (three passes, each with its adds), checks that every lane-order variant
gives the bits of a Python reference of eigsh's block_sum at a small size, and times the two
adds alone over a range of columns and chunks. (A warp a block of 512 rows, x in registers,
took 1.56 ms a step at 36 columns where the tile kernel took 0.92: too few warps.)
    python3 project_dots_variants.py [N] [C]"""
import re, sys, pathlib
import numpy as np
import cupy as cp

ROOT = pathlib.Path(__file__).resolve().parents[3]
COMMON = (ROOT / "sc-kernels/src/gpu/common.cuh").read_text()
DENSE = (ROOT / "sc-kernels/src/gpu/dense_reduce.cu").read_text()

OLD = r"""
#define TILE_ROWS 128
#define TILE_COLS 32
extern "C" __global__ void pd_old(const double* columns, u64 n, const double* h,
        u64 sub_cols, const double* w_in, double* w_out, u64 dot_cols, int self_dot, u64 chunk_rows,
        u64 first_chunk, double* partial) {
    __shared__ double prod[TILE_COLS][TILE_ROWS + 1];
    const u64 r0 = (first_chunk + blockIdx.y) * chunk_rows;
    const u64 r1 = min(r0 + chunk_rows, n);
    const u64 c0 = (u64)blockIdx.x * TILE_COLS;
    const u64 group = dot_cols > c0 ? min((u64)TILE_COLS, dot_cols - c0) : 0;
    double s = -0.0;
    for (u64 t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        const u64 r = t0 + threadIdx.x;
        if (r < r1) {
            double x = w_in[r];
            if (h) {
#pragma unroll 8
                for (u64 c = 0; c < sub_cols; ++c) x = __dsub_rn(x, __dmul_rn(h[c], columns[c * n + r]));
            }
            if (w_out && blockIdx.x == 0) w_out[r] = x;
            if (self_dot) prod[0][threadIdx.x] = __dmul_rn(x, x);
            else for (u64 c = 0; c < group; ++c) prod[c][threadIdx.x] = __dmul_rn(columns[(c0 + c) * n + r], x);
        }
        __syncthreads();
        if (threadIdx.x < group) {
            const u32 rows = (u32)min((u64)TILE_ROWS, r1 - t0);
            for (u32 i = 0; i < rows; ++i) s = __dadd_rn(s, prod[threadIdx.x][i]);
        }
        __syncthreads();
    }
    if (threadIdx.x < group) partial[(u64)blockIdx.y * dot_cols + c0 + threadIdx.x] = __dadd_rn(0.0, s);
}
"""

REPO = (ROOT / "sc-kernels/src/diffmap/diffmap.cu").read_text()



def shared_variant(lr, w, g):
    """diffmap.cu with other block shapes: LR rows a lane, W warps, G dots at once."""
    text = REPO
    for name, value in (("LANE_ROWS", lr), ("WARPS", w), ("DOT_GROUP", g)):
        text, count = re.subn(rf"#define {name} \d+", f"#define {name} {value}", text)
        assert count == 1, name
    return text


def module(src, defines=""):
    return cp.RawModule(code=COMMON + "\n" + defines + "\n" + src, options=("--std=c++17",))

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
C = int(sys.argv[2]) if len(sys.argv) > 2 else 36
u64 = np.uint64

dense = module(DENSE)
add_thread = dense.get_function("add_chunks")
old = module(OLD).get_function("pd_old")
repo_k = module(REPO).get_function("diffmap_project_dots")
add_warp = dense.get_function("add_chunks_warp")
shared = {}
for lr in (16, 32, 64):
    for w in (4, 8):
        for g in (2, 4):
            if lr % w == 0:
                shared[(lr, w, g)] = module(shared_variant(lr, w, g)).get_function("diffmap_project_dots")


def setup(n, c, seed=0):
    rng = np.random.default_rng(seed)
    cols = cp.asarray(rng.standard_normal((c + 1) * n) / np.sqrt(n))
    w = cp.asarray(rng.standard_normal(n))
    return cols, w


def step(kind, n, c, cols, w, add="thread"):
    """One orthogonalization: pass 1 (dots), pass 2 (subtract h1, dots), pass 3 (subtract h2,
    w . w); returns (h1, h2, ww, w) as arrays on the device."""
    sums = cp.zeros(2 * c + 1)
    w_alt = cp.empty_like(w)
    wa, wb = w.copy(), w_alt
    for p in range(3):
        h = 0 if p == 0 else sums.data.ptr + (p - 1) * c * 8
        sub = 0 if p == 0 else c
        wout = 0 if p == 0 else wb.data.ptr
        dot_cols, self_dot = (c, 0) if p < 2 else (1, 1)
        total = sums[p * c:]
        if kind == "old":
            rows = 512
            chunks = -(-n // rows)
            partial = cp.empty(chunks * dot_cols)
            old(((dot_cols + 31) // 32, chunks), (128,), (cols, u64(n), u64(h), u64(sub), wa,
                u64(wout), u64(dot_cols), np.int32(self_dot), u64(rows), u64(0), partial))
        elif kind == "repo":
            rows = 1024
            chunks = -(-n // rows)
            partial = cp.empty(chunks * dot_cols)
            repo_k((chunks,), (128,), (cols, u64(n), u64(h), u64(sub), wa,
                u64(wout), u64(dot_cols), np.int32(self_dot), u64(0), partial))
        else:
            lr, wn, g = kind
            rows = 32 * lr
            chunks = -(-n // rows)
            partial = cp.empty(chunks * dot_cols)
            shared[kind]((chunks,), (32 * wn,), (cols, u64(n), u64(h), u64(sub), wa,
                u64(wout), u64(dot_cols), np.int32(self_dot), u64(0), partial))
        add_chunks(add, partial, chunks, dot_cols, total)
        if p > 0:
            wa, wb = wb, wa
    return sums, wa


SMS = cp.cuda.Device().attributes["MultiProcessorCount"]


def add_chunks(add, partial, chunks, len_, total):
    """dense_reduce's adds, launched as chunked_sums_into launches them (filling_grid)."""
    threads = len_ if add == "thread" else 32 * len_
    blocks = min(max(-(-threads // 256), 1), SMS * 16)
    (add_thread if add == "thread" else add_warp)((blocks,), (256,), (partial, u64(chunks), u64(len_), total))


def timed(kind, add, n, c, cols, w, reps=40):
    step(kind, n, c, cols, w, add)
    cp.cuda.Device().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(reps):
        step(kind, n, c, cols, w, add)
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / reps


def reference(n, c, cols, w, rows):
    """eigsh's host arithmetic in Python floats: block_sum per block, blocks added in order."""
    V = cp.asnumpy(cols).reshape(c + 1, n)
    x = cp.asnumpy(w).copy()

    def dots(vs):
        out = []
        for v in vs:
            total = 0.0
            for b0 in range(0, n, rows):
                s = [-0.0] * 32
                for i in range(b0, min(b0 + rows, n)):
                    s[(i - b0) % 32] += float(v[i]) * float(x[i])
                h = 16
                while h:
                    for l in range(h):
                        s[l] += s[l + h]
                    h //= 2
                total += 0.0 + s[0]
            out.append(total)
        return out

    h1 = dots(V[:c])
    for j in range(c):
        x = x - h1[j] * V[j]   # numpy: rounded products, then the subtraction
    h2 = dots(V[:c])
    for j in range(c):
        x = x - h2[j] * V[j]
    ww = dots([x])
    return np.array(h1 + h2 + ww), x


# Bits: at a small size every lane-order variant against the reference (diffmap.cu's, blocks of
# 1,024 rows; the shared variants, blocks of 32 LR rows), with either add.
n_small, c_small = 4099, 5
cols_s, w_s = setup(n_small, c_small, 1)
ok = True
for kind in ["repo"] + list(shared):
    rows = 1024 if kind == "repo" else 32 * kind[0]
    for add in ("thread", "warp"):
        sums, x = step(kind, n_small, c_small, cols_s, w_s, add)
        ref_sums, ref_x = reference(n_small, c_small, cols_s, w_s, rows) if add == "thread" else (ref_sums, ref_x)
        same = np.array_equal(cp.asnumpy(sums).view(np.uint64), ref_sums.view(np.uint64)) and \
            np.array_equal(cp.asnumpy(x).view(np.uint64), ref_x.view(np.uint64))
        ok &= same
        if not same:
            print("BITS DIFFER", kind, add, np.max(np.abs(cp.asnumpy(sums) - ref_sums)))
print("bits: every variant equals the reference" if ok else "bits: MISMATCH")

cols, w = setup(N, C)
print(f"N {N}, C {C}: ms per orthogonalization step (3 passes with their adds)")
for kind in ["old", "repo"] + list(shared):
    for add in ("thread", "warp"):
        if kind == "old" and add == "warp":
            continue
        print(f"  {str(kind):14s} add by {add:6s}: {timed(kind, add, N, C, cols, w):.3f}")

print("the adds alone, ms (thread a column / warp a column), the same bits:")
for len_ in (36, 256, 2000, 8192, 20000):
    for chunks in (245, 977, 1953):
        partial = cp.asarray(np.random.default_rng(2).standard_normal(chunks * len_))
        out = {}
        for add in ("thread", "warp"):
            total = cp.zeros(len_)
            add_chunks(add, partial, chunks, len_, total)
            out[add] = cp.asnumpy(total)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(20):
                add_chunks(add, partial, chunks, len_, total)
            end.record()
            end.synchronize()
            out[add + "_ms"] = cp.cuda.get_elapsed_time(start, end) / 20
        same = np.array_equal(out["thread"].view(np.uint64), out["warp"].view(np.uint64))
        print(f"  {len_:6d} columns, {chunks:5d} chunks: {out['thread_ms']:.4f} / {out['warp_ms']:.4f}"
              + ("" if same else "  BITS DIFFER"))
