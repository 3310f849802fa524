#!/usr/bin/env bash
# RMM's own random-allocations grid ({1k, 10k, 100k} allocations x max size {1 .. 4096} MiB, one
# thread, 16,000 MiB live at most, the resources as RMM's benchmark builds them), RMM 26.10 and
# ours in one call. Run in place with .rmm-bench carried (as rmm_side_by_side.sh:
# ../shared/rmm-bench/fetch.sh, benches/rmm/rmm_ra.cu copied in, the stripped
# bench-random_allocations in ours/).
cd "$(dirname "$0")/../../../.rmm-bench" || exit 1   # the repository's .rmm-bench
nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_ra.cu -o rmm_ra \
  -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -lcuda -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64' || exit 1
# NOASYNC=1 leaves the async resources out (their cells with GiB blocks take minutes).
if [ -n "${NOASYNC:-}" ]; then rmm_extra=noasync; ours_extra="--only pool,arena,binning"; fi
./rmm_ra 0 one grid ${rmm_extra:-} > "$OUT/rmm_grid.txt" 2>&1
./ours/bench-random_allocations --grid ${ours_extra:-} --json "$OUT/ours_grid.json" > "$OUT/ours_grid.txt" 2>&1
grep -h "grid" "$OUT/rmm_grid.txt" "$OUT/ours_grid.txt"
