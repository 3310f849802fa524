#!/usr/bin/env bash
# Every GPU test binary with REQUIRE_GPU=1, then compute-sanitizer memcheck on the kernel tests.
# Run in place (bash scripts/device/tests/tests.sh) with .gpu-tests carried (tests/ and data/).
set -o pipefail
cd "$(dirname "$0")/../../.."   # the repository root
export SCPIPE_DATA=$PWD/.gpu-tests/data REQUIRE_GPU=1 SCPIPE_KERNEL_CACHE=/tmp/scpipe-kernels
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
pass=0; fail=0
for t in .gpu-tests/tests/*; do
  echo "=== $(basename $t)"
  if timeout 300 $t --test-threads=1 > $OUT/$(basename $t).log 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); fi
  grep -E "^test result|panicked|FAILED" $OUT/$(basename $t).log | head -5
done
echo "test binaries: $pass passed, $fail failed"
echo "=== memcheck gpu_kernels"; timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu-tests/tests/gpu_kernels --test-threads=1 scan_and qc_and normalize_ hvg_ pca_ > $OUT/memcheck.log 2>&1; echo "exit $?"; grep -E "test result|ERROR SUMMARY" $OUT/memcheck.log
