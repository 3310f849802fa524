#!/bin/bash
# Session 52, call 3: UMAP's epochs with and without the early loads (umap_cell2), the whole
# atlas workflow each (scpipe_noprefetch: this build with c972b9e's umap.cu reverted), and what
# cuBLAS's TF32 GEMM reaches at the Gram block's shape (CuPy, CUPY_TF32=1).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
[ -n "${GEMM:-}" ] && CUPY_TF32=1 timeout 60 python3 - <<'PY' 2>&1 | tee -a "$S"
import cupy as cp, time
for (m, k) in [(5120, 12288), (1024, 12288)]:
    a = cp.random.rand(m, k, dtype=cp.float32)
    for _ in range(3): c = a @ a.T
    cp.cuda.runtime.deviceSynchronize(); t = time.perf_counter()
    for _ in range(20): c = a @ a.T
    cp.cuda.runtime.deviceSynchronize(); dt = (time.perf_counter() - t) / 20
    print(f"cupy TF32 {m}x{m}x{k}: {dt*1e3:.3f} ms, {2*m*m*k/dt/1e12:.0f} TFLOPS")
PY
export SCPIPE_KERNEL_CACHE=/tmp/kc-atlas
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1 --neighbors-method ivf"
for which in ${ORDER:-scpipe_noprefetch scpipe}; do
  say "== $which"
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 300 $B/$which run $ATLAS -o /dev/shm/atlas.h5ad \
    --report "$OUT/$which.json" > /tmp/$which.log 2>&1 || say "FAILED ($which)"
  grep -E "^(calculate|filter|highly|scale|pca|neighbors|umap|leiden|rank_genes|write|total) |^pca |^umap |Maximum resident|Elapsed" /tmp/$which.log | grep -v "module:\|kernel:" | tee -a "$S"
  rm -f /dev/shm/atlas.h5ad
done
