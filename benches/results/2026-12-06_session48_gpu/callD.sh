#!/usr/bin/env bash
# Session 48's fourth device call. Carry .whl and .rsc-bench. Where kmeans' 0.37 s at 1,000,000
# cells goes: the Rust phases (SCPIPE_TRACE_PHASES) and the Python side (cProfile), on the GPU
# and on the host.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for lib in scpipe-gpu scpipe-cpu; do
  SCPIPE_TRACE_PHASES=1 PROFILE=1 CALLS=2 timeout 120 python3 scripts/device/benchmarks/kmeans_side_by_side.py $lib 1000000 > "$OUT/kmeans_profile_$lib.txt" 2>&1
  head -c 6000 "$OUT/kmeans_profile_$lib.txt"
done
