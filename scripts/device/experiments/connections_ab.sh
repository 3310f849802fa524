#!/bin/bash
# One call on nvidia-h100-x1: does the write straight from the GPU stall behind neighbors' kNN
# because its copy stream shares a hardware queue with the kNN's stream? CUDA maps streams onto
# CUDA_DEVICE_MAX_CONNECTIONS queues (8 by default). The 1,000,000-cell default flow with
# SCPIPE_WRITE_FROM_GPU=1 and SCPIPE_TRACE_WRITE=1, at 8 and 32 queues, two rounds; then the
# GPU test binaries that need one GPU. Everything lands in $OUT/all.tgz and $OUT/ab.log.
# Usage: bash scripts/device/experiments/connections_ab.sh   (the bundle in .gpu-mg/bins.tgz)
set -u
HERE=$(dirname "$0")
B=.gpu-mg/b
mkdir -p $B && tar xzf .gpu-mg/bins.tgz -C $B && cp -r .gpu-mg/data $B/
export SCPIPE_DATA=$PWD/$B/data
OUT=${OUT:-/tmp/out}
{
  echo "== where the output goes: mounts and transparent huge pages for shared memory"
  grep -E " /dev/shm | /tmp " /proc/mounts
  cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/shmem_enabled
  SCPIPE_WRITE_FROM_GPU=1 SCPIPE_TRACE_WRITE=1 VALUES="8 32" GPUS=1 SHOW="^fill" \
    timeout 300 bash "$HERE/switch_ab.sh" $B CUDA_DEVICE_MAX_CONNECTIONS
  echo "switch_ab rc $?"
  OUT=$OUT bash "$HERE/../tests/one_gpu_tests.sh" $B
} > /tmp/ab.log 2>&1
cd "$OUT" && tar czf /tmp/all.tgz . && find . -type f -delete && mv /tmp/all.tgz . && cp /tmp/ab.log .
