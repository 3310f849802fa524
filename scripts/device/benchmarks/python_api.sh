#!/usr/bin/env bash
# On the GPU machine, from the repository root: (e2) scpipe's Python API beside rapids-singlecell
# in one call. Carry `.whl` (the rmm_core wheel: `maturin build --release -m
# rmm-python/Cargo.toml -o .whl`) and `.rsc-bench` (`../shared/rsc-bench/fetch.sh`).
#   bash scripts/device/benchmarks/python_api.sh [CELLS ...]      (default 200000)
# For each size: rapids-singlecell's generated file, then `python_api.py` (scpipe, one process,
# each step twice) and `rsc_bench.py --no-cpu` (rapids-singlecell the same way), taking turns
# `ROUNDS` times (default 1). `TESTS=1` first runs the Python package's tests with REQUIRE_GPU=1;
# `PROFILE=1` adds `experiments/python_api_profile.py` on the first size; `EMBED=FILE.npy` saves
# the flow's harmony embedding (for `experiments/scanpy_rest.py`); `KEEP_INPUT=1` leaves the
# generated files in /tmp (`$F`: the last). Output under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/rmm_core-*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${TESTS:-0}" = 1 ]; then
  REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider rmm-python/tests 2>&1 | tail -15 | tee "$OUT/pytest.log"
fi
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(200000)
for n in "${sizes[@]}"; do
  rsc_input "$n"
  if [ "${PROFILE:-0}" = 1 ] && [ "$n" = "${sizes[0]}" ]; then
    python3 scripts/device/experiments/python_api_profile.py "$F" > "$OUT/profile_$n.txt" 2>&1
    tail -40 "$OUT/profile_$n.txt"
  fi
  for r in $(seq 1 "${ROUNDS:-1}"); do
    echo "== scpipe, $n cells, round $r"
    python3 scripts/device/benchmarks/python_api.py "$F" "$OUT/py_${n}_$r.json" ${EMBED:+"$EMBED"} 2>&1 | tee "$OUT/py_${n}_$r.txt" | grep -v "^scpipe:"
    echo "== rapids-singlecell, $n cells, round $r"
    python3 .rsc-bench/rsc_bench.py --no-cpu --n-cells "$n" --out "$OUT/rsc_${n}_$r" > "$OUT/rsc_${n}_$r.txt" 2>&1
    tail -28 "$OUT/rsc_${n}_$r.txt"
  done
  [ "${KEEP_INPUT:-0}" = 1 ] || rm -f "$F"
done
