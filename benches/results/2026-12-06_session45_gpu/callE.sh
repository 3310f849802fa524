#!/usr/bin/env bash
# Session 45's fifth device call: diffmap with eigsh's dot products in blocks of 512 rows (was
# 4,096: the GPU's chains of additions are 8x shorter, 8x as many blocks run at once) and the
# products T x with eight lanes a row. Carry .gpu-d (its gpu_kernels, wheel and data) and
# .rsc-bench without the rapids-singlecell wheel.
#  1. gpu_kernels' diffmap test (the host's bits) and its memcheck;
#  2. diffmap's phases at 1 M cells, and a cProfile of the warm Python call (PROFILE=1).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 200 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
PROFILE=1 SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap > "$OUT/phases.txt" 2>&1
grep -E "^diffmap|scpipe diffmap" "$OUT/phases.txt"
grep -A30 "Ordered by" "$OUT/phases.txt" | head -32
