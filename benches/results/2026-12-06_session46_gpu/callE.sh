#!/usr/bin/env bash
# Session 46's fifth device call: logreg's fit with its passes over the cells on the GPU
# (logreg_gpu). Carry .gpu-d (gpu_kernels), .whl and .rsc-bench (scanpy; without the
# rapids-singlecell wheel). The gpu_kernels logreg test and its memcheck, then
# rank_genes_groups(method='logreg') at 100,000 cells with scanpy (16 cores), scpipe on the
# host and on the GPU, and at 1,000,000 cells on the GPU.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
REQUIRE_GPU=1 timeout 120 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture logreg > "$OUT/gpu_kernels.log" 2>&1
grep -E "^logreg|FAILED|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 logreg > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
for run in "scanpy 100000" "scpipe-gpu 100000" "scpipe-cpu 100000" "scpipe-gpu 1000000"; do
  timeout 150 python3 scripts/device/benchmarks/logreg_side_by_side.py $run 2>&1 | tail -3 | tee -a "$OUT/logreg.txt"
done
