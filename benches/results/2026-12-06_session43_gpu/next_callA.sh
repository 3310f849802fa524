#!/usr/bin/env bash
# Prepared for the next session's first device call (a fresh machine): what session 43 left
# unrun. Carry .gpu-t (bin/gpu_kernels.xz built at this commit, data/ with the three h5ad), .whl
# (this commit's wheel) and .rsc-bench with extra/ but without the rapids-singlecell wheel.
#  1. the residuals' first call in the machine's first process (was 6.3-11.2 s: CuPy's
#     compile of the old raw-count check), before anything else compiles or caches;
#  2. gpu_kernels' whole-number test (new), then memcheck of it and the diffmap/Pearson twins;
#  3. the two scpipe Python files that did not finish on the GPU (logreg, ingest: issue 52).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-t/bin/gpu_kernels.xz && chmod +x .gpu-t/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-t/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "rc $rc in $(( $(date +%s) - s )) s"; }
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
echo "=== first call on the machine (Pearson at 200,000 cells)"
PYTHONPATH=/tmp/site t timeout 90 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 2>&1 | grep -v Warn | tail -8
echo "=== gpu_kernels whole numbers, score_genes"; REQUIRE_GPU=1 t timeout 90 .gpu-t/bin/gpu_kernels --test-threads=1 whole_numbers score_genes > "$OUT/gpu_kernels_whole.log" 2>&1
grep -E "panicked|test result" "$OUT/gpu_kernels_whole.log"
echo "=== memcheck"; REQUIRE_GPU=1 t timeout 180 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/bin/gpu_kernels --test-threads=1 whole_numbers score_genes diffmap pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY" "$OUT/memcheck.txt"
echo "=== python (issue 52's last two files)"
LIMIT=200 timeout 300 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_logreg.py rmm-python/tests/test_scpipe_ingest.py 2>&1 | grep -v WARNING
