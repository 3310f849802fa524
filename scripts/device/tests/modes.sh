#!/usr/bin/env bash
# Every --allocator on one generated file, and an out-of-memory run (a pool capped below what the
# run needs), which must fail with a message naming the step, leaving no output.
# Run in place (bash scripts/device/tests/modes.sh) with .gpu-run carried (scpipe).
cd "$(dirname "$0")/../../.."   # the repository root
export SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
.gpu-run/scpipe generate 50000 20000 -o /tmp/m.h5ad 2>&1 | tail -1
for a in pool async cuda managed binning arena; do
  printf '%-8s ' $a
  .gpu-run/scpipe run /tmp/m.h5ad -o /tmp/m_$a.h5ad --device gpu --allocator $a --no-neighbors --pool-initial 2GiB --pool-max 8GiB --report /tmp/m_$a.json > /tmp/m_$a.log 2>&1 \
    && grep -E "^total|allocations" /tmp/m_$a.log | tr '\n' ' ' && echo || { echo FAILED; tail -3 /tmp/m_$a.log; }
done
python3 - <<'PY'
import h5py, numpy as np
a = h5py.File('/tmp/m_pool.h5ad')['obsm/X_pca'][:]
for m in ['async', 'cuda', 'managed', 'binning', 'arena']:
    b = h5py.File(f'/tmp/m_{m}.h5ad')['obsm/X_pca'][:]
    print(m, 'X_pca identical to pool:', np.array_equal(a, b))
PY
echo "=== out of memory: --pool-max 1GiB"
.gpu-run/scpipe run /tmp/m.h5ad -o /tmp/oom.h5ad --device gpu --pool-initial 512MiB --pool-max 1GiB --no-neighbors; echo "exit $?"
ls /tmp/oom.h5ad* 2>&1 | head -2
