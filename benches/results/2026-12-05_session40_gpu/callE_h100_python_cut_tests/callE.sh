#!/usr/bin/env bash
# Session 40, call E: the Python tests that the suite's time limit cut, each file with its own
# limit and a stack dump of any test past 45 s.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source scripts/device/rsc_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .rsc-bench/extra/*.whl .whl/rmm_core-*.whl 2>&1 | grep -v WARNING
export SCPIPE_DATA=$PWD/.gpu-t/data REQUIRE_GPU=1
P="python3 -m pytest -q -p no:cacheprovider --tb=short -rfE --durations=8 -o faulthandler_timeout=45"
for f in "test_scpipe_ingest 60" "test_scpipe_tutorial 100" "test_statistics test_units 45"; do
  limit=${f##* }; f=${f% *}
  files=$(for x in $f; do echo rmm-python/tests/$x.py; done)
  echo "=== $f"; timeout $limit $P $files > "$OUT/${f// /_}.log" 2>&1; echo "rc $?"
  grep -E "^(FAILED|ERROR)|passed|failed|Timeout|^  File|Error" "$OUT/${f// /_}.log" | head -40
done
