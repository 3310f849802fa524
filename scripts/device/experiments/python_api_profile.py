#!/usr/bin/env python3
"""Where a scpipe Python call's time goes on the GPU, beside the same step in `scpipe run`:
per call the extension's split (parts in, step, results out, from scpipe.settings.progress)
and cProfile's top Python functions. Usage: python3 python_api_profile.py FILE.h5ad"""

import cProfile
import pstats
import sys
import time

import anndata as ad
import cupy as cp
import numpy as np
import pandas as pd

import rmm_core
from rmm_core.allocators.cupy import rmm_cupy_allocator
import scpipe

rmm_core.reinitialize(pool_allocator=True)
cp.cuda.set_allocator(rmm_cupy_allocator)
scpipe.settings.device = "gpu"
scpipe.settings.progress = True
a = ad.read_h5ad(sys.argv[1])
scpipe.get.anndata_to_GPU(a)
a.var["mt"] = np.asarray(a.var_names.str.startswith("MT-"), dtype=bool)
a.obs["g"] = pd.Categorical((np.arange(a.n_obs) % 9).astype(str))
calls = [
    ("qc", lambda: scpipe.pp.calculate_qc_metrics(a, qc_vars=["mt"], inplace=True)),
    ("filter_cells", lambda: scpipe.pp.filter_cells(a, min_genes=200)),
    ("normalize", lambda: scpipe.pp.normalize_total(a, target_sum=1e4)),
    ("log1p", lambda: scpipe.pp.log1p(a)),
    ("hvg", lambda: scpipe.pp.highly_variable_genes(a, n_top_genes=2000, flavor="cell_ranger")),
    ("markers", lambda: scpipe.tl.rank_genes_groups(a, "g", method="wilcoxon", n_genes=100)),
]
for name, f in calls:
    f()  # warm
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    f()
    cp.cuda.Device().synchronize()
    prof.disable()
    print(f"== {name}: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)
    pstats.Stats(prof).sort_stats("tottime").print_stats(8)
hv = a.var["highly_variable"].to_numpy()
import cupyx.scipy.sparse as cusparse


def timed(label, f):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    f()
    cp.cuda.Device().synchronize()
    print(f"== {label}: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)


ours = a.X
theirs = cusparse.csr_matrix(ours.get())  # as rapids-singlecell's anndata_to_GPU makes it
print("flags ours", ours._has_canonical_format if hasattr(ours, "_has_canonical_format") else "?",
      "theirs", theirs._has_canonical_format if hasattr(theirs, "_has_canonical_format") else "?", flush=True)
timed("column subset of our X", lambda: ours[:, hv])
timed("column subset of cupyx's X", lambda: theirs[:, hv])
timed("our X: has_canonical_format", lambda: ours.has_canonical_format)
timed("column subset of our X after the check", lambda: ours[:, hv])
for with_raw in (False, True):
    if with_raw:
        a.raw = a
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    b = a[:, hv].copy()
    cp.cuda.Device().synchronize()
    print(f"== subset with raw={with_raw}: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)
# Where the subset with .raw spends its time: the same subset again (CuPy's kernels now loaded),
# under cProfile.
cp.cuda.Device().synchronize()
prof = cProfile.Profile()
t = time.perf_counter()
prof.enable()
b = a[:, hv].copy()
cp.cuda.Device().synchronize()
prof.disable()
print(f"== subset with raw=True, again: {1e3 * (time.perf_counter() - t):.1f} ms", flush=True)
pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
pstats.Stats(prof).sort_stats("tottime").print_stats(15)
