"""scpipe.tl.rank_genes_groups(method='logreg') against scanpy's on the real datasets (issue 53),
set up as `rmm-python/tests/test_scpipe_logreg.py` sets them up (normalized, logged, PCA,
neighbors, clusters). Prints each one's shape, the two times (a warm call each), and how far
our coefficients are from scikit-learn's fit run to convergence in float64 (largest difference
as a share of the largest coefficient), and the top-25 overlap with scanpy's markers.
    .venv/bin/python scripts/checks/logreg_vs_scanpy.py [DATA_DIR]"""
import os, sys, time, warnings
from pathlib import Path

import numpy as np
import scanpy as sc
from sklearn.linear_model import LogisticRegression

import scpipe

warnings.filterwarnings("ignore")
if len(sys.argv) > 1:
    os.environ["SCPIPE_DATA"] = sys.argv[1]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rmm-python" / "tests"))
from test_scpipe_clustering import DATASETS  # noqa: E402
from test_scpipe_logreg import clustered  # noqa: E402

scpipe.settings.device = "cpu"


def timed(f, a, key):
    f(a.copy(), key, method="logreg")  # warm: imports, first calls
    b = a.copy()
    t = time.perf_counter()
    f(b, key, method="logreg")
    return time.perf_counter() - t, b.uns["rank_genes_groups"]


for name in DATASETS:
    a, key = clustered(name)
    to, r = timed(scpipe.tl.rank_genes_groups, a, key)
    ts, t = timed(sc.tl.rank_genes_groups, a, key)
    x = a.raw.X if a.raw is not None else a.X
    model = LogisticRegression(max_iter=10_000, tol=1e-10).fit(x.astype(np.float64), a.obs[key].cat.codes)
    genes = list(a.raw.var_names if a.raw is not None else a.var_names)
    scale = np.abs(model.coef_).max()
    worst, overlap = 0.0, []
    for k, group in enumerate(r["names"].dtype.names):
        ranked = dict(zip(r["names"][group], r["scores"][group].astype(np.float64)))
        worst = max(worst, max(abs(ranked[g] - c) for g, c in zip(genes, model.coef_[k])))
        overlap.append(len(set(r["names"][group][:25]) & set(t["names"][group][:25])) / 25)
    print(
        f"{name}: {a.n_obs} cells x {len(genes)} genes, {len(r['names'].dtype.names)} groups; "
        f"scpipe {to:.3f} s, scanpy {ts:.3f} s; coefficients {worst / scale:.1e} of the largest "
        f"from scikit-learn's converged fit; top-25 overlap with scanpy {np.mean(overlap):.3f}",
        flush=True,
    )
