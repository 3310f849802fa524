"""An allocation-heavy CuPy workload under CuPy's default memory pool or rmm_core's pool
(through `rmm_core.allocators.cupy`); prints one JSON line.

    python cupy_allocations.py {cupy|pool} [iterations]

Each iteration makes temporaries of random sizes (1 KiB to 4 MiB) with elementwise operations
and a reduction, as array code does; the time is the best of 5 rounds, ended by a synchronize.
"""

import json
import sys
import time

import cupy as cp
import numpy as np

allocator = sys.argv[1]
iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
if allocator == "pool":
    from rmm_core import mr
    from rmm_core.allocators.cupy import rmm_cupy_allocator

    mr.set_per_device_resource(0, mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 30))
    cp.cuda.set_allocator(rmm_cupy_allocator)
elif allocator != "cupy":
    raise SystemExit(f"unknown allocator {allocator!r}")

rng = np.random.default_rng(0)
sizes = (2 ** rng.uniform(8, 20, iterations)).astype(int)  # float32 elements: 1 KiB .. 4 MiB
base = cp.arange(1 << 20, dtype=cp.float32)


def run():
    total = cp.zeros((), dtype=cp.float32)
    for n in sizes:
        x = base[:n] * 2.0
        y = cp.sqrt(x + 1.0)
        total += y.sum()
    cp.cuda.Device().synchronize()
    return float(total)


run()  # warm-up: kernels compiled, pools filled
times = []
for _ in range(5):
    start = time.perf_counter()
    result = run()
    times.append(time.perf_counter() - start)
print(json.dumps({
    "allocator": allocator,
    "iterations": iterations,
    "best_s": min(times),
    "us_per_iteration": min(times) / iterations * 1e6,
    "result": result,
}))
