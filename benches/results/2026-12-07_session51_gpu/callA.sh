#!/usr/bin/env bash
# Session 51's device call A: regress_out's CSR path (sums read in place), gpu_kernels'
# regress_out, scale and every-kernel/module tests, then memcheck of regress_out. Carry .gpu-d.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 150 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture regress_out scale_of_a_dense every_kernel every_module > "$OUT/gpu_kernels.log" 2>&1
echo "gpu_kernels rc $?"
grep -E "FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
SECONDS=0
REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 regress_out > "$OUT/memcheck_regress_out.txt" 2>&1
echo "memcheck regress_out: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_regress_out.txt" | tr '\n' ' ') ${SECONDS}s"
rm -f .gpu-d/bin/gpu_kernels
# With .whl and .rsc-bench (no rapids-singlecell wheel) carried too: the Python tests that call
# regress_out on the GPU, on the three datasets.
if [ -d .rsc-bench/whl ] && [ -d .whl ]; then
  SECONDS=0
  source scripts/device/rsc_env.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl || exit 1
  REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short -rfEs -k "regress_out or regress" \
    rmm-python/tests/test_scpipe_api.py rmm-python/tests/test_scpipe_functions.py > "$OUT/pytest-regress.log" 2>&1
  echo "python: rc $? ${SECONDS}s: $(tail -1 "$OUT/pytest-regress.log")"
fi
