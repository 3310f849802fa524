#!/bin/bash
# Two fixed costs of a split run that did not shrink with more GPUs (issue 12), in one call:
# 1. moving X to 4 GPUs took as long as to 1 (register_bench.c: pinned staging against the
#    host array page-locked in place);
# 2. the first collectives (QC's gene sums) took longer on 4 GPUs than QC on 1: NCCL connects
#    its ranks lazily at the first collective unless NCCL_RUNTIME_CONNECT=0 (then at the join,
#    which runs beside the input's read).
# Usage: bash scripts/device/experiments/upload_and_connect.sh BUNDLE_DIR   ($OUT gets the logs and reports)
set -u
B=${1:?bundle directory with scpipe}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
HERE=$(dirname "$0")
echo "== register_bench"
cc -O2 -pthread -I/usr/local/cuda/include -o /tmp/register_bench "$HERE/register_bench.c" \
  -L/usr/local/cuda/lib64/stubs -lcuda || exit 1
/tmp/register_bench "${GIB:-16}" 4 1 "${COPIERS:-4}" 2>&1 | tee "$OUT/register_bench.txt"
/tmp/register_bench 8 4 0 "${COPIERS:-4}" 2>&1 | tee -a "$OUT/register_bench.txt"
echo "== NCCL_RUNTIME_CONNECT A/B"
GPUS=${GPUS:-4} VALUES="1 0" ROUNDS=${ROUNDS:-2} \
  SHOW="setup|join|calculate_qc|filter_cells|pca" \
  bash "$HERE/switch_ab.sh" "$B" NCCL_RUNTIME_CONNECT 2>&1 | tee "$OUT/runtime_connect_ab.txt"
