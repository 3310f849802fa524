#!/usr/bin/env bash
# Session 40, call C: gpu_kernels (all, with the datasets), memcheck of scrublet, scrublet at 1M
# (X uploaded straight from scipy's arrays), the Python suite without the logreg file.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
(cd .gpu-t && tar xJf bins.tar.xz)
export SCPIPE_DATA=$PWD/.gpu-t/data
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "=== gpu_kernels"; REQUIRE_GPU=1 timeout 110 .gpu-t/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1; echo "rc $?"
grep -E "^test |test result" "$OUT/gpu_kernels.log" | grep -v " ok$" | tail -8
echo "=== memcheck"; REQUIRE_GPU=1 timeout 70 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/gpu_kernels --test-threads=1 scrublet > "$OUT/memcheck_scrublet.txt" 2>&1; echo "rc $?"
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY" "$OUT/memcheck_scrublet.txt"
echo "=== scrublet 1M"; SIZES=1000000 CPU_MAX=0 LIMIT=100 bash scripts/device/benchmarks/scrublet_gpu.sh 2>&1 | grep -E "scpipe:|neighbours|uploaded|first call|second call|agree|skipped|Error|error" | head -30
echo "=== pytest"; export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
REQUIRE_GPU=1 timeout 270 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE --durations=12 -k "not logreg" rmm-python/tests > "$OUT/pytest.log" 2>&1; echo "rc $?"
tail -45 "$OUT/pytest.log"
