#!/bin/bash
# Where the output goes (issue 12): the 1,000,000-cell default flow on 1 GPU and on every GPU,
# writing to each folder of DIRS in turn (default: /dev/shm, tmpfs, and /tmp, the machine's
# disk), ROUNDS rounds (default 2) after two warm-up runs, with SCPIPE_TRACE_WRITE's lines.
# Usage: bash scripts/device/experiments/output_place_ab.sh BUNDLE_DIR   ($OUT gets the reports)
set -u
B=${1:?bundle directory with scpipe}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/../nccl_env.sh"
DIRS=${DIRS:-/dev/shm /tmp}
for d in $DIRS; do df -h "$d" | tail -1; findmnt -no FSTYPE,OPTIONS -T "$d"; done
run() {  # run DIR NAME GPUS
  SCPIPE_TRACE_WRITE=1 "$B/scpipe" run --demo --demo-cells 1000000 --demo-genes 20000 --gpus "$3" \
    -o "$1/$2.h5ad" --report "$OUT/$2.json" 2>&1 \
    | grep -E "^fill|move|stack|neighbors|write h5ad|total"
  rm -f "$1/$2.h5ad"
}
echo "== warm-up (2 runs, outputs removed)"
run /dev/shm warm-a "$N"; run /dev/shm warm-b 1
for round in $(seq "${ROUNDS:-2}"); do
  for n in 1 "$N"; do
    for d in $DIRS; do
      tag=$(echo "$d" | tr -d / )
      echo "== round $round: $n GPU(s), output in $d"
      run "$d" "r$round-g$n-$tag" "$n"
      sync
    done
  done
done
