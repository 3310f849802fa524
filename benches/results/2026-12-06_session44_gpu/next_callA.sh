#!/usr/bin/env bash
# Prepared for the next session's first device call (session 44 had no device time left):
# `diffmap_warp_rows.patch` and `pearson_sums.patch` applied to `9eff291` (diffmap's basis of
# k + 32 vectors; the kNN kernels' shared exact distance in common.cuh: both new, unrun), built
# here into .gpu-d (bin/gpu_kernels.xz, whl/ the rmm_core wheel, data/ with pbmc68k, celltypist
# and scvi;
# BUILT_AT says so). Carry .gpu-d and .rsc-bench without the rapids-singlecell wheel and
# extra/ (then .rsc-bench with the rsc wheel in a second call on the warm machine:
# `tools_side_by_side.sh 1000000 pearson_residuals,diffmap` with the patched wheel in .whl).
#  1. gpu_kernels' diffmap and Pearson tests (the host's bits: the products and row sums now a
#     warp a row, summed in storage order by shuffles; the genes' exact sums through a block's
#     shared memory), memcheck of both;
#     also the kNN tests (neighbors, tensor, ivf, nn_descent, bbknn), whose kernels now share
#     common.cuh's exact_distance and nearer_first;
#  2. the residuals' and diffmap's phases at 1 M cells (were: cells' sums 2.55 ms, genes' sums
#     2.86 ms; diffmap's 1,143 products 675 ms).
# If the tests pass: `git apply` both patches (benches/results/2026-12-06_session44_gpu/).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 240 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson neighbors knn descent bbknn > "$OUT/gpu_kernels.log" 2>&1
grep -E "^test |panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
PYTHONPATH=/tmp/site timeout 120 python3 scripts/device/tests/pearson_gpu_vs_host.py 200000 2>&1 | grep -E "residuals|hvg|PASS|FAIL|Error"
SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 120 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 pearson_residuals,diffmap > "$OUT/phases.txt" 2>&1
grep -E "^(diffmap|pearson_residuals)|scpipe (diffmap|pearson)" "$OUT/phases.txt"
