#!/usr/bin/env python3
"""Issue 53's host functions against scanpy 1.11+ / scikit-learn / igraph, on the CPU, in one
process, on the real datasets: for each, the gate's figure (deterministic outputs: the largest
difference; stochastic ones: trustworthiness, modularity, mean inertia over 20 seeds) and the
seconds of ours and of the reference.

Usage: .venv/bin/python scripts/checks/tools_vs_scanpy.py [DATA_DIR]   (default ../shared/data)
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

FILES = [
    "pbmc68k_reduced.h5ad",
    "celltypist_sample_559x32786_counts.h5ad",
    "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
]


def with_pca(data: Path, name: str):
    """The dataset with scanpy's normalize, log1p, PCA and neighbors (pbmc68k_reduced has
    its own)."""
    import anndata as ad
    import scanpy as sc

    a = ad.read_h5ad(data / name)
    if "X_pca" not in a.obsm:
        sc.pp.normalize_total(a)
        sc.pp.log1p(a)
        sc.pp.pca(a)
        sc.pp.neighbors(a)
    return a


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def main() -> int:
    import igraph as ig
    import numpy as np
    import scanpy as sc
    from sklearn.cluster import KMeans
    from sklearn.manifold import trustworthiness

    import scpipe

    warnings.filterwarnings("ignore")
    scpipe.settings.device = "cpu"
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3] / "shared" / "data"
    print(f"scanpy {sc.__version__}; times in seconds, ours / reference")
    for name in FILES:
        a = with_pca(data, name)
        print(f"\n{name}: {a.n_obs} cells")
        x = a.obsm["X_pca"]
        o, t = a.copy(), a.copy()
        to, _ = timed(lambda: scpipe.tl.tsne(o))
        ts, _ = timed(lambda: sc.tl.tsne(t))
        tw = [(trustworthiness(x, o.obsm["X_tsne"], n_neighbors=k), trustworthiness(x, t.obsm["X_tsne"], n_neighbors=k)) for k in (5, 15, 30)]
        print(f"  tsne trustworthiness 5/15/30: " + ", ".join(f"{p:.4f} vs {q:.4f}" for p, q in tw) + f"  ({to:.2f} / {ts:.2f})")
        o, t = a.copy(), a.copy()
        to, _ = timed(lambda: scpipe.tl.diffmap(o))
        ts, _ = timed(lambda: sc.tl.diffmap(t))
        comp = max(
            np.abs(np.sign((o.obsm["X_diffmap"][:, c].astype(float) * t.obsm["X_diffmap"][:, c]).sum()) * o.obsm["X_diffmap"][:, c] - t.obsm["X_diffmap"][:, c]).max()
            / np.abs(t.obsm["X_diffmap"][:, c]).max()
            for c in range(15)
        )
        print(f"  diffmap: eigenvalues within {np.abs(o.uns['diffmap_evals'] - t.uns['diffmap_evals']).max():.1e}, components within {comp:.1e} of their largest  ({to:.3f} / {ts:.3f})")
        o.uns["iroot"] = t.uns["iroot"] = 7
        scpipe.tl.dpt(o)
        sc.tl.dpt(t)
        print(f"  dpt: pseudotime within {np.abs(o.obs['dpt_pseudotime'].to_numpy() - t.obs['dpt_pseudotime'].to_numpy()).max():.1e}")
        g = a.obsp["connectivities"].tocoo()
        keep = g.row < g.col
        graph = ig.Graph(n=a.n_obs, edges=list(zip(g.row[keep].tolist(), g.col[keep].tolist())))
        for weighted in (False, True):
            w = g.data[keep].astype(float) if weighted else None
            o = a.copy()
            to, _ = timed(lambda: scpipe.tl.louvain(o, use_weights=weighted))
            ts, parts = timed(lambda: [graph.community_multilevel(weights=w) for _ in range(3)])
            ours = graph.modularity(o.obs["louvain"].astype(int).tolist(), weights=w)
            print(f"  louvain ({'weighted' if weighted else 'unweighted'}): modularity {ours:.4f} vs igraph multilevel {max(p.modularity for p in parts):.4f}  ({to:.3f} / {ts / 3:.3f})")
        ours, theirs = [], []
        for seed in range(20):
            o = a.copy()
            scpipe.tl.kmeans(o, random_state=seed)
            ours.append(o.uns["kmeans"]["inertia"])
            theirs.append(KMeans(n_clusters=8, n_init=1, random_state=seed).fit(x[:, :50]).inertia_)
        print(f"  kmeans (k=8, 20 seeds): mean inertia {np.mean(ours) / np.mean(theirs):.4f} x scikit-learn's")
        key = "louvain" if "louvain" in a.obs else None
        if key is None:
            sc.tl.leiden(a, flavor="igraph", n_iterations=2, directed=False, random_state=0)
            key = "leiden"
        o, t = a.copy(), a.copy()
        scpipe.tl.paga(o, groups=key)
        sc.tl.paga(t, groups=key)
        print(f"  paga: connectivities within {np.abs(o.uns['paga']['connectivities'].toarray() - t.uns['paga']['connectivities'].toarray()).max():.1e}")
        if "X_umap" in a.obsm:
            o, t = a.copy(), a.copy()
            scpipe.tl.embedding_density(o, groupby=key)
            sc.tl.embedding_density(t, groupby=key)
            col = f"umap_density_{key}"
            print(f"  embedding_density: within {np.abs(o.obs[col].to_numpy() - t.obs[col].to_numpy()).max():.1e}")
        o, t = a.copy(), a.copy()
        scpipe.tl.dendrogram(o, key)
        sc.tl.dendrogram(t, key)
        d = f"dendrogram_{key}"
        same = o.uns[d]["categories_ordered"] == t.uns[d]["categories_ordered"]
        print(f"  dendrogram: same order {same}, linkage within {np.abs(o.uns[d]['linkage'] - t.uns[d]['linkage']).max():.1e}")
        o = sc.get.aggregate(a, key, ["sum", "mean", "var", "count_nonzero", "median"])
        p = scpipe.get.aggregate(a, key, ["sum", "mean", "var", "count_nonzero", "median"])
        worst = {f: float(np.abs(np.asarray(p.layers[f], dtype=float) - np.asarray(o.layers[f], dtype=float)).max()) for f in o.layers}
        print("  aggregate: " + ", ".join(f"{f} within {v:.1e}" for f, v in worst.items()))
        batch = next((c for c in ("batch", "phase") if c in a.obs), None)
        if batch is not None:
            o, t = a.copy(), a.copy()
            to, _ = timed(lambda: scpipe.pp.combat(o, batch))
            ts, _ = timed(lambda: sc.pp.combat(t, batch))
            print(f"  combat by {batch}: within {np.abs(np.asarray(o.X, float) - np.asarray(t.X)).max():.1e}  ({to:.3f} / {ts:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
