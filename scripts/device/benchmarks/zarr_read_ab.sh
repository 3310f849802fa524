#!/bin/bash
# The zarr read against the h5ad read (issue 30's read gate), two builds in one call, files in
# /dev/shm: the input (CELLS x 20,000 from `scpipe generate`) copied by each build into a zarr
# store of each of READS (default lz4 none; `scpipe run IN.h5ad -o STORE --zarr-compression C`
# with every step skipped), then, ROUNDS times (default 2), `scpipe run` of the h5ad and of each
# build's stores with every step skipped, by each build: the step table's "read input" row.
# PERF=1 also records the new build's lz4 read with `perf record -g` where perf exists.
# Usage: bash scripts/device/benchmarks/zarr_read_ab.sh PREV_DIR NEW_DIR (each holding scpipe).
#   Logs in $OUT/zarr_read/, a summary in $OUT/a_all.txt.
set -u
P=${1:?directory with the previous scpipe}
N=${2:?directory with the new scpipe}
OUT=${OUT:-/tmp/out}
R=$OUT/zarr_read; mkdir -p "$R"
S=$OUT/a_all.txt
CELLS=${CELLS:-1000000}
D=/dev/shm
say() { echo "$@" | tee -a "$S"; }
SKIP="--no-qc --no-filter-cells --no-filter-genes --no-normalize --no-log1p --no-hvg --no-scale --no-pca --no-neighbors --no-umap --no-leiden --no-markers"
[ -f $D/in.h5ad ] || "$N/scpipe" generate "$CELLS" 20000 -o $D/in.h5ad > /dev/null 2>&1
dir() { [ "$1" = new ] && echo "$N" || echo "$P"; }
for fmt in ${READS:-lz4 none}; do
  for b in prev new; do
    "$(dir $b)/scpipe" run $D/in.h5ad -o $D/in_${b}_$fmt.zarr --zarr-compression $fmt --device cpu $SKIP \
      > "$R/copy_${b}_$fmt.log" 2>&1 || say "FAILED (copy $b $fmt)"
    say "store $b $fmt: $(du -sh $D/in_${b}_$fmt.zarr | cut -f1)"
  done
done
# The reads' outputs go to the machine's disk and are removed after each run.
O=/tmp/copy.zarr
read_one() {  # label build-dir source
  "$2/scpipe" run "$3" -o $O --zarr-compression lz4 --device cpu $SKIP > "$R/$1.log" 2>&1 || say "$1 FAILED"
  say "$1: $(grep -E '^read input ' "$R/$1.log" | cut -c1-90)"
  rm -rf $O
}
for round in $(seq 1 ${ROUNDS:-2}); do
  for b in prev new; do
    read_one "h5ad_${b}_$round" "$(dir $b)" $D/in.h5ad
    for fmt in ${READS:-lz4 none}; do
      read_one "${fmt}_${b}_$round" "$(dir $b)" $D/in_${b}_$fmt.zarr
    done
  done
done
if [ -n "${PERF:-}" ] && command -v perf > /dev/null; then
  perf record -g -o "$R/perf_lz4.data" "$N/scpipe" run $D/in_new_lz4.zarr -o $O --device cpu $SKIP > /dev/null 2>&1
  perf report -i "$R/perf_lz4.data" --no-children --percent-limit 1 --stdio 2> /dev/null | head -120 > "$R/perf_lz4.txt"
  rm -rf $O "$R/perf_lz4.data"
fi
