#!/usr/bin/env bash
# Session 49's second device call. Carry .whl and .rsc-bench (scanpy 1.12; extra/ with igraph
# for scanpy's paga). combat_ingest_paga_dpt.py: at 200,000 cells scpipe on the GPU, scpipe on
# the 16 cores and scanpy, each result saved and compared with scanpy's; then scpipe on the GPU
# (and scanpy's paga and dpt) at 1,000,000 cells.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site
B=scripts/device/benchmarks/combat_ingest_paga_dpt.py
S=/tmp/saved
run() {  # lib n func calls limit
  SECONDS=0
  SAVE=${SAVE:-} CALLS=$4 timeout $5 python3 $B $1 $2 $3 2>&1 | grep -v Warn | tail -3 | tee -a "$OUT/bench.txt"
  echo "($1 $3 $2: ${SECONDS}s in all)" | tee -a "$OUT/bench.txt"
}
for f in paga dpt combat ingest; do
  SAVE=$S run scpipe-gpu 200000 $f 2 120
  SAVE=$S run scpipe-cpu 200000 $f 2 150
  SAVE=$S run scanpy 200000 $f 1 240
done
python3 $B compare $S 200000 2>&1 | tee "$OUT/compare.txt"
for f in paga dpt combat ingest; do run scpipe-gpu 1000000 $f 2 150; done
for f in paga dpt; do run scanpy 1000000 $f 1 120; done
