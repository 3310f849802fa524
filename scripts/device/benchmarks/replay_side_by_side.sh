#!/usr/bin/env bash
# A real allocation log (the GPU pipeline on 200,000 generated cells) replayed against RMM 26.10's
# resources and ours, in one device call. Run from the repository root
# (bash scripts/device/benchmarks/replay_side_by_side.sh CELLS|LOG.csv [scpipe run options]) with .rmm-bench (from
# ../shared/rmm-bench/fetch.sh, benches/rmm/rmm_replay.cu copied in) and .gpu-rp (scpipe and the
# stripped replay bench as bench-replay) carried.
set -u
OUT=${OUT:-/tmp/out}
CELLS=${1:-200000}
shift
if [[ "$CELLS" == *.csv ]]; then
  # A log already recorded (e.g. benches/results/pipeline-200k-allocation-log.csv).
  cp "$CELLS" "$OUT/pipeline-log.csv"
else
  # Further arguments go to scpipe run (e.g. --device-memory-limit 1GiB: the streamed run's log).
  ./.gpu-rp/scpipe run --demo --demo-cells "$CELLS" --demo-genes 20000 --allocation-log "$OUT/pipeline-log.csv" \
    -o /dev/shm/replay.h5ad "$@" > "$OUT/pipeline.txt" 2>&1 || { tail "$OUT/pipeline.txt"; exit 1; }
  rm -f /dev/shm/replay.h5ad
fi
echo "log: $(wc -l < "$OUT/pipeline-log.csv") lines"
[ -x .rmm-bench/rmm_replay ] || (cd .rmm-bench && nvcc -std=c++20 -O3 -arch=sm_90 -Irmm/include -Irmm/include/rapids -Irlog/include rmm_replay.cu \
  -o rmm_replay -Lrmm/lib64 -lrmm -Lrlog/lib64 -lrapids_logger -Xlinker '-rpath=$ORIGIN/rmm/lib64:$ORIGIN/rlog/lib64') || exit 1
echo "== RMM 26.10"
./.rmm-bench/rmm_replay "$OUT/pipeline-log.csv"
echo "== ours"
./.gpu-rp/bench-replay "$OUT/pipeline-log.csv" --json "$OUT/replay.json" 2>&1 | tail -14
