#!/usr/bin/env bash
# Session 45's third device call (a fresh or warm H100): diffmap's fused projections (three
# passes and one wait a Lanczos step, diffmap_project_dots) and the restart's combine a thread a
# row and eight outputs; the Pearson residuals in f32 after mu (residual_f32) and the cells'
# zero check on the device (first_zero). Carry .gpu-d (bin/gpu_kernels.xz, whl/, data/ with
# pbmc68k, celltypist and scvi) and .rsc-bench without the rapids-singlecell wheel.
#  1. gpu_kernels' diffmap and Pearson tests (the host's bits), memcheck of both;
#  2. pearson_gpu_vs_host.py 200000 (the same bits through the Python API);
#  3. the residuals' and diffmap's phases at 1 M cells (SCPIPE_TRACE_PHASES).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 200 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
PYTHONPATH=/tmp/site timeout 120 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 > "$OUT/pearson_vs_host.txt" 2>&1
grep -E "residuals|hvg|PASS|FAIL|Error" "$OUT/pearson_vs_host.txt"
SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 pearson_residuals,diffmap > "$OUT/phases.txt" 2>&1
grep -E "^(diffmap|pearson_residuals)|scpipe (diffmap|pearson)" "$OUT/phases.txt"
