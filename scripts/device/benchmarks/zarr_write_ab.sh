#!/bin/bash
# The zarr write of X and `.raw` (issue 30's write gate), two builds in one call, files in
# /dev/shm: `scpipe run IN.h5ad` (CELLS x 20,000 from `scpipe generate`; QC through neighbors on
# the GPU) to -o OUT.zarr for each of FORMATS (default none lz4) with each build, ROUNDS times
# (default 2), then to -o OUT.h5ad with the second build: the step table's "write ...: X and
# .raw" row (written while neighbors runs). The two builds' lz4 stores are compared file by
# file (`diff -r`): the same bytes.
# OUTDIR (default /dev/shm) is where the outputs go (e.g. /tmp: the machine's disk); the input
# stays in /dev/shm.
# Usage: bash scripts/device/benchmarks/zarr_write_ab.sh PREV_DIR NEW_DIR (each holding
# scpipe). Logs and reports in $OUT/zarr_ab/, a summary in $OUT/a_all.txt.
set -u
P=${1:?directory with the previous scpipe}
N=${2:?directory with the new scpipe}
OUT=${OUT:-/tmp/out}
R=$OUT/zarr_ab; mkdir -p "$R"
S=$OUT/a_all.txt
export SCPIPE_KERNEL_CACHE=/tmp/kc-zarr
CELLS=${CELLS:-1000000}
D=/dev/shm
O=${OUTDIR:-/dev/shm}
say() { echo "$@" | tee -a "$S"; }
[ -f $D/in.h5ad ] || "$N/scpipe" generate "$CELLS" 20000 -o $D/in.h5ad > /dev/null 2>&1
OPTS="--device gpu --target-sum 10000 --no-umap --no-leiden --no-markers"
write() {  # build-dir label output extra-options...
  local b=$1 label=$2 o=$3; shift 3
  "$b/scpipe" run $D/in.h5ad -o "$o" "$@" $OPTS --report "$R/$label.json" > "$R/$label.log" 2>&1 || say "$label FAILED"
  say "$label: $(grep -E '^write .*X and' "$R/$label.log" | cut -c1-110) | size $(du -sh "$o" | cut -f1)"
}
for round in $(seq 1 ${ROUNDS:-2}); do
  for fmt in ${FORMATS:-none lz4}; do
    for b in prev new; do
      dir=$P; [ $b = new ] && dir=$N
      o=$O/out_${b}_$fmt.zarr
      write "$dir" "${b}_${fmt}_$round" "$o" --zarr-compression $fmt
      [ "$fmt" = lz4 ] && [ $round = 1 ] || rm -rf "$o"
    done
    if [ "$fmt" = lz4 ] && [ $round = 1 ]; then
      if diff -r -q $O/out_prev_lz4.zarr $O/out_new_lz4.zarr > "$R/diff_lz4.txt" 2>&1; then
        say "lz4 stores of the two builds: the same bytes ($(find $O/out_new_lz4.zarr -type f | wc -l) files)"
      else
        say "lz4 stores DIFFER: $(wc -l < "$R/diff_lz4.txt") lines in diff_lz4.txt"
      fi
      rm -rf $O/out_prev_lz4.zarr $O/out_new_lz4.zarr
    fi
  done
done
write "$N" h5ad_new $O/out.h5ad
rm -f $O/out.h5ad
