#!/usr/bin/env python3
"""The Pearson residuals and their HVG flavour with X on the GPU against the host's, through
scpipe's Python API: the same bits (residuals; residual variances, hence the same genes and
ranks), on N generated cells x 2,000 genes of whole counts and of fractional values, with and
without a batch key.

The steps route a GPU X to the twins (`steps::normalize_pearson_residuals`,
`steps::highly_variable_genes_pearson_residuals`).

Usage: python3 pearson_gpu_vs_host.py [N]   (default 200000; exits 1 on a
difference)
"""

from __future__ import annotations

import sys
import time

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

import scpipe


def cells(n: int, fractional: bool) -> ad.AnnData:
    x = sp.random(n, 2000, density=0.05, format="csr", random_state=1, dtype=np.float32)
    x.data = np.ceil(x.data * 5)
    if fractional:
        x.data *= np.float32(1.0) + (np.arange(x.nnz) % 7).astype(np.float32) * np.float32(0.137)
    keep = np.asarray(x.sum(axis=0)).ravel() > 0
    x = x[:, keep]
    x = x[np.asarray(x.sum(axis=1)).ravel() > 0]
    obs = pd.DataFrame({"batch": pd.Categorical((np.arange(x.shape[0]) % 3).astype(str))})
    obs.index = obs.index.astype(str)
    return ad.AnnData(x.tocsr(), obs=obs)


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    bad = 0
    for fractional in (False, True):
        a = cells(n, fractional)
        host, dev = a.copy(), a.copy()
        scpipe.get.anndata_to_GPU(dev)
        scpipe.settings.device = "cpu"
        t = time.perf_counter()
        scpipe.pp.normalize_pearson_residuals(host)
        th = time.perf_counter() - t
        scpipe.settings.device = "gpu"
        t = time.perf_counter()
        scpipe.pp.normalize_pearson_residuals(dev)
        tg = time.perf_counter() - t
        gpu = dev.X.get()
        same = gpu.dtype == host.X.dtype and np.array_equal(gpu.view(np.uint32), host.X.view(np.uint32))
        bad += not same
        print(f"{a.shape} fractional={fractional}: residuals same bits {same} (host {th:.2f} s, GPU {tg:.2f} s)", flush=True)
        for batch_key in (None, "batch"):
            h, g = a.copy(), a.copy()
            scpipe.settings.device = "cpu"
            t = time.perf_counter()
            scpipe.pp.highly_variable_genes(h, flavor="pearson_residuals", n_top_genes=500, batch_key=batch_key)
            th = time.perf_counter() - t
            scpipe.settings.device = "gpu"
            t = time.perf_counter()
            scpipe.pp.highly_variable_genes(g, flavor="pearson_residuals", n_top_genes=500, batch_key=batch_key)
            tg = time.perf_counter() - t
            rv = np.array_equal(h.var["residual_variances"].to_numpy().view(np.uint64), g.var["residual_variances"].to_numpy().view(np.uint64))
            hv = (h.var["highly_variable"] == g.var["highly_variable"]).all()
            rk = h.var["highly_variable_rank"].equals(g.var["highly_variable_rank"])
            bad += not (rv and hv and rk)
            print(f"  hvg batch_key={batch_key}: residual variances same bits {rv}, same genes {hv}, same ranks {rk} (host {th:.2f} s, GPU {tg:.2f} s)", flush=True)
    print("PASS" if bad == 0 else f"FAIL: {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
