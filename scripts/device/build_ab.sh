#!/bin/bash
# The 1,000,000-cell default flow with two builds of scpipe in one call (BUNDLE/scpipe and
# BUNDLE/scpipe-prev, alternating; ROUNDS rounds, default 2) on each GPU count of GPUS (default
# "1 N", N = every GPU), then a table of every run (end to end without the input, the input's
# generation, the write of X and .raw, the total), then the two builds' outputs of the last round
# compared dataset by dataset (compare_h5ad.py).
# Usage: bash scripts/device/build_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets the reports)
set -u
B=${1:?bundle directory with scpipe and scpipe-prev}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
HERE=$(dirname "$0")
source "$HERE/nccl_env.sh"
GPUS=${GPUS:-1 $N}
run() {  # run BINARY NAME GPUS
  "$B/$1" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$3" \
    -o /dev/shm/$2.h5ad --report "$OUT/$2.json" 2>&1 \
    | grep -E "generate|set up|join|move|calculate_qc|filter|pca|stack|neighbors|write h5ad|total"
}
echo "== warm-up (2 runs, outputs removed)"
run scpipe warm-a "$N"; run scpipe-prev warm-b 1
rm -f /dev/shm/warm-*.h5ad
ROUNDS=${ROUNDS:-2}
for round in $(seq "$ROUNDS"); do
  for n in $GPUS; do
    for build in scpipe-prev scpipe; do
      echo "== round $round: $build on $n GPU(s)"
      run "$build" "r$round-$build-g$n" "$n"
      [ "$round" = "$ROUNDS" ] || rm -f "/dev/shm/r$round-$build-g$n.h5ad"
    done
  done
done
echo "== every run (seconds)"
python3 - "$OUT" <<'PY'
import json, glob, os, sys
print(f"{'run':28} {'end to end w/o input':>21} {'input':>7} {'X and .raw':>11} {'total':>7}")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "r*-scpipe*-g*.json"))):
    r = json.load(open(path))
    steps = {s["step"]: s["seconds"] for s in r["steps"]}
    gen = steps.get("generate demo data", 0.0)
    bulk = steps.get("write h5ad: X and .raw", float("nan"))
    print(f"{os.path.basename(path)[:-5]:28} {r['total_seconds'] - gen:21.2f} {gen:7.2f} {bulk:11.2f} {r['total_seconds']:7.2f}")
PY
for n in $GPUS; do
  echo "== outputs of the two builds on $n GPU(s)"
  python3 "$HERE/compare_h5ad.py" "/dev/shm/r$ROUNDS-scpipe-prev-g$n.h5ad" "/dev/shm/r$ROUNDS-scpipe-g$n.h5ad"
done
rm -f /dev/shm/r*-scpipe*.h5ad
