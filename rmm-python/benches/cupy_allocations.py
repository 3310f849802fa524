"""An allocation-heavy CuPy workload under CuPy's default memory pool and rmm_core's pool
(through `rmm_core.allocators.cupy`), in one process: the two allocators take turns, round
after round, so both see the same machine state; prints one JSON line per allocator.

    python cupy_allocations.py [iterations] [rounds]

Each iteration makes temporaries of random sizes (1 KiB to 4 MiB) with elementwise operations
and a reduction, as array code does. Then `cupy.empty` of the same sizes, 64 arrays alive at a
time; then the allocator called directly (what `cupy.empty` spends in it), 64 allocations alive
at a time. Each figure is the median over the rounds (and the best), each round ended by a
synchronize.
"""

import json
import statistics
import sys
import time

import cupy as cp
import numpy as np

from rmm_core import mr
from rmm_core.allocators.cupy import rmm_cupy_allocator

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
ours = mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 30)
mr.set_per_device_resource(0, ours)
cupy_pool = cp.cuda.MemoryPool()
allocators = {"cupy": cupy_pool.malloc, "rmm_core pool": rmm_cupy_allocator}

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


window = [None] * 64


def allocate_only():
    for i, n in enumerate(sizes):
        window[i & 63] = cp.empty(int(n), dtype=cp.float32)
    cp.cuda.Device().synchronize()


def allocator_only(allocate):
    for i, n in enumerate(sizes):
        window[i & 63] = allocate(int(n) * 4)
    cp.cuda.Device().synchronize()


def timed(f):
    start = time.perf_counter()
    value = f()
    return time.perf_counter() - start, value


times = {name: {"workload": [], "alloc": [], "allocator": []} for name in allocators}
results = {}
for round_ in range(rounds + 1):  # round 0 warms up: kernels compiled, pools filled
    for name, allocator in allocators.items():
        cp.cuda.set_allocator(allocator)
        window[:] = [None] * 64
        workload, results[name] = timed(run)
        alloc, _ = timed(allocate_only)
        window[:] = [None] * 64
        direct, _ = timed(lambda: allocator_only(allocator))
        window[:] = [None] * 64
        if round_ > 0:
            times[name]["workload"].append(workload)
            times[name]["alloc"].append(alloc)
            times[name]["allocator"].append(direct)
for name in allocators:
    w, a, d = times[name]["workload"], times[name]["alloc"], times[name]["allocator"]
    print(json.dumps({
        "allocator": name,
        "iterations": iterations,
        "rounds": rounds,
        "us_per_iteration": statistics.median(w) / iterations * 1e6,
        "us_per_iteration_best": min(w) / iterations * 1e6,
        "alloc_ns": statistics.median(a) / iterations * 1e9,
        "alloc_ns_best": min(a) / iterations * 1e9,
        "allocator_call_ns": statistics.median(d) / iterations * 1e9,
        "allocator_call_ns_best": min(d) / iterations * 1e9,
        "result": results[name],
    }))
