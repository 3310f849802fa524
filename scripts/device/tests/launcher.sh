#!/bin/bash
# On a device machine with several GPUs: the pipeline started by a launcher's variables
# (torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), one process per GPU,
# compared with the same cells split across the GPUs by one process (--gpus N).
# Usage: bash scripts/device/tests/launcher.sh BUNDLE_DIR [CELLS]
set -u
B=${1:?bundle directory with scpipe}
CELLS=${2:-200000}
source "$(dirname "$0")/../nccl_env.sh"
echo "== one process, --gpus $N"
"$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 --gpus "$N" -o /dev/shm/threads.h5ad 2>&1 | tail -4
echo "== $N processes started with RANK/WORLD_SIZE/LOCAL_RANK"
export MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
for r in $(seq 0 $((N - 1))); do
  RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r "$B/scpipe" run --demo --demo-cells "$CELLS" --demo-genes 20000 \
    -o /dev/shm/launched.h5ad > /tmp/launch-$r.log 2>&1 &
done
wait
for r in $(seq 0 $((N - 1))); do echo "-- rank $r"; tail -24 /tmp/launch-$r.log; done
ls /dev/shm/ | grep -c partial | sed 's/^/partial files left: /'
python3 - <<'PY'
import h5py, numpy as np
a, b = h5py.File('/dev/shm/threads.h5ad', 'r'), h5py.File('/dev/shm/launched.h5ad', 'r')
print('same cells:', bool((a['obs/_index'][:] == b['obs/_index'][:]).all()))
print('same genes:', bool((a['var/_index'][:] == b['var/_index'][:]).all()))
print('max |X diff|:', float(np.abs(a['X'][:] - b['X'][:]).max()))
print('max |X_pca diff|:', float(np.abs(a['obsm/X_pca'][:] - b['obsm/X_pca'][:]).max()))
print('same kNN graph:', bool((a['obsp/distances/indices'][:] == b['obsp/distances/indices'][:]).all()))
PY
rm -f /dev/shm/threads.h5ad /dev/shm/launched.h5ad
