#!/usr/bin/env bash
# RMM 26.10 and ours on benches/WORKLOADS.md A, one stream per thread and cross-stream, in one call.
# Run in place (bash scripts/device/benchmarks/rmm_side_by_side.sh) with .rmm-bench carried
# (../shared/rmm-bench/fetch.sh, with benches/rmm/rmm_ra.cu copied in and the stripped
# bench-random_allocations in .rmm-bench/ours/; 29 MiB).
cd "$(dirname "$0")/../../../.rmm-bench" || exit 1   # the repository's .rmm-bench
nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_ra.cu -o rmm_ra \
  -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64' || exit 1
./rmm_ra 100000 cross > $OUT/rmm_cross.txt 2>&1
./ours/bench-random_allocations --cross-stream --json $OUT/ours_cross.json > $OUT/ours_cross.txt 2>&1
./rmm_ra 100000 > $OUT/rmm_one.txt 2>&1
./ours/bench-random_allocations --json $OUT/ours_one.json > $OUT/ours_one.txt 2>&1
tail -n 25 $OUT/rmm_cross.txt $OUT/ours_cross.txt
