"""rank_genes_groups(method='logreg') on more cells than the cells' form takes (issue 53): the
celltypist sample repeated REPS times, each stored value jittered by a factor in 0.8-1.2 (seed
0), its clusters as in `rmm-python/tests/test_scpipe_logreg.py`; one call of scpipe's and one
of scanpy's, timed.
    .venv/bin/python scripts/checks/logreg_many_cells.py REPS [both|ours|scanpy] [DATA_DIR]"""
import os, sys, time, warnings
from pathlib import Path

import anndata as ad
import numpy as np
import scanpy as sc
import scipy.sparse as sp

import scpipe

warnings.filterwarnings("ignore")
reps = int(sys.argv[1])
which = sys.argv[2] if len(sys.argv) > 2 else "both"
if len(sys.argv) > 3:
    os.environ["SCPIPE_DATA"] = sys.argv[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rmm-python" / "tests"))
from test_scpipe_logreg import clustered  # noqa: E402

scpipe.settings.device = "cpu"
a, key = clustered("celltypist_sample_559x32786_counts.h5ad")
x = a.X.tocsr()
rng = np.random.default_rng(0)
blocks = []
for _ in range(reps):
    y = x.copy()
    y.data = (y.data * rng.uniform(0.8, 1.2, size=y.data.size)).astype(np.float32)
    blocks.append(y)
obs = a.obs.iloc[np.tile(np.arange(a.n_obs), reps)].reset_index(drop=True)
big = ad.AnnData(sp.vstack(blocks).tocsr(), obs=obs, var=a.var)
print(f"{big.n_obs} cells x {big.n_vars} genes, {big.X.nnz} stored", flush=True)
if which in ("both", "ours"):
    t = time.perf_counter()
    scpipe.tl.rank_genes_groups(big, key, method="logreg")
    print(f"scpipe {time.perf_counter() - t:.2f} s", flush=True)
if which in ("both", "scanpy"):
    b = big.copy()
    t = time.perf_counter()
    sc.tl.rank_genes_groups(b, key, method="logreg")
    print(f"scanpy {time.perf_counter() - t:.2f} s", flush=True)
if which == "both":
    ours, theirs = big.uns["rank_genes_groups"]["names"], b.uns["rank_genes_groups"]["names"]
    shared = [len(set(ours[g][:25]) & set(theirs[g][:25])) / 25 for g in ours.dtype.names]
    print(f"each group's top 25 shared with scanpy's: {np.mean(shared):.0%} on average", flush=True)
