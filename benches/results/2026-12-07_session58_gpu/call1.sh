#!/bin/bash
# Session 58, call 1, not run (no device was lent). Carry .gpu-w: scpipe and the GPU tests
# built at main 5f7b4a8 (size classes, arena portions, the thief's carve, the split take) with
# ../2026-12-07_session57_gpu/next-gpu.patch applied (the generated markers' subset made alone,
# a file run's filter_cells reading QC's row statistics); rmm-bench.tar.xz: RMM 26.10's
# build, ours/bench-random_allocations at 5f7b4a8, ours/bench-base at 8c43766):
# 1. gpu_suballocators, gpu_resources; 2. the atlas with --target-recall 0.96 after a warm-up;
# then gpu_generated (gpu_streamed left out: device time);
# 3. issue 55: the one-thread cells beside RMM, pinned (one stream, across streams), then the
#    base build's cells the same way;
# 4. compute-sanitizer memcheck of gpu_suballocators; the atlas at 0.95 when time is left.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
tests() { for t in "$@"; do
  REQUIRE_GPU=1 timeout 100 $B/test-$t > $L/t_$t.log 2>&1; say "$t rc=$? $(grep -E 'test result' $L/t_$t.log | tail -1)"
  grep -E "panicked|FAILED" -A3 $L/t_$t.log | head -12 >> "$S"
done; say "tests done at ${SECONDS}s"; pack_logs; }
tests gpu_suballocators gpu_resources
ATLAS="--demo --demo-on-gpu --demo-cells 11400000 --demo-genes 45854 --n-top-genes 5000 --n-comps 100 --device gpu"
timeout 60 $B/scpipe run --demo --demo-on-gpu --demo-cells 50000 --device gpu --gpus 1 --neighbors-method ivf \
  -o /dev/shm/warm.h5ad > $L/warm.log 2>&1; say "warm-up rc=$?"
atlas() {
  local name=$1; shift
  SCPIPE_TRACE_PHASES=1 /usr/bin/time -v timeout 150 $B/scpipe run $ATLAS --gpus 1 --neighbors-method ivf "$@" \
    -o /dev/shm/atlas.h5ad --report $L/atlas_$name.json > $L/atlas_$name.log 2>&1; say "== atlas $name $* rc=$? at ${SECONDS}s"
  grep -E "^[a-zA-Z_ ()]+ +[0-9]+\.[0-9]{3} |^ivf |recall|^umap epochs epochs|Maximum resident|Elapsed" $L/atlas_$name.log | cut -c1-200 >> "$S"
  rm -f /dev/shm/atlas.h5ad
  pack_logs
}
atlas r96 --target-recall 0.96
tests gpu_generated
# Issue 55.
tar -C . -xJf $B/rmm-bench.tar.xz
PIN=3 NOGRID=1 ROUNDS=1 timeout 200 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
cat "$OUT"/sub_allocators_pinned.txt >> "$S"; mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
for mode in one cross; do flag=""; [ $mode = cross ] && flag="--cross-stream"
  say "== base 8c43766, $mode stream(s), pinned"
  taskset -c 3 .rmm-bench/ours/bench-base --only pool,arena,binning,fixed --threads 1 $flag 2>&1 | grep " x1:" >> "$S"
done
say "issue 55 done at ${SECONDS}s"; pack_logs
for t in "gpu_suballocators"; do set -- $t
  [ $SECONDS -lt 260 ] || { say "memcheck skipped at ${SECONDS}s"; break; }
  REQUIRE_GPU=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/test-$1 ${2:-} \
    > $L/memcheck_$1.log 2>&1; say "memcheck $* rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck_$1.log | tr '\n' ' ')"
done
pack_logs
if [ $SECONDS -lt 200 ]; then atlas r95; else say "atlas r95 skipped at ${SECONDS}s"; fi
