#!/bin/bash
# Session 58, call 3. Carry .gpu-w as in call 2, plus session 57's scpipe.xz and
# test-gpu_generated.xz (built at eb7f8ea: main af119a7 + next-gpu; the pipeline's code has not
# changed since). 1. compute-sanitizer memcheck of gpu_suballocators (5f7b4a8); 2. gpu_generated
# (branch next-gpu); 3. the atlas with --target-recall 0.96 after a warm-up.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test-gpu_suballocators \
  > $L/memcheck_gpu_suballocators.log 2>&1
say "memcheck gpu_suballocators rc=$? at ${SECONDS}s $(grep -E 'ERROR SUMMARY|test result' $L/memcheck_gpu_suballocators.log | tr '\n' ' ')"
REQUIRE_GPU=1 timeout 100 $B/test-gpu_generated > $L/t_gpu_generated.log 2>&1
say "gpu_generated rc=$? $(grep -E 'test result' $L/t_gpu_generated.log | tail -1)"
grep -E "panicked|FAILED" -A3 $L/t_gpu_generated.log | head -12 >> "$S"
pack_logs
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu"
timeout 60 $B/scpipe run --demo --demo-on-gpu --demo-cells 50000 --device gpu --gpus 1 --neighbors-method ivf \
  -o /dev/shm/warm.h5ad > $L/warm.log 2>&1; say "warm-up rc=$?"
SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 180 $B/scpipe run $ATLAS --gpus 1 --neighbors-method ivf \
  --target-recall 0.96 -o /dev/shm/atlas.h5ad --report $L/atlas_r96.json > $L/atlas_r96.log 2>&1
say "== atlas r96 rc=$? at ${SECONDS}s"
grep -E "^[a-zA-Z_ ()]+ +[0-9]+\.[0-9]{3} |^ivf |recall|^umap epochs epochs|Maximum resident|Elapsed" $L/atlas_r96.log | cut -c1-200 >> "$S"
rm -f /dev/shm/atlas.h5ad
pack_logs
