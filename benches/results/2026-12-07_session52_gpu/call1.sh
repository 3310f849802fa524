#!/bin/bash
# Session 52, calls 1-2: the Gram matrix on TF32 tensor cores (3xTF32 split), and (call 2) the
# spectral start's dot products a warp a block. gpu_kernels' pca and (TESTS) other tests and
# their memcheck, then the atlas shape up to PCA (--no-neighbors) with
# the build before (scpipe_base) and this one (scpipe), phase traces on; X_pca compared.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc
export SCPIPE_DATA=$PWD/$B/data
for t in pca ${TESTS:-}; do
  REQUIRE_GPU=1 timeout 200 $B/gpu_kernels $t --nocapture 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
done
[ -x $B/gpu_generated ] && REQUIRE_GPU=1 timeout 200 $B/gpu_generated 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
for t in pca_matches ${MEMCHECK:-}; do
  timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 env REQUIRE_GPU=1 $B/gpu_kernels $t 2>&1 \
    | grep -E "ERROR SUMMARY|LEAK SUMMARY|test result|Invalid|panicked" | head -6 | tee -a "$S"
done
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1 --no-neighbors"
for which in ${ORDER:-scpipe_base scpipe}; do
  say "== $which"
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 200 $B/$which run $ATLAS -o /dev/shm/$which.h5ad \
    --report "$OUT/$which.json" > "$OUT/$which.log" 2>&1 || say "FAILED ($which)"
  grep -E "^(scale|pca) |^pca |rror|Maximum resident|Elapsed" "$OUT/$which.log" | tee -a "$S"
done
python3 - <<'PY' 2>&1 | tee -a "$S"
import h5py, numpy as np
a = h5py.File('/dev/shm/scpipe_base.h5ad'); b = h5py.File('/dev/shm/scpipe.h5ad')
va, vb = a['uns/pca/variance'][:], b['uns/pca/variance'][:]
print('variance rel diff max %.3e (first 10: %s)' % (np.max(np.abs(vb - va) / va), np.array2string(np.abs(vb - va)[:10] / va[:10], precision=2)))
ca, cb = a['varm/PCs'][:], b['varm/PCs'][:]
dots = np.abs(np.sum(ca * cb, axis=0))
print('|component dot| min %.6f, first 10 %s, by 10s %s' % (dots.min(), np.array2string(dots[:10], precision=6), np.array2string(dots[::10], precision=6)))
gaps = (va[:-1] - va[1:]) / va[:-1]
print('relative gaps below 1e-3 at', np.nonzero(gaps < 1e-3)[0][:20])
xa, xb = a['obsm/X_pca'], b['obsm/X_pca']
rows = slice(0, 2000000, 7)
pa, pb = xa[rows], xb[rows]
r = [abs(np.corrcoef(pa[:, c], pb[:, c])[0, 1]) for c in range(pa.shape[1])]
print('X_pca |r| per column: min %.6f, first 10 %s' % (min(r), np.array2string(np.array(r[:10]), precision=6)))
PY
rm -f /dev/shm/scpipe*.h5ad
# The whole workflow with this build (QC through Leiden and markers), phase traces on.
[ -n "${E2E:-1}" ] && PARTS=e2e OUT=$OUT bash scripts/device/benchmarks/atlas_workflow.sh $B
grep -E "^pca |^umap start|^umap \(" $OUT/atlas/e2e.log | tee -a "$S"
