#!/usr/bin/env bash
# On the GPU machine, from the repository root: regress_out and the scale after it, scpipe's
# Python API beside rapids-singlecell 0.18.1 on rsc_bench.py's generated file, in one call
# (`regress_side_by_side.py`, one library per process). Carry `.whl` (the rmm_core wheel) and
# `.rsc-bench` (`../shared/rsc-bench/fetch.sh`, without its `extra` folder).
#   [TESTS=1] bash scripts/device/benchmarks/regress_side_by_side.sh [CELLS]   (default 1000000)
# TESTS=1 first runs the Python package's tests with REQUIRE_GPU=1; PROFILE=1 prints where
# each scpipe call's time goes (with SCPIPE_TRACE_PHASES=1, the step's phases). Output under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-0}" = 1 ]; then
  REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -p no:cacheprovider rmm-python/tests 2>&1 | tail -8 | tee "$OUT/pytest.log"
fi
rsc_input "${1:-1000000}"
for lib in scpipe rsc; do
  timeout 200 python3 scripts/device/benchmarks/regress_side_by_side.py $lib "$F" "$OUT/$lib.json" 2>&1 \
    | grep -v "^scpipe: \(calculate\|filter\|normalize\|log1p\|highly\)" | tail -30 | tee "$OUT/$lib.txt"
done
python3 scripts/device/benchmarks/regress_side_by_side.py --compare "$OUT" | tee "$OUT/compare.txt"
rm -f "$OUT"/*.npy
