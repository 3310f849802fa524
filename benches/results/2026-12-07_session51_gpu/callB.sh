#!/usr/bin/env bash
# Session 50's regress_out call (the budget too short for two): the Python tests that call
# regress_out on the GPU (a CuPy CSR X through the new one-pass path, bit for bit the host's),
# then regress_out beside rapids-singlecell 0.18.1 at 1,000,000 cells (rsc_bench.py's file
# through QC, filters, normalize, log1p and 2,000 HVGs with each library), with the step's
# phases: regress_side_by_side.sh's steps, its wheels installed once. Carry .whl and .rsc-bench
# (its whl/ with rapids-singlecell's wheel, no extra/).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
START=$(date +%s); left() { echo $(( ${DEADLINE:-380} - ($(date +%s) - START) )); }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
SECONDS=0
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl || exit 1
REQUIRE_GPU=1 timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE -k regress_out \
  rmm-python/tests/test_scpipe_api.py rmm-python/tests/test_scpipe_functions.py > "$OUT/pytest-regress.log" 2>&1
echo "python: rc $? ${SECONDS}s: $(tail -1 "$OUT/pytest-regress.log")"
SECONDS=0
timeout $(lim 170) python3 .rsc-bench/rsc_bench.py --gen-only --n-cells "${N:-1000000}" 2>&1 | tail -1
F=/tmp/rsc_bench_${N:-1000000}x20000_seed0.h5ad
echo "input: ${SECONDS}s"
export PROFILE=1 SCPIPE_TRACE_PHASES=1
for lib in scpipe rsc; do
  SECONDS=0
  timeout $(lim 150) python3 scripts/device/benchmarks/regress_side_by_side.py $lib "$F" "$OUT/$lib.json" 2>&1 \
    | grep -v "^scpipe: \(calculate\|filter\|normalize\|log1p\|highly\)" | tail -30 | tee "$OUT/$lib.txt"
  echo "$lib: ${SECONDS}s"
done
python3 scripts/device/benchmarks/regress_side_by_side.py --compare "$OUT" | tee "$OUT/compare.txt"
rm -f "$OUT"/*.npy
