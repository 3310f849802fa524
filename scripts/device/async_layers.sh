#!/usr/bin/env bash
# Where the async resource's time goes (issue 11), in one call: RMM's cuda_async and the driver's
# pool called raw from C++ (benches/rmm/rmm_ra.cu, async mode), then our three layers in one
# Rust process (benches/benches/async_layers.rs: cudarc's sys calls, rmm_cuda::MemPool,
# AsyncResource) and random_allocations --only async, two rounds. Run from the repository root
# with .rmm-bench carried (../shared/rmm-bench/fetch.sh, benches/rmm/rmm_ra.cu copied in, and
# the two stripped bench binaries in .rmm-bench/ours/); $OUT receives the figures.
cd .rmm-bench || exit 1
nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_ra.cu -o rmm_ra \
  -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -lcuda -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64' || exit 1
for round in ${ROUNDS:-1 2}; do
  echo "== round $round: RMM and the raw pools (C++)"
  ./rmm_ra 100000 one async 2>&1 | grep "threads=1" | tee "$OUT/rmm_async_$round.txt"
  echo "== round $round: our layers (Rust)"
  ./ours/bench-async_layers --json "$OUT/layers_$round.json" 2>&1 | tail -8
  echo "== round $round: random_allocations --only async, one thread"
  ./ours/bench-random_allocations --only async --threads 1 --json "$OUT/ra_async_$round.json" 2>&1 | grep -iE "async|ns" | head -8
done
