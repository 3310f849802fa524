#!/usr/bin/env bash
# Prepared for the next session (session 44 had no device time left): diffmap_warp_rows.patch
# applied. Carry .gpu-d (bin/gpu_kernels.xz and whl/ built with the patch, data/ with pbmc68k)
# and .rsc-bench without the rapids-singlecell wheel and extra/. The twin's bits against the
# host, then diffmap's phases at 1 M cells.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 40 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 45 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap > "$OUT/phases.txt" 2>&1
grep -E "^diffmap|scpipe diffmap" "$OUT/phases.txt"
