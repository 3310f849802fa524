#!/usr/bin/env bash
# Prepared for the next session's first device call. Build here first (this machine may come
# fresh, with no build folders):
#   cargo test --release -p integration-tests --test gpu_kernels --no-run
#   mkdir -p .gpu-d/bin .gpu-d/data .gpu-d/whl; strip + xz the gpu_kernels executable into
#   .gpu-d/bin/gpu_kernels.xz; .venv/bin/maturin build --release -m rmm-python/Cargo.toml -o .gpu-d/whl
#   cp ../shared/data/{celltypist_sample_559x32786_counts,scvi_pbmc5k_pbmc10k_400cells_2batches_counts,pbmc68k_reduced}.h5ad .gpu-d/data/
#   cp -r ../shared/data/harmony .gpu-d/data/      # session 45's call F lacked it
#   ../shared/rsc-bench/fetch.sh; move .rsc-bench/whl/rapids_singlecell* and .rsc-bench/extra aside
# Carry .gpu-d and .rsc-bench (without the rapids-singlecell wheel). It runs every gpu_kernels
# test (35, harmony's with its data this time), memcheck of diffmap and pearson, and the
# residuals' and diffmap's phases at 1 M cells with the extension's split (PROFILE=1).
# Then, on the warm machine: the rsc wheel back into .rsc-bench/whl, the wheel into .whl, and
# `bash benches/results/2026-12-06_session45_gpu/callG.sh` (carry .whl and .rsc-bench).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 300 .gpu-d/bin/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 .gpu-d/bin/gpu_kernels --test-threads=1 diffmap pearson > "$OUT/memcheck.txt" 2>&1
grep -E "test result|ERROR SUMMARY|LEAK SUMMARY|panicked" "$OUT/memcheck.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/whl/*.whl .gpu-d/whl/*.whl 2>&1 | grep -v WARNING
PROFILE=1 SCPIPE_TRACE_PHASES=1 PYTHONPATH=/tmp/site timeout 150 python3 scripts/device/benchmarks/tools_side_by_side.py scpipe 1000000 diffmap,pearson_residuals > "$OUT/phases.txt" 2>&1
grep -E "^(diffmap|pearson_residuals)|scpipe (diffmap|pearson)|on the GPU in" "$OUT/phases.txt"
