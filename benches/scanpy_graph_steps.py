"""scanpy's umap, leiden and rank_genes_groups on a file `scpipe run` wrote (its graph, `.raw`
and leiden labels), timed as `benches/graph_steps.rs` times ours: one JSON line a step.
NUMBA_NUM_THREADS and OMP_NUM_THREADS set the cores (umap-learn runs single-threaded with a
random_state, as scanpy passes one).

python benches/scanpy_graph_steps.py FILE.h5ad [--skip umap,leiden,...]
"""

import json
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import anndata as ad  # noqa: E402
import scanpy as sc  # noqa: E402

path = sys.argv[1]
skip = sys.argv[sys.argv.index("--skip") + 1].split(",") if "--skip" in sys.argv else []
a = ad.read_h5ad(path)
threads = __import__("os").environ.get("NUMBA_NUM_THREADS", "all")


def report(step, seconds, note=""):
    print(json.dumps({"step": step, "device": "scanpy", "threads": threads, "seconds": seconds, "cells": a.n_obs, "note": note}), flush=True)


if "umap" not in skip:
    t = time.perf_counter()
    sc.tl.umap(a, random_state=0)
    report("umap", time.perf_counter() - t, "umap-learn (first call includes numba's compilation)")
if "leiden" not in skip:
    t = time.perf_counter()
    sc.tl.leiden(a, flavor="leidenalg", key_added="ref_leidenalg")
    report("leiden", time.perf_counter() - t, "leidenalg, n_iterations=-1")
    t = time.perf_counter()
    sc.tl.leiden(a, flavor="igraph", n_iterations=2, directed=False, key_added="ref_igraph")
    report("leiden", time.perf_counter() - t, "igraph, n_iterations=2")
if "markers" not in skip:
    t = time.perf_counter()
    sc.tl.rank_genes_groups(a, groupby="leiden", method="wilcoxon", tie_correct=True, n_genes=100)
    report("rank_genes_groups", time.perf_counter() - t, "wilcoxon, tie_correct")
