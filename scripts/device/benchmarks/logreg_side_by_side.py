#!/usr/bin/env python3
"""rank_genes_groups(method='logreg') at N generated cells (issue 53): N x 2,000 whole counts
(5% stored, 1 to 5), each cell's group (of 12) the block of 167 genes where its counts are
largest, so the groups are a function of X as clusters are. One library (and device) per
process: `scpipe-gpu`, `scpipe-cpu` (settings.device), or `scanpy` (scikit-learn's lbfgs, its
default max_iter 100). Prints the first and the warm (second) call's seconds; for scpipe also
the fit's agreement with scanpy's when SCANPY_TOP is a file of scanpy's top genes (written by
the scanpy run as /tmp/logreg_top_N.npy). CALLS=1 times the first call only. The cells are
made once a machine and kept in /tmp/logreg_cells_N.npz for the other libraries' processes.
    python3 scripts/device/benchmarks/logreg_side_by_side.py {scpipe-gpu|scpipe-cpu|scanpy} N"""
import os, sys, time, warnings
import numpy as np

warnings.filterwarnings("ignore")
lib, n = sys.argv[1], int(sys.argv[2])


def cells(n):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    # Made once a machine (scipy's draw takes about a minute at 1 M cells), then read back by
    # every library's process.
    path = f"/tmp/logreg_cells_{n}.npz"
    try:
        x = sp.load_npz(path)
        group = np.load(path + ".group.npy")
    except FileNotFoundError:
        x = sp.random(n, 2000, density=0.05, format="csr", random_state=1, dtype=np.float32)
        x.data = np.ceil(x.data * 5)
        block = np.minimum(np.arange(2000) * 12 // 2000, 11)
        rows = np.repeat(np.arange(n), np.diff(x.indptr))
        sums = np.bincount(rows * 12 + block[x.indices], weights=x.data, minlength=n * 12)
        group = sums.reshape(n, 12).argmax(axis=1)
        sp.save_npz(path, x, compressed=False)
        np.save(path + ".group.npy", group)
    a = ad.AnnData(x)
    a.obs["group"] = pd.Categorical(group.astype(str))
    return a


a = cells(n)
if lib.startswith("scpipe"):
    import scpipe

    scpipe.settings.device = lib.split("-")[1]
    call = lambda b: scpipe.tl.rank_genes_groups(b, "group", method="logreg")
else:
    import scanpy as sc

    call = lambda b: sc.tl.rank_genes_groups(b, "group", method="logreg")
times, stopped = [], []
for _ in range(int(os.environ.get("CALLS", "2"))):  # CALLS=1: the first call only
    b = a.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        call(b)
        times.append(time.perf_counter() - t)
    # scikit-learn's ConvergenceWarning, or scpipe's: max_iter ended the fit.
    stopped.append(any("max_iter" in str(w.message) for w in caught))
names = b.uns["rank_genes_groups"]["names"]
top = np.array([[names[i][g] for i in range(25)] for g in names.dtype.names])
warm = f"warm {times[1]:.2f} s" if len(times) > 1 else "no warm call"
print(f"{lib} logreg at {n} cells: first {times[0]:.2f} s, {warm}; max_iter ended the fit: {stopped[-1]}", flush=True)
path = f"/tmp/logreg_top_{n}.npy"
if lib == "scanpy":
    np.save(path, top)
else:
    try:
        ref = np.load(path, allow_pickle=True)
        shared = np.mean([len(set(t) & set(r)) / 25 for t, r in zip(top, ref)])
        print(f"{lib}: each group's top 25 genes shared with scanpy's: {shared:.0%} on average")
    except FileNotFoundError:
        pass
