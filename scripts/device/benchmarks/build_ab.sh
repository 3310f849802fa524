#!/bin/bash
# The 1,000,000-cell default flow with several builds of scpipe in one call (BUILDS, binaries of
# BUNDLE; default "scpipe-prev scpipe"; taking turns; ROUNDS rounds, default 2) on each GPU count
# of GPUS (default "1 N", N = every GPU), then a table of every run (end to end without the
# input, the input's generation, the write of X and .raw, the total); each build's outputs of
# the last round are compared dataset by dataset with the first build's (compare_h5ad.py).
# Usage: bash scripts/device/benchmarks/build_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets the reports)
set -u
B=${1:?bundle directory with scpipe and scpipe-prev}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
HERE=$(dirname "$0")
source "$HERE/../nccl_env.sh"
GPUS=${GPUS:-1 $N}
BUILDS=${BUILDS:-scpipe-prev scpipe}
FIRST=${BUILDS%% *}
run() {  # run BINARY NAME GPUS
  "$B/$1" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$3" \
    -o /dev/shm/$2.h5ad --report "$OUT/$2.json" 2>&1 \
    | grep -E "generate|set up|join|move|calculate_qc|filter|pca|stack|neighbors|write h5ad|total"
}
echo "== warm-up (2 runs, outputs removed)"
run "$FIRST" warm-a "$N"; run "$FIRST" warm-b 1
rm -f /dev/shm/warm-*.h5ad
ROUNDS=${ROUNDS:-2}
for round in $(seq "$ROUNDS"); do
  for n in $GPUS; do
    for build in $BUILDS; do
      echo "== round $round: $build on $n GPU(s)"
      run "$build" "r$round-$build-g$n" "$n"
      [ "$round" = "$ROUNDS" ] || rm -f "/dev/shm/r$round-$build-g$n.h5ad"
    done
    # The last round's outputs compared, then removed (the next runs find the memory free).
    if [ "$round" = "$ROUNDS" ]; then
      for build in ${BUILDS#"$FIRST"}; do
        echo "== outputs of $FIRST and $build on $n GPU(s)" >> "$OUT/compare.log"
        python3 "$HERE/compare_h5ad.py" "/dev/shm/r$round-$FIRST-g$n.h5ad" \
          "/dev/shm/r$round-$build-g$n.h5ad" >> "$OUT/compare.log" 2>&1
      done
      rm -f /dev/shm/r$round-*-g$n.h5ad
    fi
  done
done
echo "== every run (seconds)"
python3 - "$OUT" <<'PY'
import json, glob, os, sys
print(f"{'run':28} {'end to end w/o input':>21} {'input':>7} {'X and .raw':>11} {'total':>7}")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "r*-g*.json"))):
    r = json.load(open(path))
    steps = {s["step"]: s["seconds"] for s in r["steps"]}
    gen = steps.get("generate demo data", 0.0)
    bulk = steps.get("write h5ad: X and .raw", float("nan"))
    print(f"{os.path.basename(path)[:-5]:28} {r['total_seconds'] - gen:21.2f} {gen:7.2f} {bulk:11.2f} {r['total_seconds']:7.2f}")
PY
cat "$OUT/compare.log"
