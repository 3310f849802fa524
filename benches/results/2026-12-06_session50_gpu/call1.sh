#!/usr/bin/env bash
# Session 50's device call for issue 53's leftovers. Carry .gpu-d (gpu_kernels at HEAD, the three
# test datasets), .whl and .rsc-bench (scanpy 1.12; extra/ with igraph). Each step only while the
# call's 560 s last, the most wanted first:
#  1. the GPU twins' tests at HEAD (combat's borrowed X and vectorized host, bbknn's and ingest's
#     shared search), with memcheck of bbknn and ingest;
#  2. test_scpipe_ingest.py alone (it crashed once with rc 139), verbose, faulthandler on;
#  3. combat at 1 M x 1,000 on the GPU with SCPIPE_TRACE_PHASES=1 (where its 3.7 s go);
#  4. scanpy's ingest at 100,000 (pynndescent 0.7 patched) beside scpipe's, compared;
#  5. scanpy's paga, dpt and combat at 1,000,000 cells (16 cores), and scpipe's host combat there.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
START=$(date +%s); left() { echo $(( 560 - ($(date +%s) - START) )); }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 120 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture ingest combat paga_counts bbknn knn neighbors_match every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
for t in bbknn ingest; do
  SECONDS=0
  REQUIRE_GPU=1 timeout $(lim 60) compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu-d/bin/gpu_kernels --test-threads=1 $t > "$OUT/memcheck_$t.txt" 2>&1
  echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_$t.txt" | tr '\n' ' ') ${SECONDS}s"
done
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=/tmp/site REQUIRE_GPU=1
SECONDS=0
timeout $(lim 120) python3 -X faulthandler -m pytest -v -p no:cacheprovider --tb=short -rfE -o faulthandler_timeout=60 \
  rmm-python/tests/test_scpipe_ingest.py > "$OUT/pytest-ingest.log" 2>&1
echo "test_scpipe_ingest: rc $? ${SECONDS}s"; grep -E "PASSED|FAILED|ERROR|Fatal|Segmentation|passed|failed" "$OUT/pytest-ingest.log" | head -20
B=scripts/device/benchmarks/combat_ingest_paga_dpt.py
run() {  # lib n func calls limit
  local l; l=$(lim $5); [ "$l" -le 5 ] && { echo "($1 $3 $2: no time left)"; return; }
  SECONDS=0
  CALLS=$4 timeout $l python3 $B $1 $2 $3 > /tmp/run.log 2>&1; local rc=$?
  grep -v Warn /tmp/run.log | tail -${TAIL:-2} | tee -a "$OUT/bench.txt"
  echo "($1 $3 $2: rc $rc, ${SECONDS}s in all, limit $l)" | tee -a "$OUT/bench.txt"
}
SCPIPE_TRACE_PHASES=1 TAIL=40 run scpipe-gpu 1000000 combat 2 60
export SAVE=/tmp/saved
run scpipe-gpu 100000 ingest 1 30
run scanpy 100000 ingest 1 150
python3 $B compare $SAVE 100000 2>&1 | tee "$OUT/compare.txt"
unset SAVE
run scanpy 1000000 paga 1 60
run scanpy 1000000 dpt 1 40
run scpipe-cpu 1000000 combat 1 80
run scanpy 1000000 combat 1 240
echo "call: $(( $(date +%s) - START ))s"
