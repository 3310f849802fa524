#!/usr/bin/env bash
# Session 40, call A2: the Python suite with REQUIRE_GPU=1.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
export SCPIPE_DATA=$PWD/.gpu-t/data
REQUIRE_GPU=1 timeout 520 python3 -m pytest -q -p no:cacheprovider --durations=15 rmm-python/tests > "$OUT/pytest.log" 2>&1; echo "rc $?"
tail -40 "$OUT/pytest.log"
