#!/usr/bin/env bash
# Session 48's third device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (scanpy, scikit-learn; extra/ without igraph and leidenalg for room). k-means++'s passes now
# on the GPU too: the kmeans bit-for-bit test and memcheck, the Python clustering file with
# REQUIRE_GPU=1, kmeans_side_by_side.py at 1,000,000 cells (scpipe GPU and host, scikit-learn,
# 16 cores); then session 47's next call: scanpy's logreg at 1,000,000 cells with room to
# finish (the cells made first, about 100 s), and scpipe's on the GPU.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 60 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture kmeans_on every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "^(clustered|pbmc)|FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 60 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 kmeans_on > "$OUT/memcheck_kmeans.txt" 2>&1
echo "memcheck kmeans: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_kmeans.txt" | tr '\n' ' ')"
LIMIT=100 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_clustering.py
cat "$OUT/pytest.log"; echo "tests: ${SECONDS}s"
export PYTHONPATH=/tmp/site
for run in "scpipe-gpu 1000000" "scpipe-cpu 1000000" "sklearn 1000000"; do
  CALLS=3 timeout 60 python3 scripts/device/benchmarks/kmeans_side_by_side.py $run 2>&1 | tail -1 | tee -a "$OUT/kmeans.txt"
done
left=$((560 - SECONDS))
echo "logreg: ${left}s left"
for run in "scanpy 1000000" "scpipe-gpu 1000000"; do
  calls=2; [ "$run" = "scanpy 1000000" ] && calls=1
  limit=$((560 - SECONDS - 40)); [ "$run" != "scanpy 1000000" ] && limit=$((560 - SECONDS))
  S0=$SECONDS
  CALLS=$calls timeout $limit python3 scripts/device/benchmarks/logreg_side_by_side.py $run 2>&1 | tail -3 | tee -a "$OUT/logreg.txt"
  echo "($run: $((SECONDS - S0))s in all, limit ${limit}s)" | tee -a "$OUT/logreg.txt"
done
