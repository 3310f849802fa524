# Sourced (from the repository root, .rsc-bench's wheels and scripts carried) by the device
# scripts that run rapids-singlecell beside scpipe: its wheels installed into /tmp/site, and
# `rsc_input N`, which makes workload B's file of N cells with rsc_bench.py's generator (kept in
# /tmp between calls of a warm machine) and sets F to its path.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .rsc-bench/whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
rsc_input() {
  python3 .rsc-bench/rsc_bench.py --gen-only --n-cells "$1" 2>&1 | tail -1
  F=/tmp/rsc_bench_${1}x20000_seed0.h5ad
}
