#!/usr/bin/env bash
# Issue 11's sub-allocator goals, RMM 26.10 and ours in one call, every one-thread case on the
# calling thread in both harnesses: WORKLOADS.md A's one-thread cells on one stream and across two
# streams (pool, arena, binning, fixed), the same grid on a simulated device (the host's own
# speed, no driver), then RMM's own grid (as rmm_grid.sh, async left out; NOGRID=1 skips it).
# Run with .rmm-bench carried (../shared/rmm-bench/fetch.sh,
# benches/rmm/rmm_ra.cu copied in, the stripped bench-random_allocations in ours/). $OUT gets one
# log (sub_allocators.txt) and our JSON reports; ROUNDS (default "1") repeats the one-thread cells.
# PIN=CORE runs both harnesses pinned to that core (taskset), so that neither thread migrates.
cd "$(dirname "$0")/../../../.rmm-bench" || exit 1   # the repository's .rmm-bench
nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_ra.cu -o rmm_ra \
  -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -lcuda -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64' || exit 1
pin() { if [ -n "${PIN:-}" ]; then taskset -c "$PIN" "$@"; else "$@"; fi; }
ours="pin ./ours/bench-random_allocations"
log="$OUT/sub_allocators${PIN:+_pinned}.txt"
echo "== pinned to core: ${PIN:-none}" >> "$log"
for round in ${ROUNDS:-1}; do
  for mode in one cross; do
    flag=""; [ "$mode" = cross ] && flag="--cross-stream"
    echo "== round $round, $mode stream(s): RMM" >> "$log"
    pin ./rmm_ra 100000 "$mode" subs >> "$log" 2>&1
    echo "== round $round, $mode stream(s): ours" >> "$log"
    $ours --only pool,arena,binning,fixed --threads 1 $flag --json "$OUT/ours_${mode}_$round${PIN:+_pinned}.json" 2>&1 | grep " x1:" >> "$log"
  done
done
echo "== ours, grid on a simulated device" >> "$log"
$ours --grid --device sim --memory 34000000000 --only pool,binning >> "$log" 2>&1
if [ -z "${NOGRID:-}" ]; then
  echo "== RMM, grid" >> "$log"
  pin ./rmm_ra 0 one grid noasync >> "$log" 2>&1
  echo "== ours, grid" >> "$log"
  $ours --grid --only pool,arena,binning --json "$OUT/ours_grid${PIN:+_pinned}.json" >> "$log" 2>&1
fi
cat "$log"
