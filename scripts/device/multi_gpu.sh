#!/bin/bash
# On a device machine with several GPUs (nvidia-h200-x2 or larger): the NCCL tests, then the
# 1,000,000-cell pipeline on 1 GPU and split across every GPU (strong scaling), with the step
# tables and the reports in $OUT. Usage: bash scripts/device/multi_gpu.sh BUNDLE_DIR [CELLS]
set -u
B=${1:?bundle directory with scpipe and gpu_split_run}
CELLS=${2:-1000000}
OUT=${OUT:-/tmp/out}
# Never NVLink multicast (the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0
# The nvidia-nccl-cu13 wheel ships libnccl.so.2; cudarc looks for libnccl.so.
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; import os; print(os.path.join(list(n.__path__)[0], 'lib'))")
mkdir -p /tmp/nccl-lib && ln -sf "$NCCL_DIR/libnccl.so.2" /tmp/nccl-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl-lib:$NCCL_DIR:${LD_LIBRARY_PATH:-}
nvidia-smi -L
N=$(nvidia-smi -L | wc -l)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
echo "== NCCL tests ($N GPUs)"
REQUIRE_GPU=1 "$B/gpu_split_run" --test-threads=1 --nocapture 2>&1 | grep -E "^test |matches|result|panicked|Error|error"
echo "== compute-sanitizer (memcheck) on the kNN of row ranges"
REQUIRE_GPU=1 compute-sanitizer --tool memcheck "$B/gpu_split_run" knn_of_row_ranges 2>&1 | grep -E "ERROR SUMMARY|test result|panicked"
fi
for n in 1 $N; do
  echo "== $CELLS cells x 20000 genes on $n GPU(s)"
  "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$n" \
    -o /dev/shm/split-$n.h5ad --report "$OUT/split-$n.json" 2>&1 | tail -22
done
python3 - <<'PY'
import h5py, numpy as np, sys, glob
files = sorted(glob.glob('/dev/shm/split-*.h5ad'))
if len(files) == 2:
    a, b = (h5py.File(f, 'r') for f in files)
    pa, pb = a['obsm/X_pca'][:], b['obsm/X_pca'][:]
    corr = [abs(np.corrcoef(pa[:, c], pb[:, c])[0, 1]) for c in range(10)]
    xa, xb = a['X'][:], b['X'][:]
    print('same cells:', a['obs/_index'].shape == b['obs/_index'].shape and bool((a['obs/_index'][:] == b['obs/_index'][:]).all()))
    print('same genes:', bool((a['var/_index'][:] == b['var/_index'][:]).all()))
    print('max |X diff|:', float(np.abs(xa - xb).max()))
    print('X_pca first 10 components |corr| min:', min(corr))
    for f in (a, b):
        print(f.filename, 'raw.X nnz', f['raw/X/data'].shape[0], 'sum', float(f['raw/X/data'][:].sum(dtype=np.float64)),
              'indices ok', int(f['raw/X/indices'][:].max()) < f['raw/var/_index'].shape[0])
PY
rm -f /dev/shm/split-*.h5ad
