#!/usr/bin/env python3
"""tl.draw_graph (ForceAtlas2, scanpy's defaults: 500 iterations) at N generated cells (issue 53):
12 Gaussian clusters in 50 dimensions as X_pca (draw_graph_vs_scanpy.py's blobs) and their
neighbors graph (scpipe's, 15 neighbours), made once a machine and kept in
/tmp/draw_graph_cells_N.npz so every library lays out the same graph. One library (and device)
per process: `scpipe-gpu`, `scpipe-cpu` (settings.device) or `scanpy` (fa2-modified). Prints
each call's seconds (CALLS, default 2: the first and a warm one) and the layout's
trustworthiness (scikit-learn's, 15 neighbours, on X_pca of 5,000 sampled cells); with OUT, the
layout as OUT/draw_graph_<lib>_<N>.png, coloured by cluster.
    python3 scripts/device/benchmarks/draw_graph_side_by_side.py {scpipe-gpu|scpipe-cpu|scanpy} N"""
import os, sys, time, warnings
import numpy as np

warnings.filterwarnings("ignore")
lib, n = sys.argv[1], int(sys.argv[2])


def cells(n):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    path = f"/tmp/draw_graph_cells_{n}.npz"
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(12, 50))
    label = rng.integers(12, size=n)
    pcs = (centres[label] + rng.normal(size=(n, 50))).astype(np.float32)
    a = ad.AnnData(sp.csr_matrix((n, 1), dtype=np.float32))
    a.obsm["X_pca"] = pcs
    a.obs["group"] = pd.Categorical(label.astype(str))
    try:
        a.obsp["connectivities"] = sp.load_npz(path)
        a.obsp["distances"] = sp.load_npz(path + ".distances.npz")
    except FileNotFoundError:
        import scpipe

        scpipe.settings.device = "gpu" if lib != "scpipe-cpu" else "cpu"
        scpipe.pp.neighbors(a, use_rep="X_pca")
        sp.save_npz(path, a.obsp["connectivities"].tocsr(), compressed=False)
        sp.save_npz(path + ".distances.npz", a.obsp["distances"].tocsr(), compressed=False)
    a.uns["neighbors"] = {
        "connectivities_key": "connectivities",
        "distances_key": "distances",
        "params": {"n_neighbors": 15, "method": "umap", "metric": "euclidean", "use_rep": "X_pca"},
    }
    return a


a = cells(n)
if lib.startswith("scpipe"):
    import scpipe

    scpipe.settings.device = lib.split("-")[1]
    call = lambda b: scpipe.tl.draw_graph(b)
else:
    import scanpy as sc

    call = lambda b: sc.tl.draw_graph(b)
times = []
for _ in range(int(os.environ.get("CALLS", "2"))):
    b = a.copy()
    t = time.perf_counter()
    call(b)
    times.append(time.perf_counter() - t)
xy = b.obsm["X_draw_graph_fa"]
from sklearn.manifold import trustworthiness

sample = np.random.default_rng(1).choice(n, min(n, 5000), replace=False)
trust = trustworthiness(a.obsm["X_pca"][sample], xy[sample], n_neighbors=15)
print(f"{lib} {n} cells: " + " / ".join(f"{t:.2f}" for t in times) + f" s, trustworthiness {trust:.4f}, "
      f"finite {bool(np.isfinite(xy).all())}", flush=True)
out = os.environ.get("OUT")
if out:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 7))
    ax.scatter(xy[:, 0], xy[:, 1], c=a.obs["group"].cat.codes, s=max(0.05, min(4, 20000 / n)), cmap="tab20",
               rasterized=True, linewidths=0)
    ax.set_title(f"{lib}: draw_graph, {n:,} blobs cells")
    ax.set_xticks([])
    ax.set_yticks([])
    fig.savefig(f"{out}/draw_graph_{lib}_{n}.png", dpi=80)
