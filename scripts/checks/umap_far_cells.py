"""UMAP's farthest cell beside umap-learn's on the same graph (issue 50's gate).

For each scpipe output given (an h5ad with obsp['connectivities'] and obsm['X_umap'], or the
`NAME_gpu.npz` of scripts/device/tests/umap_layouts.sh: a GPU run's graph, PCs and layout): the
farthest cell from the layout's median in units of its 99th-percentile distance, for scpipe's
layout and for umap-learn's (through scanpy's `tl.umap`, seed 0, the same graph), the highest
degrees of the graph, and trustworthiness (k 15, on X_pca, on a sample of 5,000 cells at most).

    .venv/bin/python scripts/checks/umap_far_cells.py OUT.h5ad|RUN_gpu.npz [...]

umap-learn runs on one thread (scanpy passes a random state, which turns numba's parallel loops
off); its time is the whole `sc.tl.umap` call after a first call that compiled it.
"""

import sys
import time
from pathlib import Path

import anndata as ad
import numpy as np
import scanpy as sc
import scipy.sparse as sp
from sklearn.manifold import trustworthiness

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
from graph_metrics import far_cell_ratio  # noqa: E402


def sample_trust(x, y, n=5000):
    idx = np.random.default_rng(0).permutation(len(x))[:n]
    return trustworthiness(x[idx], y[idx], n_neighbors=15)


def load(path):
    if not path.endswith(".npz"):
        return ad.read_h5ad(path)
    z = np.load(path)
    n = len(z["x_umap"])
    a = ad.AnnData(obs={"cell": np.arange(n).astype(str)})
    a.obsp["connectivities"] = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(n, n))
    a.obsm["X_pca"], a.obsm["X_umap"] = z["x_pca"], z["x_umap"]
    a.uns["neighbors"] = {"connectivities_key": "connectivities", "distances_key": "distances",
                          "params": {"n_neighbors": 15, "method": "umap", "use_rep": "X_pca"}}
    return a


# numba compiles umap-learn's epochs on the first call: timed apart on a small graph.
warm = ad.AnnData(np.random.default_rng(0).normal(size=(300, 10)).astype(np.float32))
sc.pp.neighbors(warm, use_rep="X")
t = time.perf_counter()
sc.tl.umap(warm, random_state=0)
print(f"umap-learn's first call (numba's compile) on 300 cells: {time.perf_counter() - t:.1f} s", flush=True)

for path in sys.argv[1:]:
    ours = load(path)
    theirs = ours.copy()
    t = time.perf_counter()
    sc.tl.umap(theirs, random_state=0)
    t_theirs = time.perf_counter() - t
    deg = np.diff(ours.obsp["connectivities"].tocsr().indptr)
    x = np.asarray(ours.obsm["X_pca"], dtype=np.float64)
    print(
        f"{path}: {ours.n_obs} cells, degree median {int(np.median(deg))} max {deg.max()}; "
        f"farthest cell ours {far_cell_ratio(ours.obsm['X_umap']):.2f} vs umap-learn "
        f"{far_cell_ratio(theirs.obsm['X_umap']):.2f}; trustworthiness ours "
        f"{sample_trust(x, ours.obsm['X_umap']):.4f} vs {sample_trust(x, theirs.obsm['X_umap']):.4f}; "
        f"umap-learn {t_theirs:.1f} s",
        flush=True,
    )
