#!/usr/bin/env bash
# Session 45's sixth device call: dense_reduce's add_chunks loads 32 chunks' sums before adding
# them (one wait on memory per 32 in the chain; the order, so the bits, unchanged): every
# gpu_kernels test, as every twin that sums in chunks goes through it; diffmap's memcheck; then
# diffmap's phases at 1 M cells (eigsh's blocks of 512 rows, T x with eight lanes a row, the
# host's post-processing on column slices), with a cProfile of the warm Python call and the
# extension's own split (PROFILE=1). Carry .gpu-d and .rsc-bench without the rsc wheel.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 300 .gpu-d/bin/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
PROFILE=1 SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap,pearson_residuals > "$OUT/phases.txt" 2>&1
grep -E "^(diffmap|pearson_residuals)|scpipe (diffmap|pearson)|on the GPU in" "$OUT/phases.txt"
