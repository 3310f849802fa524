#!/bin/bash
# The 1,000,000-cell default flow on 1 GPU and on every GPU with two builds of scpipe in one call
# (BUNDLE/scpipe and BUNDLE/scpipe-prev, alternating; ROUNDS rounds, default 2), then the two
# builds' outputs of the last round compared dataset by dataset (compare_h5ad.py), on 1 GPU and
# on every GPU. Usage: bash scripts/device/build_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets the reports)
set -u
B=${1:?bundle directory with scpipe and scpipe-prev}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
HERE=$(dirname "$0")
source "$HERE/nccl_env.sh"
run() {  # run BINARY NAME GPUS
  "$B/$1" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$3" \
    -o /dev/shm/$2.h5ad --report "$OUT/$2.json" 2>&1 \
    | grep -E "set up|join|move|calculate_qc|filter|pca|stack|neighbors|write h5ad|total"
}
echo "== warm-up (2 runs, outputs removed)"
run scpipe warm-a "$N"; run scpipe-prev warm-b 1
rm -f /dev/shm/warm-*.h5ad
ROUNDS=${ROUNDS:-2}
for round in $(seq "$ROUNDS"); do
  for n in 1 "$N"; do
    for build in scpipe-prev scpipe; do
      echo "== round $round: $build on $n GPU(s)"
      run "$build" "r$round-$build-g$n" "$n"
      [ "$round" = "$ROUNDS" ] || rm -f "/dev/shm/r$round-$build-g$n.h5ad"
    done
  done
done
for n in 1 "$N"; do
  echo "== outputs of the two builds on $n GPU(s)"
  python3 "$HERE/compare_h5ad.py" "/dev/shm/r$ROUNDS-scpipe-prev-g$n.h5ad" "/dev/shm/r$ROUNDS-scpipe-g$n.h5ad"
done
rm -f /dev/shm/r*-scpipe*.h5ad
