#!/bin/bash
# On a device machine with several GPUs (nvidia-h100-x2, nvidia-h200-x2 or larger): the NCCL
# tests, then the 1,000,000-cell pipeline on 1 GPU and split across every GPU (strong scaling),
# the default flow and then with harmony, with the step tables and the reports in $OUT.
# Usage: bash scripts/device/benchmarks/multi_gpu.sh BUNDLE_DIR [CELLS]
# COUNTS="1 2 4" sets the GPU counts run (default: 1 and all); each is compared with the first.
# SKIP_TESTS=1 leaves out the tests, SKIP_MEMCHECK=1 only their memcheck runs, SKIP_HDF5_WRITE=1
# the last run (the write left to HDF5).
# This VM backs memory on first use (about 3 s per 8 GiB): two warm-up runs first write (and
# remove) two outputs, so the measured runs' host memory and /dev/shm pages are warm alike.
set -u
B=${1:?bundle directory with scpipe and gpu_split_run}
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/$B/data}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source "$(dirname "$0")/../nccl_env.sh"
nvidia-smi -L
if [ "${SKIP_TESTS:-0}" != 1 ]; then
echo "== NCCL tests ($N GPUs)"
REQUIRE_GPU=1 "$B/gpu_split_run" --test-threads=1 --nocapture > "$OUT/tests.log" 2>&1
grep -E "^test |matches|harmony|result|panicked|Error|error" "$OUT/tests.log"
[ "${SKIP_MEMCHECK:-0}" != 1 ] && {
echo "== compute-sanitizer (memcheck) on the kNN of row ranges, the split harmony (local ranks, NCCL) and the write from the GPUs"
for t in knn_of_row_ranges harmony_split_across_local_ranks harmony_split_across_nccl_ranks device_matrices_are_written; do
  echo "-- $t"
  REQUIRE_GPU=1 compute-sanitizer --tool memcheck --print-limit 3 "$B/gpu_split_run" $t > "$OUT/memcheck-$t.log" 2>&1
  grep -E "ERROR SUMMARY|test result|panicked" "$OUT/memcheck-$t.log"
done
}
fi
run() {  # run NAME GPUS EXTRA...
  local name=$1 n=$2; shift 2
  "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$n" "$@" \
    -o /dev/shm/$name.h5ad --report "$OUT/$name.json" 2>&1
}
echo "== warm-up (2 runs, outputs removed)"
run warm-a "$N" | grep -E "write h5ad|total"
run warm-b 1 | grep -E "write h5ad|total"
rm -f /dev/shm/warm-*.h5ad
compare() {  # compare FILE_1GPU FILE_NGPU
python3 - "$1" "$2" <<'PY'
import h5py, numpy as np, sys
a, b = (h5py.File(f, 'r') for f in sys.argv[1:3])
def corr(key):
    pa, pb = a['obsm/' + key][:], b['obsm/' + key][:]
    return min(abs(np.corrcoef(pa[:, c], pb[:, c])[0, 1]) for c in range(10))
print('same cells:', a['obs/_index'].shape == b['obs/_index'].shape and bool((a['obs/_index'][:] == b['obs/_index'][:]).all()))
print('same genes:', bool((a['var/_index'][:] == b['var/_index'][:]).all()))
print('max |X diff|:', float(np.abs(a['X'][:] - b['X'][:]).max()))
for key in ('X_pca', 'X_pca_harmony'):
    if key in a['obsm']:
        print(key, 'first 10 components |corr| min:', corr(key))
ia, ib = a['obsp/distances/indices'][:], b['obsp/distances/indices'][:]
print('kNN entries equal:', float((ia == ib).mean()) if ia.shape == ib.shape else 'shapes differ')
PY
}
COUNTS=${COUNTS:-1 $N}
FIRST=${COUNTS%% *}
for flow in default harmony; do
  extra=()
  [ "$flow" = harmony ] && extra=(--harmony batch)
  for n in $COUNTS; do
    echo "== $flow: $CELLS cells x 20000 genes on $n GPU(s)"
    run "$flow-$n" "$n" "${extra[@]}" | tail -24
  done
  for n in ${COUNTS#* }; do
    echo "-- $flow: $FIRST GPU(s) against $n"
    compare "/dev/shm/$flow-$FIRST.h5ad" "/dev/shm/$flow-$n.h5ad"
  done
  rm -f /dev/shm/$flow-*.h5ad
done
[ "${SKIP_HDF5_WRITE:-0}" = 1 ] && exit 0
echo "== the write alone: 1 GPU, default flow, large datasets written by HDF5 (SCPIPE_PARALLEL_WRITE=0)"
SCPIPE_PARALLEL_WRITE=0 run hdf5-write-1 1 | grep -E "neighbors|write h5ad|total"
rm -f /dev/shm/hdf5-write-1.h5ad
