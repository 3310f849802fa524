#!/usr/bin/env bash
# Session 51's allocator call (issue 55): RMM 26.10 and ours side by side, both pinned to core 3
# (rmm_sub_allocators.sh, NOGRID=1: workload A's one-thread cells, one stream and across two),
# then ours from before the quick bins (b2495a6's parent) on the same cells, pinned. Carry
# .rmm-bench (fetch.sh, benches/rmm/rmm_ra.cu, ours/ and ours_base/
# bench-random_allocations.xz).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for d in ours ours_base; do xz -d -k -f .rmm-bench/$d/bench-random_allocations.xz; chmod +x .rmm-bench/$d/bench-random_allocations; done
SECONDS=0
PIN=3 NOGRID=1 ROUNDS="1 2" bash scripts/device/benchmarks/rmm_sub_allocators.sh > /dev/null 2>&1
echo "side by side: ${SECONDS}s"
grep -E "^==|pool|arena|binning|fixed" "$OUT/sub_allocators_pinned.txt" | grep -v "^ *$" | head -80
for round in 1 2; do
  taskset -c 3 .rmm-bench/ours_base/bench-random_allocations --only pool,arena --threads 1 2>&1 \
    | grep " x1:" | sed "s/^/before quick bins, round $round: /" | tee -a "$OUT/ours_base_pinned.txt"
done
