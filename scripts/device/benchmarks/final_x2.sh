#!/bin/bash
# One call on nvidia-h100-x2 (or x4), run from the repository root
# (bash scripts/device/benchmarks/final_x2.sh): multi_gpu.sh (the NCCL tests, memcheck, the 1,000,000-cell
# runs on 1 and all GPUs, or on $COUNTS) with the bundle in .gpu-mg/bins.tgz, then the other GPU
# test binaries of the pipeline and kernels (../tests/one_gpu_tests.sh). Everything lands in $OUT/all.tgz and $OUT/final.log. .gpu-mg/data holds
# the datasets the tests read: data/harmony and the .h5ad files of ../shared/data.
set -u
HERE=$(dirname "$0")
B=.gpu-mg/b
mkdir -p $B && tar xzf .gpu-mg/bins.tgz -C $B && cp -r .gpu-mg/data $B/
export SCPIPE_DATA=$PWD/$B/data
{
  timeout ${MULTI_TIMEOUT:-330} bash "$HERE/multi_gpu.sh" $B 1000000; echo "multi_gpu rc $?"
  OUT=$OUT bash "$HERE/../tests/one_gpu_tests.sh" $B
} > /tmp/final.log 2>&1
cd "$OUT" && tar czf /tmp/all.tgz . && find . -type f -delete && mv /tmp/all.tgz . && cp /tmp/final.log .
