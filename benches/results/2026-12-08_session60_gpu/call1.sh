#!/bin/bash
# Session 60, call 1 (written, not run: no device machine was lent this session). Run from the
# repository root with .gpu-w carried (its recipe: README.md here). In order of need:
# 1. rmm-core's GPU tests and gpu_suballocators (REQUIRE_GPU=1), then compute-sanitizer memcheck
#    of gpu_suballocators without the API errors of its out-of-memory tests;
# 2. issue 55's one-thread cells beside RMM 26.10, both pinned to core 3, two rounds;
# 3. one stream and across streams, session 59's measured build (7e46152) and this one in turns,
#    on the device: the quick paths' gain where it counts (host: 7-32% an event);
# 4. RMM's grid and ours.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
mkdir -p .gpu && tar -C . -xJf $B/gpu.txz
REQUIRE_GPU=1 timeout 150 bash .gpu/run > $L/gpu_run.log 2>&1; say "rmm-core GPU tests rc=$?"
REQUIRE_GPU=1 timeout 60 $B/test-gpu_suballocators > $L/t_gpu_suballocators.log 2>&1
say "gpu_suballocators rc=$? $(grep 'test result' $L/t_gpu_suballocators.log)"
REQUIRE_GPU=1 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  $B/test-gpu_suballocators > $L/memcheck_gpu_suballocators.log 2>&1
say "memcheck gpu_suballocators rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck_gpu_suballocators.log | tr '\n' ' ')"
pack_logs
tar -C . -xJf $B/rmm-bench.tar.xz
PIN=3 NOGRID=1 ROUNDS="1 2" timeout 150 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
grep -v "^grid" "$OUT"/sub_allocators_pinned.txt >> "$S"; mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
say "cells done at ${SECONDS}s"; pack_logs
for flag in "" --cross-stream; do
  for round in 1 2; do
    for b in bench-7e46152 bench-random_allocations; do
      timeout 30 taskset -c 3 .rmm-bench/ours/$b --only pool,arena,binning,fixed --threads 1 $flag 2>&1 \
        | grep " x1:" | awk -v t="gpu${flag} r$round $b" '{print t": "$1" "$2" "$3" "$5}' >> "$S"
    done
  done
done
say "builds done at ${SECONDS}s"; pack_logs
cd .rmm-bench
echo "== RMM, grid" > $L/grid.txt; timeout 80 taskset -c 3 ./rmm_ra 0 one grid noasync >> $L/grid.txt 2>&1
echo "== ours, grid" >> $L/grid.txt
timeout 50 taskset -c 3 ./ours/bench-random_allocations --grid --only pool,arena,binning --json $L/ours_grid.json >> $L/grid.txt 2>&1
cd ..; cat $L/grid.txt >> "$S"; say "grid done at ${SECONDS}s"; pack_logs
