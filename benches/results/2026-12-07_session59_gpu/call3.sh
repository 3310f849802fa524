#!/bin/bash
# Session 59, call 3, run from the repository root with .gpu-w carried: test-gpu_suballocators
# built at 788e8f5, rmm-bench.tar.xz's ours/bench-random_allocations at 0581a4b, with
# ours/bench-52aac91 and ours/bench-e8700ac beside it (the builds sessions 54 and 56 measured beside RMM). In order of
# need: 1. compute-sanitizer memcheck of gpu_suballocators without the API errors of the
# out-of-memory tests; 2. issue 55's one-thread cells beside RMM 26.10 (pinned to core 3);
# 3. one stream, the three builds in turns, two rounds, on the device and on the simulated device:
# where did the 1 KiB cells' time go since session 54 (14.2 / 13.7 ns then, 18.6 / 19.5 in call 1)?
# 4. RMM's grid, RMM's and ours.
set -u
B=.gpu-w
source scripts/device/call_preamble.sh
REQUIRE_GPU=1 timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
  $B/test-gpu_suballocators > $L/memcheck_gpu_suballocators.log 2>&1
say "memcheck gpu_suballocators rc=$? $(grep -E 'ERROR SUMMARY|test result' $L/memcheck_gpu_suballocators.log | tr '\n' ' ')"
tar -C . -xJf $B/rmm-bench.tar.xz
PIN=3 NOGRID=1 ROUNDS=1 timeout 90 bash scripts/device/benchmarks/rmm_sub_allocators.sh > $L/sub.log 2>&1 || say "FAILED (sub)"
grep -v "^grid" "$OUT"/sub_allocators_pinned.txt >> "$S"; mv "$OUT"/ours_*json "$OUT"/sub_allocators_pinned.txt $L/ 2>/dev/null
say "cells done at ${SECONDS}s"; pack_logs
for dev in gpu sim; do
  for round in 1 2; do
    for b in bench-52aac91 bench-e8700ac bench-random_allocations; do
      timeout 20 taskset -c 3 .rmm-bench/ours/$b --device $dev --only pool,arena --threads 1 2>&1 | grep " x1:" \
        | awk -v t="$dev r$round $b" '{print t": "$1" "$2" "$3" "$5}' >> "$S"
    done
  done
done
say "builds done at ${SECONDS}s"; pack_logs
cd .rmm-bench
echo "== RMM, grid" > $L/grid.txt; timeout 80 taskset -c 3 ./rmm_ra 0 one grid noasync >> $L/grid.txt 2>&1
echo "== ours, grid" >> $L/grid.txt
timeout 50 taskset -c 3 ./ours/bench-random_allocations --grid --only pool,arena,binning --json $L/ours_grid.json >> $L/grid.txt 2>&1
cd ..; cat $L/grid.txt >> "$S"; say "grid done at ${SECONDS}s"; pack_logs
