"""scpipe.tl.ingest against scanpy 1.12's tl.ingest on the real datasets (issue 53), one process,
split as `rmm-python/tests/test_scpipe_ingest.py` splits them: pbmc68k_reduced and celltypist
at random (65% reference), the scvi sample by batch (its second batch ingested into the first);
counts normalized and logged. Prints each one's
times, the PCA's largest difference (relative), the labels' agreement, the UMAP's
trustworthiness (ours, scanpy's) and median distance from scanpy's mapped cells (share of the
layout's span).
    .venv/bin/python scripts/checks/ingest_vs_scanpy.py [DATA_DIR]"""
import os, sys, time, warnings
from pathlib import Path

import numpy as np
import scanpy as sc
from sklearn.manifold import trustworthiness

import scpipe

warnings.filterwarnings("ignore")
if len(sys.argv) > 1:
    os.environ["SCPIPE_DATA"] = sys.argv[1]
# The datasets split as the tests split them.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rmm-python" / "tests"))
from test_scpipe_ingest import DATASETS, scanpy_ingest, split  # noqa: E402

scpipe.settings.device = "cpu"
for name in DATASETS:
    ref, new = split(name)
    labels = ["leiden"] + (["louvain", "bulk_labels"] if "louvain" in ref.obs else [])
    ours, theirs = new.copy(), new.copy()
    t = time.perf_counter(); scanpy_ingest(theirs, ref, obs=labels); ts = time.perf_counter() - t
    t = time.perf_counter(); scpipe.tl.ingest(ours, ref, obs=labels); to = time.perf_counter() - t
    p, q = ours.obsm["X_pca"], theirs.obsm["X_pca"]
    agree = {c: round(float((ours.obs[c].astype(str) == theirs.obs[c].astype(str)).mean()), 4) for c in labels}
    u, v = ours.obsm["X_umap"], theirs.obsm["X_umap"]
    span = np.ptp(ref.obsm["X_umap"], axis=0).max()
    print(
        f"{name}: {ref.n_obs} reference, {new.n_obs} new cells; scanpy {ts:.2f} s, scpipe {to:.3f} s; "
        f"PCA {np.abs(p - q).max() / np.abs(q).max():.1e}; labels {agree}; UMAP trustworthiness "
        f"{trustworthiness(p, u, n_neighbors=15):.4f} vs {trustworthiness(q, v, n_neighbors=15):.4f}, "
        f"median distance {np.median(np.linalg.norm(u - v, axis=1)) / span:.4f} of the span"
    )
