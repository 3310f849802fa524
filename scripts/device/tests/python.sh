#!/usr/bin/env bash
# On the GPU machine: installs the rmm_core wheel carried in .whl/ (built here with
# `maturin build --release -m rmm-python/Cargo.toml -o .whl`) and runs the Python package's tests
# with REQUIRE_GPU=1 (CuPy, Numba and PyTorch in fresh interpreters). The log goes to
# $OUT/pytest.log. benchmarks/python_allocators.sh runs this first unless SKIP_TESTS=1.
# Usage: bash scripts/device/tests/python.sh   (from the repository root)
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
if [ ! -d /tmp/rmm-core-site/rmm_core ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rmm-core-site .whl/rmm_core-*.whl || exit 1
fi
export PYTHONPATH=/tmp/rmm-core-site
REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider rmm-python/tests 2>&1 | tee "$OUT/pytest.log"
