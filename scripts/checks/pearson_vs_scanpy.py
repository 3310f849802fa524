#!/usr/bin/env python3
"""scpipe.pp.normalize_pearson_residuals against scanpy's (experimental.pp) on the CPU, in one
process: time and the largest difference, on generated counts (N cells x 2,000 genes, about 10%
stored, every cell and gene with counts), each call once after a small warm-up.

Usage: .venv/bin/python scripts/checks/pearson_vs_scanpy.py [N]   (default 100000)
"""

from __future__ import annotations

import sys
import time
import warnings


def main() -> int:
    import anndata as ad
    import numpy as np
    import scanpy as sc
    import scipy.sparse as sp

    import scpipe

    warnings.filterwarnings("ignore")
    scpipe.settings.device = "cpu"
    n, g = (int(sys.argv[1]) if len(sys.argv) > 1 else 100_000), 2000
    x = sp.random(n, g, density=0.1, format="csr", dtype=np.float32, random_state=0)
    x.data = np.ceil(x.data * 10).astype(np.float32)
    small = ad.AnnData(x[:1000].copy())
    sc.pp.filter_genes(small, min_counts=1)
    scpipe.pp.normalize_pearson_residuals(small.copy())
    sc.experimental.pp.normalize_pearson_residuals(small.copy())
    ours, theirs = ad.AnnData(x.copy()), ad.AnnData(x.copy())
    t = time.perf_counter()
    scpipe.pp.normalize_pearson_residuals(ours)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    sc.experimental.pp.normalize_pearson_residuals(theirs)
    t_theirs = time.perf_counter() - t
    diff = np.abs(np.asarray(ours.X, dtype=np.float64) - np.asarray(theirs.X))
    rel = float((diff / np.maximum(np.abs(np.asarray(theirs.X, dtype=np.float64)), 1.0)).max())
    print(
        f"{n} x {g}: scpipe {t_ours:.2f} s, scanpy {sc.__version__} {t_theirs:.2f} s "
        f"({t_theirs / t_ours:.1f}x), largest difference {float(diff.max()):.2e} "
        f"({rel:.2e} relative to max(|value|, 1))",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
