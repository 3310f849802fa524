#!/usr/bin/env python3
"""The fixed cost of one scpipe Python call on the GPU: log1p (in place) and
calculate_qc_metrics on a CuPy matrix of 100 cells and of 200,000 cells (2,000 values a
cell), each 30 times; per call the median wall time and the extension's split (parts in, step,
results out), beside a CuPy kernel of the same size. Usage: python3 call_overhead.py"""

import statistics
import time

import anndata as ad
import cupy as cp
import cupyx.scipy.sparse as cusparse
import numpy as np

import rmm_core
from rmm_core import _lib
from rmm_core.allocators.cupy import rmm_cupy_allocator
import scpipe
from scpipe import _parts

rmm_core.reinitialize(pool_allocator=True)
cp.cuda.set_allocator(rmm_cupy_allocator)
scpipe.settings.device = "gpu"
dev = cp.cuda.Device()


def matrix(n_obs, n_vars=20000, per_row=2000):
    rng = cp.random.default_rng(0)
    indptr = cp.arange(n_obs + 1, dtype=cp.int64) * per_row
    indices = rng.integers(0, n_vars, size=n_obs * per_row, dtype=cp.int32)
    data = rng.integers(1, 10, size=n_obs * per_row).astype(cp.float32)
    return cusparse.csr_matrix((data, indices, indptr.astype(cp.int32)), shape=(n_obs, n_vars))


def timed(label, f, n=30):
    f()
    times = []
    for _ in range(n):
        dev.synchronize()
        t = time.perf_counter()
        f()
        dev.synchronize()
        times.append(time.perf_counter() - t)
    print(f"{label}: median {1e3 * statistics.median(times):.3f} ms, min {1e3 * min(times):.3f} ms", flush=True)


for n_obs in (100, 200000):
    a = ad.AnnData(matrix(n_obs))
    a.var["mt"] = np.zeros(a.n_vars, dtype=bool)
    x = a.X
    timed(f"{n_obs} cells: CuPy log1p of the values in place", lambda: cp.log1p(x.data, out=x.data))
    timed(f"{n_obs} cells: matrix_part", lambda: _parts.matrix_part(a.X, "X"))
    timed(f"{n_obs} cells: scpipe.pp.log1p", lambda: scpipe.pp.log1p(a))
    xp = _parts.matrix_part(a.X, "X")
    splits = []

    def raw_call():
        out = _lib._sc_call("log1p", {"X": xp}, {"base": None}, "gpu", True, True, True)
        splits.append(out["timings"])

    timed(f"{n_obs} cells: _sc_call('log1p', in place)", raw_call)
    t_in, t_step, t_out = (statistics.median(s[i] for s in splits) for i in range(3))
    print(f"   split (median): parts in {1e3 * t_in:.3f} ms, step {1e3 * t_step:.3f} ms, results out {1e3 * t_out:.3f} ms")
    timed(f"{n_obs} cells: scpipe.pp.calculate_qc_metrics", lambda: scpipe.pp.calculate_qc_metrics(a, qc_vars=["mt"], inplace=True), n=10)
