#!/usr/bin/env bash
# On the GPU machine: installs the rmm_core wheel carried in .whl/ (built here with
# `maturin build --release -m rmm-python/Cargo.toml -o .whl`), runs the Python tests with
# REQUIRE_GPU=1, then the allocator benchmarks (PyTorch training loop, CuPy allocations), each
# allocator in its own process. Results go to $OUT (pytest.log, torch.jsonl, cupy.jsonl).
# Usage: bash scripts/device/python_allocators.sh [torch-steps] [cupy-iterations] [rounds]
set -uo pipefail
STEPS="${1:-200}"
ITERATIONS="${2:-20000}"
ROUNDS="${3:-1}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rmm-core-site .whl/rmm_core-*.whl || exit 1
export PYTHONPATH=/tmp/rmm-core-site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, cupy, numba; print('torch', torch.__version__, 'cupy', cupy.__version__, 'numba', numba.__version__)" | tee -a "$OUT/gpu.txt"
REQUIRE_GPU=1 python3 -m pytest -q -p no:cacheprovider rmm-python/tests 2>&1 | tee "$OUT/pytest.log"
for round in $(seq "$ROUNDS"); do
  for allocator in torch pool expandable; do
    python3 rmm-python/benches/torch_training.py "$allocator" "$STEPS" | tee -a "$OUT/torch.jsonl"
  done
  for allocator in cupy pool; do
    python3 rmm-python/benches/cupy_allocations.py "$allocator" "$ITERATIONS" | tee -a "$OUT/cupy.jsonl"
  done
done
