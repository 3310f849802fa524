#!/usr/bin/env bash
# Session 49's device call (callA.sh and callB.sh merged after an hour without a machine, the
# budget too short for two). Carry .gpu-d, .whl and .rsc-bench (scanpy 1.12; extra/ with igraph).
# In order, each step only while the call's 450 s last: the new GPU twins' tests (ingest,
# combat, paga's counts, dpt's distances), UMAP's bit-for-bit test (umap.cu's gradient now one
# function each) and the module load checks; memcheck of the three new tests;
# combat_ingest_paga_dpt.py with scpipe on the GPU at 1,000,000 cells; at 100,000 cells scpipe on
# the GPU, on the 16 cores and scanpy, compared; then the Python files that call them
# (REQUIRE_GPU=1) with the time left.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
START=$(date +%s); left() { echo $(( 450 - ($(date +%s) - START) )); }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 150 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture ingest combat paga_counts umap every_kernel every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "host .*GPU|FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
for t in ingest combat paga_counts; do
  SECONDS=0
  REQUIRE_GPU=1 timeout $(lim 90) compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu-d/bin/gpu_kernels --test-threads=1 $t > "$OUT/memcheck_$t.txt" 2>&1
  echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_$t.txt" | tr '\n' ' ') ${SECONDS}s"
done
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site
B=scripts/device/benchmarks/combat_ingest_paga_dpt.py
run() {  # lib n func calls limit
  local l; l=$(lim $5); [ "$l" -le 5 ] && { echo "($1 $3 $2: no time left)"; return; }
  SECONDS=0
  CALLS=$4 timeout $l python3 $B $1 $2 $3 2>&1 | grep -v Warn | tail -2 | tee -a "$OUT/bench.txt"
  echo "($1 $3 $2: ${SECONDS}s in all)" | tee -a "$OUT/bench.txt"
}
for f in ingest combat paga dpt; do run scpipe-gpu 1000000 $f 2 80; done
export SAVE=/tmp/saved
for f in paga dpt combat ingest; do
  run scpipe-gpu 100000 $f 2 40
  run scanpy 100000 $f 1 120
  run scpipe-cpu 100000 $f 2 40
done
python3 $B compare $SAVE 100000 2>&1 | tee "$OUT/compare.txt"
SECONDS=0
l=$(lim 80); [ "$l" -gt 20 ] && LIMIT=$l bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_ingest.py rmm-python/tests/test_scpipe_functions.py
cat "$OUT/pytest.log" 2>/dev/null; echo "python: ${SECONDS}s"
