#!/bin/bash
# An h5ad input larger than the host memory allowed, read from its file block by block for
# every pass (issue 30 item 3), in one call:
# 1. tests: gpu_generated (the generated demo and the run from the file against in-memory runs);
# 2. for each of SIZES cells: `scpipe generate` writes the file to $DIR, then the in-memory GPU
#    run and the run from the file (--host-memory-limit $LIMIT), both --target-sum 10000, each
#    a fresh process; their step tables (the per-pass read rates) and peak RSS;
# 3. compare_runs: X_pca per component and Leiden of the two outputs.
# DISK_RATE=1: the file's pages are dropped from the page cache (dd iflag=nocache, the file
# alone) before dd measures the disk's sequential rate (O_DIRECT) and before each run, so the
# first pass of each run reads from the disk (DIR must be on a disk; the later passes find the
# file in the page cache unless it is larger than the host memory). MODES picks the runs.
# Usage: bash scripts/device/tests/from_file.sh BIN_DIR   (scpipe, test-gpu_generated)
set -u
B=${1:?directory with the binaries}
OUT=${OUT:-/tmp/out}
R=$OUT/from_file; mkdir -p "$R"
export SCPIPE_DATA=${SCPIPE_DATA:-$PWD/data} SCPIPE_KERNEL_CACHE=/tmp/kc-from-file
DIR=${DIR:-/dev/shm}
LIMIT=${LIMIT:-1GiB}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$R/gpu.txt"
if [ -z "${NO_TESTS:-}" ]; then
  echo "== tests"
  REQUIRE_GPU=1 "$B/test-gpu_generated" 2>&1 | grep -E "^test |test result|panicked|assert" | tail -8
fi
for cells in ${SIZES:-200000}; do
  F=$DIR/ff_$cells.h5ad
  /usr/bin/time -f "generate: %e s" "$B/scpipe" generate "$cells" 20000 -o "$F" 2>&1 | tail -1
  ls -la "$F"
  drop() { dd if="$F" iflag=nocache count=0 status=none; }
  if [ -n "${DISK_RATE:-}" ]; then
    drop; echo "disk, sequential (dd, O_DIRECT, 64 MiB blocks):"
    dd if="$F" of=/dev/null bs=64M iflag=direct 2>&1 | tail -1
  fi
  for mode in ${MODES:-memory file}; do
    [ -n "${DISK_RATE:-}" ] && drop
    opts=; [ $mode = file ] && opts="--host-memory-limit $LIMIT"
    /usr/bin/time -v "$B/scpipe" run "$F" -o "/dev/shm/ff_${cells}_$mode.h5ad" --device gpu --target-sum 10000 $opts \
      --report "$R/${cells}_$mode.json" > "$R/${cells}_$mode.log" 2>&1 || echo "FAILED $mode"
    echo "-- $cells cells, $mode"
    grep -E "^[a-z_ :]+ +[0-9]+\.[0-9]+ |notice|rror|FAILED|Maximum resident|Elapsed" "$R/${cells}_$mode.log" | cut -c1-230
  done
  [ "${MODES:-memory file}" = "memory file" ] && python3 - "/dev/shm/ff_${cells}_memory.h5ad" "/dev/shm/ff_${cells}_file.h5ad" <<'PY' 2>&1 | tee "$R/${cells}_compare.txt"
import sys, h5py, numpy as np
from sklearn.metrics import adjusted_rand_score
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
pa, pb = a["obsm/X_pca"][:], b["obsm/X_pca"][:]
cors = [abs(np.corrcoef(pa[:, j], pb[:, j])[0, 1]) for j in range(pa.shape[1])]
print(f"cells {pa.shape[0]} vs {pb.shape[0]}; X_pca |corr| per component: min {min(cors):.6f}")
print(f"obs index equal: {np.array_equal(a['obs/_index'][:], b['obs/_index'][:])}")
for col in ["total_counts", "n_genes_by_counts"]:
    print(f"obs {col} equal: {np.array_equal(a['obs/' + col][:], b['obs/' + col][:])}")
la, lb = a["obs/leiden/codes"][:], b["obs/leiden/codes"][:]
print(f"leiden: {len(np.unique(la))} vs {len(np.unique(lb))} clusters, ARI {adjusted_rand_score(la, lb):.4f}")
print(f"X in the file run's output: {'X' in b}")
PY
  rm -f "/dev/shm/ff_${cells}_memory.h5ad" "/dev/shm/ff_${cells}_file.h5ad" "$F"
done
