#!/usr/bin/env bash
# Session 46's third device call: the scpipe Python files that the index conversion (f7a4a02),
# the graphs left behind (db1d7cc) and diffmap's new sums touch, with REQUIRE_GPU=1 against
# scanpy 1.12.4. Carry .whl, .rsc-bench (with extra/, without the rapids-singlecell wheel) and
# .gpu-d (its data).
set -uo pipefail
export SCPIPE_DATA=$PWD/.gpu-d/data
LIMIT=${LIMIT:-150} bash scripts/device/tests/python.sh rmm-python/tests/test_scpipe_api.py \
  rmm-python/tests/test_scpipe_diffmap.py rmm-python/tests/test_scpipe_functions.py \
  rmm-python/tests/test_scpipe_clustering.py
