#!/usr/bin/env bash
# On the GPU machine: installs the rmm_core wheel carried in .whl/ (built here with
# `maturin build --release -m rmm-python/Cargo.toml -o .whl`), runs the Python tests with
# REQUIRE_GPU=1 (../tests/python.sh; SKIP_TESTS=1 leaves them out), then the allocator
# benchmarks (PyTorch training loop, CuPy allocations), each allocator in its own process.
# Results go to $OUT (pytest.log, torch.jsonl, torch-latency.jsonl, cupy.jsonl).
# Usage, from the repository root: [SKIP_TESTS=1] [CUPY_ROUNDS=7]
#   bash scripts/device/benchmarks/python_allocators.sh [torch-steps] [cupy-iterations] [torch-rounds]
set -uo pipefail
STEPS="${1:-200}"
ITERATIONS="${2:-20000}"
ROUNDS="${3:-1}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
if [ ! -d /tmp/rmm-core-site/rmm_core ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rmm-core-site .whl/rmm_core-*.whl || exit 1
fi
export PYTHONPATH=/tmp/rmm-core-site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, cupy, numba; print('torch', torch.__version__, 'cupy', cupy.__version__, 'numba', numba.__version__)" | tee -a "$OUT/gpu.txt"
[ -z "${SKIP_TESTS:-}" ] && OUT="$OUT" bash "$(dirname "$0")/../tests/python.sh"
# Rounds alternate the order of the allocators (one process each: PyTorch cannot switch).
for round in $(seq "$ROUNDS"); do
  order="torch pool expandable"
  [ $((round % 2)) -eq 0 ] && order="expandable pool torch"
  for allocator in $order; do
    python3 rmm-python/benches/torch_alloc_latency.py "$allocator" | tee -a "$OUT/torch-latency.jsonl"
    python3 rmm-python/benches/torch_training.py "$allocator" "$STEPS" | tee -a "$OUT/torch.jsonl"
  done
done
# CuPy can switch allocators at any time: one process, the allocators taking turns.
python3 rmm-python/benches/cupy_allocations.py "$ITERATIONS" "${CUPY_ROUNDS:-7}" | tee -a "$OUT/cupy.jsonl"
