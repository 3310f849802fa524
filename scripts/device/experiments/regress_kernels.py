#!/usr/bin/env python3
"""regress_out and scale on a dense GPU X of generated values (no input file), for profiling
their kernels: `ncu -k regex:regress python3 regress_kernels.py [CELLS] [GENES]`. Each call
runs twice on a fresh copy; the times are printed (the second is warm)."""

import sys
import time

import anndata as ad
import cupy as cp
import numpy as np
import pandas as pd

import rmm_core
from rmm_core.allocators.cupy import rmm_cupy_allocator

import scpipe

n, g = (int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000), (int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
rmm_core.reinitialize(pool_allocator=True)
cp.cuda.set_allocator(rmm_cupy_allocator)
scpipe.settings.device = "gpu"
rng = cp.random.default_rng(0)
x = rng.random((n, g), dtype=cp.float32)
obs = pd.DataFrame({"a": np.random.default_rng(1).random(n), "b": np.random.default_rng(2).random(n),
                    "c": pd.Categorical(np.random.default_rng(3).integers(0, 4, n))})
for keys in (["a", "b"], ["c"]):
    for _ in range(2):
        a = ad.AnnData(X=x.copy(), obs=obs)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        scpipe.pp.regress_out(a, keys)
        cp.cuda.Device().synchronize()
        print(f"regress_out({keys}): {(time.perf_counter() - t) * 1e3:.1f} ms", flush=True)
