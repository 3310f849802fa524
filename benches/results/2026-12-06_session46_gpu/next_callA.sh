#!/usr/bin/env bash
# Prepared for the next session's first device call. Build here first (`.gpu-d` and `.whl`
# were rebuilt at the end of session 46 at its HEAD; rebuild them if the code changed since):
#   cargo test --release -p integration-tests --test gpu_kernels --no-run; strip + xz into
#   .gpu-d/bin/gpu_kernels.xz; .venv/bin/maturin build --release -m rmm-python/Cargo.toml -o .whl
# Carry .gpu-d (with data/: celltypist, scvi, pbmc68k, harmony/), .whl and .rsc-bench (extra/
# in, the rapids-singlecell wheel out). It runs every gpu_kernels test (the warp-add limit is
# 4,096 columns since d1d5e96; call A ran with 8,192), project_dots_variants.py as now derived
# from diffmap.cu (not yet run in that form), and the scpipe Python files with REQUIRE_GPU=1.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
xz -d -k -f .gpu-d/bin/gpu_kernels.xz && chmod +x .gpu-d/bin/gpu_kernels
export SCPIPE_DATA=$PWD/.gpu-d/data
REQUIRE_GPU=1 timeout 200 .gpu-d/bin/gpu_kernels --test-threads=1 > "$OUT/gpu_kernels.log" 2>&1
grep -E "FAILED|failed|panicked|test result" "$OUT/gpu_kernels.log"
python3 scripts/device/experiments/project_dots_variants.py 1000000 36 > "$OUT/variants.txt" 2>&1
grep -E "bits|repo|old|\(32, 4, 4\)" "$OUT/variants.txt"
LIMIT=120 bash scripts/device/tests/python.sh
