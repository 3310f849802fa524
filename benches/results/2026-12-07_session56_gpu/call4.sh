#!/bin/bash
# Session 56, call 4 (carry .gpu-w: scpipe and test-gpu_generated built with the generated
# run's marker genes made from their subset's cells alone (commit
# 1579e36)):
# 1. gpu_generated (the generator's named cells against its blocks; the generated and file
#    runs against the in-memory run);
# 2. the atlas workflow with --target-recall 0.96 (call 3: 0.96 passes the 1 M quality gates
#    that 0.95 misses by a hair on modularity).
# Cut to these when 280 s of device time were left (planned: memcheck of the generator's test,
# and the atlas at 0.95 too).
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 150 $B/test-gpu_generated > $L/t_gen.log 2>&1; say "gpu_generated rc=$? $(grep -E 'test result' $L/t_gen.log)"
grep -E "panicked|FAILED" -A3 $L/t_gen.log | head -12 >> "$S"
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu"
timeout 60 $B/scpipe run --demo --demo-on-gpu --demo-cells 50000 --device gpu --gpus 1 --neighbors-method ivf \
  -o /dev/shm/warm.h5ad > $L/warm.log 2>&1; say "warm-up rc=$?"
pack_logs
for v in "r96 --target-recall 0.96"; do
  set -- $v; name=$1; shift
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 150 $B/scpipe run $ATLAS --gpus 1 --neighbors-method ivf "$@" \
    -o /dev/shm/atlas.h5ad --report $L/atlas_$name.json > $L/atlas_$name.log 2>&1; say "== atlas $name $* rc=$?"
  grep -E "^[a-zA-Z_ ()]+ +[0-9]+\.[0-9]{3} |^ivf tensor|^umap epochs epochs|Maximum resident|Elapsed" $L/atlas_$name.log | cut -c1-200 >> "$S"
  rm -f /dev/shm/atlas.h5ad
  pack_logs
done
