#!/usr/bin/env bash
# Session 47's second device call: rank_genes_groups(method='logreg') under scikit-learn's
# stopping rule (tol 1e-4, max_iter 100, both sides), one process per library: scanpy on the
# machine's 16 cores, scpipe on the host and with its passes on the GPU, at 100,000 cells; then
# scpipe on the GPU and scanpy at 1,000,000. Carry .whl and .rsc-bench (scanpy; no rsc wheel).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for run in "scanpy 100000" "scpipe-gpu 100000" "scpipe-cpu 100000" "scanpy 1000000" "scpipe-gpu 1000000"; do
  SECONDS=0
  timeout 240 python3 scripts/device/benchmarks/logreg_side_by_side.py $run 2>&1 | tail -3 | tee -a "$OUT/logreg.txt"
  echo "($run: ${SECONDS}s in all)" | tee -a "$OUT/logreg.txt"
done
