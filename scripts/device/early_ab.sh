#!/bin/bash
# The 1,000,000-cell default flow on 1 GPU and on every GPU with two builds of scpipe in one call
# (BUNDLE/scpipe and BUNDLE/scpipe-prev, alternating), then the new build's 1- and N-GPU outputs
# compared. Usage: bash scripts/device/early_ab.sh BUNDLE_DIR [CELLS]   ($OUT gets the reports)
set -u
B=${1:?bundle directory with scpipe and scpipe-prev}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/nccl_env.sh"
run() {  # run BINARY NAME GPUS [keep]
  "$B/$1" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$3" \
    -o /dev/shm/$2.h5ad --report "$OUT/$2.json" 2>&1 | grep -E "set up|move|stack|neighbors|write h5ad|total"
  [ "${4:-}" = keep ] || rm -f /dev/shm/$2.h5ad
}
echo "== warm-up (2 runs, outputs removed)"
run scpipe warm-a "$N"; run scpipe-prev warm-b 1
for n in 1 "$N"; do
  for build in scpipe-prev scpipe; do
    echo "== $build on $n GPU(s)"
    keep=""; [ "$build" = scpipe ] && keep=keep
    run "$build" "$build-g$n" "$n" $keep
  done
done
python3 - /dev/shm/scpipe-g1.h5ad /dev/shm/scpipe-g$N.h5ad <<'PY'
import h5py, numpy as np, sys, os
a, b = (h5py.File(f, 'r') for f in sys.argv[1:3])
print('same cells:', bool((a['obs/_index'][:] == b['obs/_index'][:]).all()))
print('max |X diff|:', float(np.abs(a['X'][:] - b['X'][:]).max()))
print('raw nnz equal:', a['raw/X/data'].shape == b['raw/X/data'].shape, 'max |raw diff|:', float(np.abs(a['raw/X/data'][:] - b['raw/X/data'][:]).max()))
print('X_pca first 10 |corr| min:', min(abs(np.corrcoef(a['obsm/X_pca'][:, c], b['obsm/X_pca'][:, c])[0, 1]) for c in range(10)))
for f in sys.argv[1:3]:
    st = os.stat(f)
    print(f, 'size', st.st_size, 'allocated', st.st_blocks * 512)
PY
rm -f /dev/shm/scpipe-g*.h5ad
