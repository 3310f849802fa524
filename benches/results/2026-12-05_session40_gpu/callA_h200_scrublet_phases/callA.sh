#!/usr/bin/env bash
# Session 40, call A: gpu_kernels (all), memcheck of scrublet/umap/neighbors, scrublet at 1M.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
(cd .gpu-t && tar xJf bins.tar.xz)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "=== gpu_kernels"; REQUIRE_GPU=1 timeout 150 .gpu-t/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1; echo "rc $?"
grep -E "^test |test result" "$OUT/gpu_kernels.log" | grep -v " ok$" | tail -8
echo "=== memcheck"; REQUIRE_GPU=1 timeout 170 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/gpu_kernels --test-threads=1 scrublet umap_equals neighbors_match > "$OUT/memcheck.txt" 2>&1; echo "rc $?"
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY" "$OUT/memcheck.txt"
echo "=== scrublet 1M"; SIZES=1000000 CPU_MAX=0 LIMIT=150 bash scripts/device/benchmarks/scrublet_gpu.sh 2>&1 | grep -E "scpipe:|neighbours|first call|second call|called|agree|skipped|Error|error" | head -30
