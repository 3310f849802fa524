#!/usr/bin/env bash
# Session 47's second device call: rank_genes_groups(method='logreg') under scikit-learn's
# stopping rule (tol 1e-4, max_iter 100, both sides), one process per library: scanpy on the
# machine's 16 cores, scpipe on the host and with its passes on the GPU, at 100,000 cells; then
# scanpy and scpipe on the GPU at 1,000,000. First gpu_kernels' logreg test (its threshold for
# the unconverged fits set from call A) and its memcheck. Carry .gpu-d, .whl and .rsc-bench
# (scanpy; no rsc wheel).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
REQUIRE_GPU=1 timeout 60 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture logreg > "$OUT/logreg_test.txt" 2>&1
grep -E "^logreg|test result|panicked" "$OUT/logreg_test.txt"
REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 logreg > "$OUT/memcheck_logreg.txt" 2>&1
echo "memcheck logreg: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_logreg.txt" | tr '\n' ' ')"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for run in "scanpy 100000" "scpipe-gpu 100000" "scpipe-cpu 100000" "scanpy 1000000" "scpipe-gpu 1000000"; do
  calls=2; [ "$run" = "scanpy 1000000" ] && calls=1
  SECONDS=0
  CALLS=$calls timeout 240 python3 scripts/device/benchmarks/logreg_side_by_side.py $run 2>&1 | tail -3 | tee -a "$OUT/logreg.txt"
  echo "($run: ${SECONDS}s in all)" | tee -a "$OUT/logreg.txt"
done
