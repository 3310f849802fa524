#!/usr/bin/env bash
# Session 43, call A: gpu_kernels (the Pearson and diffmap twins first, then the rest, with the datasets),
# memcheck of those twins, scpipe's Python tests against scanpy 1.12.4 with the wheel
# that routes a GPU X to the twins, then the twins against the host through the Python API.
# Carry .gpu-t (bin/gpu_kernels.xz, data/), .whl and .rsc-bench without the rsc wheel.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-t/bin/gpu_kernels.xz && chmod +x .gpu-t/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-t/data SCPIPE_KERNEL_CACHE=/tmp/kc
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local s=$(date +%s); "$@"; local rc=$?; echo "rc $rc in $(( $(date +%s) - s )) s"; }
echo "=== gpu_kernels pearson diffmap"; REQUIRE_GPU=1 t timeout 120 .gpu-t/bin/gpu_kernels --test-threads=1 --nocapture pearson diffmap > "$OUT/gpu_kernels_pearson.log" 2>&1
tail -1 "$OUT/gpu_kernels_pearson.log"; grep -E "^case|panicked|test result|host .*GPU|^test " "$OUT/gpu_kernels_pearson.log" | head -16
echo "=== memcheck"; REQUIRE_GPU=1 t timeout 110 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-t/bin/gpu_kernels --test-threads=1 pearson diffmap > "$OUT/memcheck.txt" 2>&1
tail -1 "$OUT/memcheck.txt"; grep -E "test result|ERROR SUMMARY|LEAK SUMMARY" "$OUT/memcheck.txt"
echo "=== python (scpipe files)"
LIMIT=120 timeout ${PYLIMIT:-220} bash scripts/device/tests/python.sh $(for f in functions tutorial ingest diffmap logreg api aggregate bbknn clustering draw_graph tsne; do echo rmm-python/tests/test_scpipe_$f.py; done)
echo "=== pearson GPU vs host (Python API)"
PYTHONPATH=/tmp/site t timeout 60 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 2>&1 | grep -v Warn | tail -12
echo "=== gpu_kernels (the rest)"; REQUIRE_GPU=1 t timeout 90 .gpu-t/bin/gpu_kernels --test-threads=1 --skip pearson --skip diffmap > "$OUT/gpu_kernels.log" 2>&1
tail -1 "$OUT/gpu_kernels.log"; grep -E "^test |test result" "$OUT/gpu_kernels.log" | grep -v " ok$" | tail -8
