#!/bin/bash
# Session 57, call 2 (carry .gpu-w as for call1.sh, which never started a machine): cut to what
# 388 s of device time could hold: gpu_suballocators and gpu_resources (the size classes on a
# GPU), the atlas with --target-recall 0.96 after a warm-up, then gpu_generated (branch next-gpu).
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
tests() { for t in "$@"; do
  REQUIRE_GPU=1 timeout 60 $B/test-$t > $L/t_$t.log 2>&1; say "$t rc=$? $(grep -E 'test result' $L/t_$t.log | tail -1)"
  grep -E "panicked|FAILED" -A3 $L/t_$t.log | head -12 >> "$S"
done; say "tests done at ${SECONDS}s"; pack_logs; }
tests gpu_suballocators gpu_resources
timeout 40 $B/scpipe run --demo --demo-on-gpu --demo-cells 50000 --device gpu --gpus 1 --neighbors-method ivf \
  -o /dev/shm/warm.h5ad > $L/warm.log 2>&1; say "warm-up rc=$?"
SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 100 $B/scpipe run --demo --demo-on-gpu --demo-cells 11400000 \
  --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu --gpus 1 --neighbors-method ivf \
  --target-recall 0.96 -o /dev/shm/atlas.h5ad --report $L/atlas_r96.json > $L/atlas_r96.log 2>&1
say "== atlas r96 rc=$? at ${SECONDS}s"
grep -E "^[a-zA-Z_ ()]+ +[0-9]+\.[0-9]{3} |^ivf |recall|^umap epochs epochs|Maximum resident|Elapsed" $L/atlas_r96.log | cut -c1-200 >> "$S"
rm -f /dev/shm/atlas.h5ad; pack_logs
tests gpu_generated
