#!/bin/bash
# A/B of one on-by-default switch of scpipe (SCPIPE_RESERVE_WRITE, SCPIPE_HUGE_PAGES, ...) on the
# 1,000,000-cell pipeline, on 1 GPU and on every GPU, in one call: two warm-up runs, then two
# rounds of VAR=1 and VAR=0 each, the step lines of each run printed.
# Usage: bash scripts/device/experiments/switch_ab.sh BUNDLE_DIR VAR [CELLS]   ($OUT gets the reports)
# VALUES="8 32" sets other values (default "1 0"), GPUS="1" other GPU counts (default 1 and all),
# SHOW="^fill" prints more of each run's lines (e.g. SCPIPE_TRACE_WRITE's), ROUNDS=1 one round.
set -u
B=${1:?bundle directory with scpipe}
VAR=${2:?the switch, e.g. SCPIPE_HUGE_PAGES}
CELLS=${3:-1000000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/../nccl_env.sh"
run() {  # run NAME GPUS
  "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$2" \
    -o /dev/shm/$1.h5ad --report "$OUT/$1.json" 2>&1 \
    | grep -E "generate|move|stack|neighbors|write h5ad|total${SHOW:+|$SHOW}"
  rm -f /dev/shm/$1.h5ad
}
echo "== warm-up (2 runs, outputs removed)"
GPUS=${GPUS:-1 $N}
run warm-a "${GPUS##* }"; run warm-b 1
for round in $(seq "${ROUNDS:-2}"); do
  for n in $GPUS; do
    for value in ${VALUES:-1 0}; do
      echo "== round $round: $n GPU(s), $VAR=$value"
      export "$VAR=$value"
      run "r$round-g$n-$VAR$value" "$n"
      unset "$VAR"
    done
  done
done
