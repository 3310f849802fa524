#!/usr/bin/env bash
# Session 48's fourth device call. Carry .gpu-d (gpu_kernels + data), .whl and .rsc-bench
# (extra/ without igraph and leidenalg). The box of 2-D points moved into a shared module
# (gpu::bounds) that t-SNE and ForceAtlas2 both use: their GPU tests, memcheck of draw_graph,
# the modules' load checks; draw_graph at 1,000,000 cells again (the box now waited for on the
# host); then where kmeans' 0.37 s at 1,000,000 cells goes: the Rust phases
# (SCPIPE_TRACE_PHASES) and the Python side (cProfile), GPU and host.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
SECONDS=0
REQUIRE_GPU=1 timeout 100 .gpu-d/bin/gpu_kernels --test-threads=1 --nocapture tsne force_atlas2 every_module every_kernel > "$OUT/gpu_kernels.log" 2>&1
grep -E "host .*GPU|trustworthiness|FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  .gpu-d/bin/gpu_kernels --test-threads=1 force_atlas2 > "$OUT/memcheck_draw_graph.txt" 2>&1
echo "memcheck draw_graph: rc $? $(grep -E 'ERROR SUMMARY|LEAK SUMMARY|test result' "$OUT/memcheck_draw_graph.txt" | tr '\n' ' ') ${SECONDS}s"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
OUT=$OUT CALLS=2 timeout 60 python3 scripts/device/benchmarks/draw_graph_side_by_side.py scpipe-gpu 1000000 2>&1 | tail -1 | tee "$OUT/draw_graph.txt"
for lib in scpipe-gpu scpipe-cpu; do
  SCPIPE_TRACE_PHASES=1 PROFILE=1 CALLS=2 timeout 90 python3 scripts/device/benchmarks/kmeans_side_by_side.py $lib 1000000 > "$OUT/kmeans_profile_$lib.txt" 2>&1
  head -c 5000 "$OUT/kmeans_profile_$lib.txt"
done
echo "all: ${SECONDS}s"
