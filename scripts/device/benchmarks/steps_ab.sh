#!/bin/bash
# (b) Two builds of scpipe beside rapids-singlecell on workload B's file, in one call: the file
# (rsc_bench.py's generator), rapids-singlecell's cold and warm run (--no-cpu), then the two
# builds taking turns for ROUNDS rounds (default 3), each a fresh process with QC through PCA
# (--no-neighbors; the output, which a file's run needs, to /dev/shm), and each round's
# side_by_side.py rows.
# Usage: bash scripts/device/benchmarks/steps_ab.sh PREV_DIR NEW_DIR [N]   (scpipe in each; carry
# .rsc-bench's wheels and scripts; $OUT gets the reports)
set -u
PREV=${1:?directory with the previous scpipe}
NEW=${2:?directory with the new scpipe}
N=${3:-1000000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../../.." || exit 1  # the repository root
export SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
source scripts/device/rsc_env.sh
rsc_input "$N"
python3 .rsc-bench/rsc_bench.py --no-cpu --no-write-h5ad --n-cells "$N" 2>&1 \
  | grep -v -E "FutureWarning|__version__" > "$OUT/rsc.log"
mv "$OUT/rsc_bench.json" "$OUT/rsc_$N.json"
for round in $(seq "${ROUNDS:-3}"); do
  for build in prev new; do
    dir=$PREV; [ "$build" = new ] && dir=$NEW
    r="$OUT/${build}_${N}_r$round.json"
    rm -f /dev/shm/steps_ab.h5ad
    "$dir/scpipe" run "$F" --device gpu --no-neighbors -o /dev/shm/steps_ab.h5ad --report "$r" \
      > "${r%.json}.log" 2>&1 || echo "FAILED $build round $round"
    echo "== $build, round $round"
    python3 .rsc-bench/side_by_side.py "$r" "$OUT/rsc_$N.json" 2>&1 \
      | grep -E "^\| (qc|filter_cells|filter_genes|normalize_total|log1p|hvg|subset|scale|pca) "
  done
done
rm -f /dev/shm/steps_ab.h5ad
