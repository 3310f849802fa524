#!/usr/bin/env bash
# Session 48's fifth device call. Carry .whl and .rsc-bench. kmeans at 1,000,000 cells after
# the step reads obsm in place and checks it on every core (0b00c38): scpipe GPU and host with
# their phases (SCPIPE_TRACE_PHASES) and scpipe's split of each call (PROGRESS), and
# scikit-learn beside them.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for lib in scpipe-gpu scpipe-cpu sklearn; do
  SCPIPE_TRACE_PHASES=1 PROGRESS=1 CALLS=3 timeout 90 python3 scripts/device/benchmarks/kmeans_side_by_side.py $lib 1000000 2>&1 | tee "$OUT/kmeans_$lib.txt" | tail -12
done
