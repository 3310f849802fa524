#!/usr/bin/env bash
# Where the async resource's time goes (issue 11): in one call, RMM's cuda_async, the driver's
# pool called raw through the runtime (cudaMallocFromPoolAsync) and through the driver
# (cuMemAllocFromPoolAsync), and our AsyncResource, on benches/WORKLOADS.md A's traces, one stream and
# cross-stream. Run in place with .rmm-bench carried (as benchmarks/rmm_side_by_side.sh).
cd "$(dirname "$0")/../../../.rmm-bench" || exit 1   # the repository's .rmm-bench
nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_ra.cu -o rmm_ra \
  -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -lcuda -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64' || exit 1
for round in 1 2; do
  for mode in one cross; do
    ./rmm_ra 100000 "$mode" async > "$OUT/rmm_async_${mode}_$round.txt" 2>&1
    flag=""; [ "$mode" = cross ] && flag="--cross-stream"
    ./ours/bench-random_allocations --only async $flag --json "$OUT/ours_async_${mode}_$round.json" > "$OUT/ours_async_${mode}_$round.txt" 2>&1
  done
done
grep -h "ns/op" "$OUT"/rmm_async_*.txt "$OUT"/ours_async_*.txt
