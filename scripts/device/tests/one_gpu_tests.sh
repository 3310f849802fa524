#!/bin/bash
# The GPU test binaries of the pipeline and kernels that need one GPU (gpu_streamed,
# gpu_kernels, gpu_generated), each log in $OUT, a summary line each on stdout. SCPIPE_DATA must
# name the datasets' folder (gpu_kernels reads them).
# Usage: bash scripts/device/tests/one_gpu_tests.sh BUNDLE_DIR
B=${1:?bundle directory with the test binaries}
OUT=${OUT:-/tmp/out}
for t in gpu_streamed gpu_kernels gpu_generated; do
  echo "== $t"
  REQUIRE_GPU=1 timeout 100 "$B/$t" --test-threads=1 > "$OUT/$t.log" 2>&1; echo "$t rc $?"
  grep -E "test result|FAILED|panicked" "$OUT/$t.log" | head -8
done
