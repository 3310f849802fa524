#!/usr/bin/env bash
# Session 48's second device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (scanpy, scikit-learn's KMeans). kmeans' new GPU twin: every gpu_kernels test (the host's
# k-means assignment changed: harmony's GPU test against the host runs again too), memcheck of
# kmeans, the Python clustering file with REQUIRE_GPU=1, then kmeans_side_by_side.py at
# 1,000,000 cells: scpipe on the GPU and on the 16 cores, scikit-learn on the 16 cores.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 300 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture > "$OUT/gpu_kernels.log" 2>&1
grep -E "^(pbmc|clustered|a pair)|FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
SECONDS=0
REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 kmeans_on > "$OUT/memcheck_kmeans.txt" 2>&1
echo "memcheck kmeans: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_kmeans.txt" | tr '\n' ' ') ${SECONDS}s"
SECONDS=0
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_clustering.py
cat "$OUT/pytest.log"; echo "python: ${SECONDS}s"
export PYTHONPATH=/tmp/site
for run in "scpipe-gpu 1000000" "scpipe-cpu 1000000" "sklearn 1000000"; do
  SECONDS=0
  CALLS=2 timeout 150 python3 scripts/device/benchmarks/kmeans_side_by_side.py $run 2>&1 | tail -2 | tee -a "$OUT/kmeans.txt"
  echo "($run: ${SECONDS}s in all)" | tee -a "$OUT/kmeans.txt"
done
