#!/bin/bash
# One call on nvidia-h100-x1: what stops the copy lane's downloads while neighbors' kNN runs
# (benches/benches/copy_overlap.rs has the cases), then the 1,000,000-cell default flow written
# straight from the GPU with SCPIPE_TRACE_WRITE and SCPIPE_TRACE_TRANSFERS (where each
# download's time went). Output in $OUT/overlap.log.
# Usage: bash scripts/device/experiments/copy_overlap.sh   (the bundle in .gpu-mg/bins.tgz, with copy_overlap)
set -u
B=.gpu-mg/b
mkdir -p $B && tar xzf .gpu-mg/bins.tgz -C $B
OUT=${OUT:-/tmp/out}
{
  for case in ${CASES:-spin spin-load spin-pageable-d2h spin-pageable-h2d spin-pinned-d2h neighbors-warm neighbors neighbors-modules neighbors-kernels}; do
    echo "== $case"
    timeout 60 $B/copy_overlap $case 4
    echo "rc $?"
  done
  echo "== neighbors-modules, CUDA_MODULE_LOADING=EAGER"
  CUDA_MODULE_LOADING=EAGER timeout 60 $B/copy_overlap neighbors-modules 4
  for w in 1 1 0; do
    echo "== 1,000,000 cells, SCPIPE_WRITE_FROM_GPU=$w"
    SCPIPE_WRITE_FROM_GPU=$w SCPIPE_TRACE_WRITE=1 SCPIPE_TRACE_TRANSFERS=1 $B/scpipe run --demo \
      --demo-cells 1000000 --demo-genes 20000 --gpus 1 -o /dev/shm/t.h5ad 2>&1 \
      | grep -E "^download [0-9]{9,}|^fill|pca|neighbors|write h5ad|total"
    rm -f /dev/shm/t.h5ad
  done
} > "$OUT/overlap.log" 2>&1
cat "$OUT/overlap.log"
