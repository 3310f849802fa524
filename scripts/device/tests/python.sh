#!/usr/bin/env bash
# On the GPU machine: installs the rmm_core wheel carried in .whl/ (built here with
# `maturin build --release -m rmm-python/Cargo.toml -o .whl`) and runs the Python package's tests
# with REQUIRE_GPU=1 (CuPy, Numba and PyTorch in fresh interpreters), one pytest per test file
# with a limit of its own (LIMIT seconds, default 150), so that a slow file (scanpy's references
# compile umap-learn and pynndescent with numba there: a minute or more) does not cut the
# others; a test past 60 s dumps its stack. With .rsc-bench carried, its scanpy and anndata
# (and extra/'s igraph) are installed too and the scpipe tests run against them (SCPIPE_DATA:
# the datasets; .gpu-t/data when carried). The logs go to $OUT/pytest-FILE.log, a summary line
# per file to $OUT/pytest.log. benchmarks/python_allocators.sh runs this first unless
# SKIP_TESTS=1.
# Usage: bash scripts/device/tests/python.sh [FILE ...]   (from the repository root)
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
SITE=/tmp/rmm-core-site
if [ -d .rsc-bench/whl ]; then
  source scripts/device/rsc_env.sh
  SITE=/tmp/site
  extra=(); [ -d .rsc-bench/extra ] && extra=(.rsc-bench/extra/*.whl)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${extra[@]}" .whl/rmm_core-*.whl || exit 1
elif [ ! -d "$SITE/rmm_core" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/rmm_core-*.whl || exit 1
fi
export PYTHONPATH="$SITE" REQUIRE_GPU=1 PYTHONUNBUFFERED=1
[ -z "${SCPIPE_DATA:-}" ] && [ -d .gpu-t/data ] && export SCPIPE_DATA="$PWD/.gpu-t/data"
files=("$@"); [ ${#files[@]} -eq 0 ] && files=(rmm-python/tests/test_*.py)
: > "$OUT/pytest.log"
for f in "${files[@]}"; do
  name=$(basename "$f" .py)
  timeout "${LIMIT:-150}" python3 -m pytest -q -p no:cacheprovider --tb=short -rfE -o faulthandler_timeout=60 \
    "$f" > "$OUT/pytest-$name.log" 2>&1
  rc=$?
  echo "$name: rc $rc, $(grep -E '(passed|failed|error)' "$OUT/pytest-$name.log" | tail -1)" | tee -a "$OUT/pytest.log"
done
