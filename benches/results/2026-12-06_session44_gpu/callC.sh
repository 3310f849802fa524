#!/usr/bin/env bash
# Session 44's third device call (a fresh machine). Carry .gpu-t (bin/gpu_kernels.xz of this
# commit, data/), .whl (this commit's wheel) and .rsc-bench with extra/ but without the
# rapids-singlecell wheel.
#  1. the Pearson residuals' first call in the machine's first process (now through the
#     whole-counts path), the same bits as the host at 200,000 cells;
#  2. gpu_kernels: the new aggregate and bbknn twins, the Pearson, score_genes, whole-number
#     and diffmap tests; memcheck of aggregate, bbknn and pearson;
#  3. the Python files that cover them (api: a CuPy X aggregated and scored on the GPU).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-t/bin/gpu_kernels.xz && chmod +x .gpu-t/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-t/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "rc $rc in $(( $(date +%s) - s )) s"; }
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
echo "=== first call on the machine (Pearson at 200,000 cells)"
PYTHONPATH=/tmp/site t timeout 120 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 2>&1 | grep -E "residuals|hvg|PASS|FAIL|Error" | tee "$OUT/pearson_first.txt"
echo "=== gpu_kernels"
REQUIRE_GPU=1 t timeout 240 .gpu-t/bin/gpu_kernels --test-threads=1 aggregate bbknn pearson score_genes whole_numbers diffmap > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log" | head -30
echo "=== memcheck"
REQUIRE_GPU=1 t timeout 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/bin/gpu_kernels --test-threads=1 aggregate bbknn pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
echo "=== python"
LIMIT=150 timeout 400 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_api.py rmm-python/tests/test_scpipe_aggregate.py rmm-python/tests/test_scpipe_bbknn.py 2>&1 | grep -v WARNING
