#!/usr/bin/env bash
# Session 48's first device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (scanpy; extra/ with fa2-modified and tqdm). draw_graph's new GPU twin: its bit-for-bit test
# and memcheck, the modules' load checks, logreg's test and memcheck (fd25824 never ran on a
# GPU), the Python draw_graph / logreg / api files with REQUIRE_GPU=1, then
# draw_graph_side_by_side.py: scpipe on the GPU at 10k, 100k and 1M cells, scpipe on the 16
# cores and scanpy (fa2-modified) at 10k.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 120 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture force_atlas2 logreg every_kernel every_module > "$OUT/gpu_kernels.log" 2>&1
grep -E "host .*GPU|FAILED|failed|panicked|test result|^test " "$OUT/gpu_kernels.log"; echo "gpu_kernels: ${SECONDS}s"
SECONDS=0
for t in force_atlas2 logreg; do
  REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu-d/bin/gpu_kernels --test-threads=1 $t > "$OUT/memcheck_$t.txt" 2>&1
  echo "memcheck $t: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_$t.txt" | tr '\n' ' ')"
done
echo "memcheck: ${SECONDS}s"
SECONDS=0
LIMIT=150 bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_draw_graph.py rmm-python/tests/test_scpipe_logreg.py rmm-python/tests/test_scpipe_api.py
cat "$OUT/pytest.log"; echo "python: ${SECONDS}s"
export PYTHONPATH=/tmp/site
for run in "scpipe-gpu 10000" "scpipe-gpu 100000" "scpipe-gpu 1000000" "scpipe-cpu 10000" "scanpy 10000"; do
  calls=2; case "$run" in scanpy*|scpipe-cpu*) calls=1 ;; esac
  SECONDS=0
  OUT=$OUT CALLS=$calls timeout 200 python3 scripts/device/benchmarks/draw_graph_side_by_side.py $run 2>&1 | tail -2 | tee -a "$OUT/draw_graph.txt"
  echo "($run: ${SECONDS}s in all)" | tee -a "$OUT/draw_graph.txt"
done
