#!/usr/bin/env python3
"""scpipe.pp.regress_out against scanpy's on the CPU, in one process: time and the largest
difference, on generated log-normalized data (N cells x 2,000 genes, 10% stored) with two
continuous covariates and one categorical (8 categories); scanpy with n_jobs = the cores.

Usage: .venv/bin/python scripts/checks/regress_out_vs_scanpy.py [N]   (default 100000)
"""

from __future__ import annotations

import os
import sys
import time
import warnings


def main() -> int:
    import anndata as ad
    import numpy as np
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp

    import scpipe

    warnings.filterwarnings("ignore")
    scpipe.settings.device = "cpu"
    # Every core for both (scpipe uses them all; scanpy's GLM path runs n_jobs processes).
    sc.settings.n_jobs = os.cpu_count()
    n, g = (int(sys.argv[1]) if len(sys.argv) > 1 else 100_000), 2000
    rng = np.random.default_rng(0)
    x = sp.random(n, g, density=0.1, format="csr", dtype=np.float32, random_state=0)
    x.data = np.log1p(x.data * 10).astype(np.float32)
    obs = pd.DataFrame(
        {
            "total": rng.random(n) * 1e4,
            "pct": rng.random(n) * 10,
            "cat": pd.Categorical(rng.integers(0, 8, n).astype(str)),
        },
        index=[str(i) for i in range(n)],
    )
    for keys in (["total", "pct"], "cat"):
        ours = ad.AnnData(x.copy(), obs=obs.copy())
        t = time.perf_counter()
        scpipe.pp.regress_out(ours, keys)
        t_ours = time.perf_counter() - t
        theirs = ad.AnnData(x.copy(), obs=obs.copy())
        t = time.perf_counter()
        sc.pp.regress_out(theirs, keys)
        t_theirs = time.perf_counter() - t
        diff = float(np.abs(np.asarray(ours.X, dtype=np.float64) - np.asarray(theirs.X)).max())
        print(
            f"{n} x {g}, keys {keys!r}: scpipe {t_ours:.2f} s, scanpy {sc.__version__} "
            f"{t_theirs:.2f} s ({t_theirs / t_ours:.1f}x), largest difference {diff:.2e}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
