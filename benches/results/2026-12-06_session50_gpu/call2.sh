#!/usr/bin/env bash
# Session 50's second device call: regress_out's CSR path (X written dense with its residuals in
# one pass). Carry .gpu-d (gpu_kernels, the real datasets), .whl and .rsc-bench (without
# rapids-singlecell's wheel). gpu_kernels' regress_out and scale tests (the CSR path in one and
# in several waves against the host, bit for bit), memcheck of regress_out, then the Python
# files that call regress_out on the GPU (REQUIRE_GPU=1).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 150 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture regress_out scale_of_a_dense every_kernel every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
SECONDS=0
REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 regress_out > "$OUT/memcheck_regress_out.txt" 2>&1
echo "memcheck regress_out: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_regress_out.txt" | tr '\n' ' ') ${SECONDS}s"
SECONDS=0
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_api.py rmm-python/tests/test_scpipe_functions.py
echo "python: ${SECONDS}s"
