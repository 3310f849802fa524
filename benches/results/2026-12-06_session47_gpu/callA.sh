#!/usr/bin/env bash
# Session 47's first device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (scanpy; extra/ in, the rapids-singlecell wheel out). Every gpu_kernels test (the warp-add
# limit at 4,096 columns, first run at that setting; logreg's GPU test under scikit-learn's
# stopping rule), memcheck of the tests whose GPU code is new since the last memcheck
# (row_offsets, diffmap, logreg), and the scpipe Python files that touch logreg, the API's
# checks and diffmap, with REQUIRE_GPU=1.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 240 .gpu-d/bin/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
REQUIRE_GPU=1 timeout 60 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture logreg 2>&1 | grep -E "^logreg|test result|panicked" | tee "$OUT/logreg_test.txt"
SECONDS=0
for t in row_offsets diffmap logreg; do
  REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu-d/bin/gpu_kernels --test-threads=1 $t > "$OUT/memcheck_$t.txt" 2>&1
  echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_$t.txt" | tr '\n' ' ')"
done
echo "memcheck: ${SECONDS}s"
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_logreg.py rmm-python/tests/test_scpipe_api.py rmm-python/tests/test_scpipe_diffmap.py
