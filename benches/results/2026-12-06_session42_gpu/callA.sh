#!/usr/bin/env bash
# Session 42, call A (prepared; no machine could be started): gpu_kernels (the new Pearson twins first, then the rest, with the
# datasets), memcheck of the Pearson twins, then scpipe's
# Python tests against scanpy 1.12.4 (.rsc-bench without the rapids-singlecell wheel).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-t/bin/gpu_kernels.xz && chmod +x .gpu-t/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-t/data SCPIPE_KERNEL_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "rc $rc in $(( $(date +%s) - s )) s"; }
echo "=== gpu_kernels pearson"; REQUIRE_GPU=1 t timeout 100 .gpu-t/bin/gpu_kernels --test-threads=1 --nocapture pearson > "$OUT/gpu_kernels_pearson.log" 2>&1
tail -1 "$OUT/gpu_kernels_pearson.log"; grep -E "^case|panicked|test result" "$OUT/gpu_kernels_pearson.log" | head -12
echo "=== gpu_kernels (the rest)"; REQUIRE_GPU=1 t timeout 120 .gpu-t/bin/gpu_kernels --test-threads=1 --skip pearson > "$OUT/gpu_kernels.log" 2>&1
tail -1 "$OUT/gpu_kernels.log"; grep -E "^test |test result" "$OUT/gpu_kernels.log" | grep -v " ok$" | tail -8
echo "=== memcheck"; REQUIRE_GPU=1 t timeout 90 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/bin/gpu_kernels --test-threads=1 pearson > "$OUT/memcheck.txt" 2>&1
tail -1 "$OUT/memcheck.txt"; grep -E "test result|ERROR SUMMARY|LEAK SUMMARY" "$OUT/memcheck.txt"
echo "=== python (scpipe files)"
LIMIT=150 timeout ${PYLIMIT:-240} bash scripts/device/tests/python.sh $(for f in functions tutorial ingest diffmap logreg api aggregate bbknn clustering draw_graph tsne; do echo rmm-python/tests/test_scpipe_$f.py; done)
