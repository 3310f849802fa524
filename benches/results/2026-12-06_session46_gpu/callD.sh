#!/usr/bin/env bash
# Session 46's fourth device call: a lent CSR's structure checked on the device (csr_structure,
# csr_duplicates: offsets, a column index past the columns, a column twice in a row) and a host
# CSR's repeated columns added as scipy adds them. Carry .gpu-d (gpu_kernels and the test data),
# .whl and .rsc-bench (with extra/, without the rapids-singlecell wheel).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 200 .gpu-d/bin/gpu_kernels --test-threads=1 row_offsets pearson aggregate score_genes diffmap > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |FAILED|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 row_offsets > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_api.py
grep -E "twice|FAILED|Error" "$OUT/pytest-test_scpipe_api.log" | head -20
SCPIPE_TRACE_PHASES=1 PROFILE=1 PYTHONPATH=/tmp/site timeout 120 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 pearson_residuals,diffmap > "$OUT/phases.txt" 2>&1
grep -E "scpipe (diffmap|pearson)|on the GPU in|orthogonalize" "$OUT/phases.txt" | head -20
