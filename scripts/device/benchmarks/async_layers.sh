#!/usr/bin/env bash
# Where the async resource's time goes (issue 11), in one call. Each round: one Rust process
# where every layer takes turns on the same one-thread traces (benches/benches/async_layers.rs:
# cudarc's sys calls, rmm_cuda::MemPool, AsyncResource, and, loaded from
# benches/rmm/rmm_async_layers.cu built here as a shared library, the runtime's
# cudaMallocFromPoolAsync and RMM's cuda_async_memory_resource). Then, once, RMM's cuda_async and
# the raw pools in a C++ process of their own (benches/rmm/rmm_ra.cu, async mode) and
# random_allocations --only async, one and four threads. Run with
# .rmm-bench carried (../shared/rmm-bench/fetch.sh, benches/rmm/rmm_ra.cu and
# rmm_async_layers.cu copied in, the stripped bench-async_layers and bench-random_allocations in
# .rmm-bench/ours/); $OUT receives the figures. ROUNDS (default "1 2") names the rounds (empty:
# none); THREADS (default "1") the thread counts of each round ("1 4": WORKLOADS.md A's two);
# GRID=1 adds RMM's grid in one process (async_layers --grid); NOSEPARATE=1 leaves out the
# separate processes.
cd "$(dirname "$0")/../../../.rmm-bench" || exit 1   # the repository's .rmm-bench
flags=(-std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include)
libs=(-Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -lcuda -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64')
nvcc "${flags[@]}" rmm_ra.cu -o rmm_ra "${libs[@]}" || exit 1
nvcc "${flags[@]}" -shared -Xcompiler -fPIC rmm_async_layers.cu -o librmm_async_layers.so "${libs[@]}" || exit 1
for round in ${ROUNDS-1 2}; do
  for threads in ${THREADS:-1}; do
    echo "== round $round: every layer in one process, RMM's loaded beside ours ($threads thread(s))"
    json="$OUT/layers_$round.json"
    [ "$threads" != 1 ] && json="$OUT/layers_${threads}threads_$round.json"
    ./ours/bench-async_layers --threads "$threads" --rmm-lib "$PWD/librmm_async_layers.so" --json "$json" 2>&1 | tail -9
  done
done
if [ -n "${GRID:-}" ]; then
  echo "== RMM's grid: the driver's calls, ours and RMM's taking turns in one process"
  ./ours/bench-async_layers --grid --rmm-lib "$PWD/librmm_async_layers.so" --json "$OUT/layers_grid.json" 2>&1 | tail -21
fi
[ -n "${NOSEPARATE:-}" ] && exit 0
# Processes of their own, one and four threads (benches/WORKLOADS.md A as issue 11 states it).
echo "== RMM and the raw pools (C++, a process of their own)"
./rmm_ra 100000 one async 2>&1 | grep "threads=" | tee "$OUT/rmm_async.txt"
echo "== random_allocations --only async"
./ours/bench-random_allocations --only async --json "$OUT/ra_async.json" 2>&1 | grep -iE "async|ns" | head -12
