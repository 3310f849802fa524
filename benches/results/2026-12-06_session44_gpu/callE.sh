#!/usr/bin/env bash
# Session 44's last device calls (a fresh machine), in two parts for 64 MiB: `PART=1` carrying
# .gpu-t (bin/gpu_kernels.xz of this commit, no datasets), .whl (this commit's wheel) and
# .rsc-bench without the rapids-singlecell wheel and extra/ (steps 1-3); then, on the warm
# machine, `PART=2` carrying .whl and .rsc-bench with the rapids-singlecell wheel (step 4).
#  1. the residuals' first call in the machine's first process, CuPy now compiling nothing
#     for a CSR X (offsets widened and checked by the extension);
#  2. gpu_kernels' offsets test and its memcheck (no datasets carried: 64 MiB);
#  3. the Python tests of a CuPy X (generated data, no igraph needed);
#  4. aggregate (the groups now counted), the residuals and diffmap at 1 M beside
#     rapids-singlecell 0.18.1; then their phases, diffmap's basis operations timed one by one.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
if [ "${PART:-1}" = 1 ]; then
xz -d -k -f .gpu-t/bin/gpu_kernels.xz && chmod +x .gpu-t/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-t/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "rc $rc in $(( $(date +%s) - s )) s"; }
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
echo "=== first call on the machine (Pearson at 200,000 cells)"
PYTHONPATH=/tmp/site t timeout 120 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 2>&1 | grep -E "residuals|hvg|PASS|FAIL|Error" | tee "$OUT/pearson_first.txt"
echo "=== gpu_kernels"
REQUIRE_GPU=1 t timeout 120 .gpu-t/bin/gpu_kernels --test-threads=1 row_offsets > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 t timeout 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/bin/gpu_kernels --test-threads=1 row_offsets > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
echo "=== python (a CuPy X)"
PYTHONPATH=/tmp/site REQUIRE_GPU=1 timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE \
  rmm-python/tests/test_scpipe_api.py -k "malformed or aggregate_of_a_gpu or score_genes_read or gpu_x" > "$OUT/pytest-api-gpu.log" 2>&1
tail -3 "$OUT/pytest-api-gpu.log"
else
echo "=== 1 M beside rapids-singlecell"
LIMIT=150 timeout 320 bash scripts/device/benchmarks/tools_side_by_side.sh 1000000 aggregate,pearson_residuals,diffmap
echo "=== phases"
SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 120 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 aggregate,pearson_residuals,diffmap > "$OUT/phases.txt" 2>&1
grep -E "^(aggregate|pearson_residuals|diffmap)|scpipe (aggregate|pearson|diffmap)" "$OUT/phases.txt" | tail -40
fi
