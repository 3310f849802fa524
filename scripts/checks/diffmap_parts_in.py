#!/usr/bin/env python3
"""Where a diffmap call's time goes between Python and the extension, on the CPU: N cells with a
random symmetric graph of 15 neighbours a cell (as `obsp['connectivities']`), then
`scpipe.tl.diffmap(a, n_comps=4)` with `settings.progress` on, which prints the extension's own
split (parts in, step, results out) on standard error.

Usage: .venv/bin/python scripts/checks/diffmap_parts_in.py [N]   (default 300000)
"""

from __future__ import annotations

import sys
import time

import anndata as ad
import numpy as np
import scipy.sparse as sp

import scpipe


def main() -> int:
    n, k = (int(sys.argv[1]) if len(sys.argv) > 1 else 300_000), 15
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(n), k)
    cols = rng.integers(0, n, n * k)
    g = sp.csr_matrix((rng.random(n * k).astype(np.float32), (rows, cols)), shape=(n, n))
    g = (g + g.T).tocsr()
    g.sum_duplicates()
    g.sort_indices()
    a = ad.AnnData(np.zeros((n, 1), np.float32))
    a.obsp["connectivities"] = g
    a.obsp["distances"] = g
    a.uns["neighbors"] = {
        "connectivities_key": "connectivities",
        "distances_key": "distances",
        "params": {"n_neighbors": k, "method": "umap"},
    }
    print(f"{n} cells, {g.nnz} stored values", flush=True)
    scpipe.settings.progress = True
    scpipe.settings.device = "cpu"
    t = time.perf_counter()
    scpipe.tl.diffmap(a, n_comps=4)
    print(f"diffmap {time.perf_counter() - t:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
