#!/usr/bin/env bash
# Session 49's first device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (scanpy; extra/ with igraph for scanpy's paga). The new GPU twins (ingest, combat, paga's
# counts, dpt's distances): their tests and memcheck, the modules' load checks and UMAP's
# bit-for-bit tests (umap.cu's gradient now one function each), then the Python files that
# call them (diffmap/dpt, functions/combat and paga, ingest) with REQUIRE_GPU=1.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 200 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture ingest combat paga_counts umap every_kernel every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "host .*GPU|FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
SECONDS=0
for t in ingest combat paga_counts; do
  REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu-d/bin/gpu_kernels --test-threads=1 $t > "$OUT/memcheck_$t.txt" 2>&1
  echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_$t.txt" | tr '\n' ' ')"
done
echo "memcheck: ${SECONDS}s"
SECONDS=0
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_diffmap.py rmm-python/tests/test_scpipe_functions.py rmm-python/tests/test_scpipe_ingest.py
cat "$OUT/pytest.log"; echo "python: ${SECONDS}s"
