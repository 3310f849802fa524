#!/usr/bin/env bash
# Prepared for the next session: scanpy's logreg at 1,000,000 cells with room to finish (call B
# of this session cut it at 240 s, about 100 s of which made the data). The cells are made once
# (/tmp/logreg_cells_N.npz) and read back by each process. Carry .whl and .rsc-bench (scanpy;
# no rsc wheel). About 400 s.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for run in "scanpy 1000000" "scpipe-gpu 1000000"; do
  calls=2; [ "$run" = "scanpy 1000000" ] && calls=1
  SECONDS=0
  CALLS=$calls timeout 420 python3 scripts/device/benchmarks/logreg_side_by_side.py $run 2>&1 | tail -3 | tee -a "$OUT/logreg.txt"
  echo "($run: ${SECONDS}s in all)" | tee -a "$OUT/logreg.txt"
done
