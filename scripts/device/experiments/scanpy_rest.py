#!/usr/bin/env python3
"""scanpy on the host for the notebook flow's steps that rapids-singlecell cannot run here
(cuML and cuGraph are not carried): neighbors, umap and leiden on the harmony embedding that
`benchmarks/python_api.py EMBEDDING.npy` wrote, as a scanpy + rapids-singlecell user would run
them. Numba's compilation is done first on 10,000 cells (scanpy takes pynndescent from 8,192
cells), untimed: a notebook pays it once.

Each step's time is printed as it ends, so a run stopped by `timeout` still shows how far it
got: a lower bound of scanpy's share (issue 52's "3x faster than scanpy + rsc" gate).

Usage: timeout SECONDS python3 scanpy_rest.py EMBEDDING.npy
Needs .rsc-bench's scanpy, umap-learn and pynndescent (whl/) and igraph + leidenalg (extra/).
"""

from __future__ import annotations

import importlib.util
import sys
import time


def main() -> int:
    import anndata as ad
    import numpy as np
    import pandas as pd
    import scanpy as sc

    def cells(e):
        obs = pd.DataFrame(index=pd.Index(np.arange(e.shape[0]).astype(str)))
        return ad.AnnData(obs=obs, obsm={"X_pca_harmony": e})

    import scipy.sparse as sp

    if not hasattr(sp.csr_array, "getnnz"):
        # scanpy 1.12.4's neighbors calls getnnz, which the GPU machine's SciPy no longer has
        # on sparse arrays: the same counts from the row offsets.
        sp.csr_array.getnnz = lambda self, axis=None: np.diff(self.indptr) if axis == 1 else self.nnz

    emb = np.load(sys.argv[1])
    print(f"{emb.shape[0]} cells, {emb.shape[1]} dimensions; scanpy {sc.__version__}", flush=True)

    def flow(a, say):
        for name, run in [
            ("neighbors(n_neighbors=15)", lambda: sc.pp.neighbors(a, n_neighbors=15, use_rep="X_pca_harmony")),
            ("umap", lambda: sc.tl.umap(a)),
            ("leiden", lambda: sc.tl.leiden(a, flavor="igraph", n_iterations=2)),
        ]:
            if name == "leiden" and importlib.util.find_spec("igraph") is None:
                say("leiden not run (igraph not installed)", 0.0)
                continue
            t = time.perf_counter()
            run()
            say(name, time.perf_counter() - t)

    t = time.perf_counter()
    flow(cells(emb[:10000].copy()), lambda *_: None)
    print(f"numba compilation on 10,000 cells: {time.perf_counter() - t:.1f} s (untimed)", flush=True)

    start = time.perf_counter()
    a = cells(emb)

    def say(name, s):
        print(f"{name}: {s:.1f} s (scanpy's share so far {time.perf_counter() - start:.1f} s)", flush=True)

    flow(a, say)
    print(f"scanpy's share, done: {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
