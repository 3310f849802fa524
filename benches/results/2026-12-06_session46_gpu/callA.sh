#!/usr/bin/env bash
# Session 46's first device call. Carry .gpu-d (gpu_kernels and the test data; its wheel moved
# to .whl), .whl and .rsc-bench without the rapids-singlecell wheel. Every gpu_kernels test
# (diffmap's `diffmap_project_dots` now a warp a block of rows, summed by lanes as eigsh's
# block_sum), memcheck of diffmap and pearson, and the phases of diffmap and the residuals at
# 1 M cells with the extension's split (PROFILE=1).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 240 .gpu-d/bin/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 scripts/device/experiments/project_dots_variants.py 1000000 36 > "$OUT/variants.txt" 2>&1
grep -E "bits|repo|old|\(32, 4, 4\)|columns" "$OUT/variants.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
PROFILE=1 SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap,pearson_residuals > "$OUT/phases.txt" 2>&1
grep -E "^(diffmap|pearson_residuals)|scpipe (diffmap|pearson)|on the GPU in|orthogonalize|apply|lanczos|parts|results" "$OUT/phases.txt" | head -40
