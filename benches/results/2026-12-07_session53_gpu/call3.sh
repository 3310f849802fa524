#!/bin/bash
# Session 53, call 3: the tensor passes' loads at constant offsets (the queries' words put in
# the A fragment's order once a block has loaded them: no register moves before each product).
# 1. gpu_kernels' ivf, tensor, pruned and neighbors tests; memcheck of the tensor tests;
# 2. the 1 M demo's default neighbors, call 1's build (scpipe_c1) against this one, alternating;
# 3. the atlas workflow end to end (PARTS=e2e of atlas_workflow.sh), phases traced.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; S=$OUT/summary.txt
say() { echo "$@" | tee -a "$S"; }
B=.gpu-s
for f in $B/*.xz; do xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$S"
export SCPIPE_KERNEL_CACHE=/tmp/kc SCPIPE_DATA=$PWD/$B/data
for t in ivf tensor pruned neighbors; do
  REQUIRE_GPU=1 timeout 200 $B/gpu_kernels $t 2>&1 | grep -E "^test |test result|panicked|assert" | tee -a "$S"
done
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 env REQUIRE_GPU=1 $B/gpu_kernels tensor 2>&1 \
  | grep -E "ERROR SUMMARY|test result|Invalid|panicked" | head -6 | tee -a "$S"
say "== 1 M demo, default neighbors"
for i in 1 2 3; do for which in scpipe_c1 scpipe; do
  timeout 120 $B/$which run --demo --demo-on-gpu --demo-cells 1000000 --demo-genes 20000 --target-sum 10000 \
    --no-umap --no-leiden --no-markers -o /dev/shm/m1.h5ad > /tmp/m1.log 2>&1 || say "FAILED ($which)"
  say "$which $i: $(grep -E '^neighbors ' /tmp/m1.log | cut -c1-60)"
done; done
rm -f /dev/shm/m1.h5ad
PARTS=e2e bash scripts/device/benchmarks/atlas_workflow.sh $B > "$OUT/e2e_call.log" 2>&1
cat "$OUT/a_all.txt" >> "$S"
grep -E "^ivf |^umap |^pca " "$OUT/atlas/e2e.log" | grep -v "module:\|kernel:" | tee -a "$S"
