#!/usr/bin/env python3
"""Issue 53's tools at N cells, scpipe's (tsne, louvain, embedding_density and the Pearson
residuals on the GPU, the others on the host for now) beside rapids-singlecell's where it has
them and its backends import (cuML, cuGraph, CuPy), in one process each: seconds per call,
warm (the second of two calls). The cells: N points of 30 dimensions in 12 Gaussian groups as
`obsm['X_pca']`, with scpipe's kNN graph (15 neighbours), a categorical `group` column, 4
batches and X: N x 2,000 whole counts (5% stored, 1 to 5).

pearson_residuals and hvg_pearson read X from the GPU in both libraries (scpipe's from a copy
made by `scpipe.get.anndata_to_GPU` before the timers, as rapids-singlecell's).

Usage: python3 scripts/device/benchmarks/tools_side_by_side.py {scpipe|rsc} N [FUNCS]
(FUNCS: comma-separated of aggregate, embedding_density, diffmap, louvain, kmeans, tsne,
score_genes, pearson_residuals, hvg_pearson, bbknn, logreg, draw_graph; default all but tsne and
draw_graph above 200,000 cells). Prints one line per function. With PROFILE=1 the warm call
runs under cProfile, and its 15 largest cumulative times follow the function's line (for
scpipe with `settings.progress` on: the extension's own split of the call, on standard error).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time
import warnings


def cells(n: int):
    import anndata as ad
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    group = rng.integers(0, 12, n)
    centres = rng.normal(0, 6, size=(12, 30))
    x = (centres[group] + rng.normal(0, 1, size=(n, 30))).astype(np.float32)
    counts = sp.random(n, 2000, density=0.05, format="csr", random_state=1, dtype=np.float32)
    counts.data = np.ceil(counts.data * 5)
    obs = pd.DataFrame(
        {"group": pd.Categorical(group.astype(str)), "batch": pd.Categorical((np.arange(n) % 4).astype(str))},
        index=[str(i) for i in range(n)],
    )
    a = ad.AnnData(counts, obs=obs)
    a.obsm["X_pca"] = x
    a.obsm["X_umap"] = x[:, :2].copy()
    return a


def main() -> int:
    warnings.filterwarnings("ignore")
    lib, n = sys.argv[1], int(sys.argv[2])
    default = "aggregate,embedding_density,diffmap,louvain,kmeans,score_genes,pearson_residuals,hvg_pearson,bbknn,logreg"
    default += ",tsne,draw_graph" if n <= 200_000 else ""
    funcs = (sys.argv[3] if len(sys.argv) > 3 else default).split(",")
    import scpipe

    a = cells(n)
    genes = list(a.var_names[::40])  # 50 genes to score
    t = time.perf_counter()
    scpipe.pp.neighbors(a)
    print(f"{lib}: {n} cells; scpipe.pp.neighbors {time.perf_counter() - t:.2f} s", flush=True)
    if lib == "scpipe":
        calls = {
            "aggregate": lambda b: scpipe.get.aggregate(b, "group", ["sum", "mean", "var", "count_nonzero"]),
            "embedding_density": lambda b: scpipe.tl.embedding_density(b, groupby="group"),
            "diffmap": lambda b: scpipe.tl.diffmap(b),
            "louvain": lambda b: scpipe.tl.louvain(b, use_weights=True),
            "kmeans": lambda b: scpipe.tl.kmeans(b, n_clusters=12, n_pcs=30),
            "tsne": lambda b: scpipe.tl.tsne(b, n_pcs=30),
            "score_genes": lambda b: scpipe.tl.score_genes(b, genes),
            "pearson_residuals": lambda b: scpipe.pp.normalize_pearson_residuals(b),
            "hvg_pearson": lambda b: scpipe.pp.highly_variable_genes(b, flavor="pearson_residuals", n_top_genes=500),
            "bbknn": lambda b: scpipe.pp.bbknn(b, batch_key="batch"),
            "logreg": lambda b: scpipe.tl.rank_genes_groups(b, "group", method="logreg"),
            "draw_graph": lambda b: scpipe.tl.draw_graph(b),
        }
    else:
        sys.path.insert(0, ".rsc-bench")
        import rapids_stubs  # cuML and the other RAPIDS modules rsc imports at its top

        rapids_stubs.install()
        import rapids_singlecell as rsc

        rsc.get.anndata_to_GPU(a)
        calls = {
            "aggregate": lambda b: rsc.get.aggregate(b, "group", ["sum", "mean", "var", "count_nonzero"]),
            "embedding_density": lambda b: rsc.tl.embedding_density(b, groupby="group"),
            "diffmap": lambda b: rsc.tl.diffmap(b),
            "louvain": lambda b: rsc.tl.louvain(b),
            "kmeans": lambda b: rsc.tl.kmeans(b, n_clusters=12, n_pcs=30),
            "tsne": lambda b: rsc.tl.tsne(b, n_pcs=30),
            "score_genes": lambda b: rsc.tl.score_genes(b, genes),
            "pearson_residuals": lambda b: rsc.pp.normalize_pearson_residuals(b),
            "hvg_pearson": lambda b: rsc.pp.highly_variable_genes(b, flavor="pearson_residuals", n_top_genes=500),
            "bbknn": lambda b: rsc.pp.bbknn(b, batch_key="batch"),
            "logreg": lambda b: rsc.tl.rank_genes_groups_logreg(b, "group"),
            "draw_graph": lambda b: rsc.tl.draw_graph(b),
        }
    # The functions that work on X read it where rapids-singlecell reads it: on the GPU.
    on_gpu = {"pearson_residuals", "hvg_pearson", "score_genes", "aggregate"}
    if lib == "scpipe" and on_gpu & set(funcs):
        ag = a.copy()
        scpipe.get.anndata_to_GPU(ag)
    for f in funcs:
        try:
            seconds, profile = [], None
            for i in range(2):
                b = ag.copy() if lib == "scpipe" and f in on_gpu else a.copy()
                if i == 1 and os.environ.get("PROFILE") == "1":
                    profile = cProfile.Profile()
                    profile.enable()
                    if lib == "scpipe":  # the extension's parts in, step, results out
                        scpipe.settings.progress = True
                t = time.perf_counter()
                calls[f](b)
                seconds.append(time.perf_counter() - t)
                if profile:
                    profile.disable()
            print(f"{lib} {f}: first {seconds[0]:.3f} s, warm {seconds[1]:.3f} s", flush=True)
            if profile:
                pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(15)
        except Exception as e:  # a backend rapids-singlecell needs (cuML, cuGraph) may be missing
            print(f"{lib} {f}: not run ({type(e).__name__}: {str(e)[:120]})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
