"""Issue 29's first gate: UMAP and Leiden from the inverted file's graph within issue 28's quality
gates of the same steps on the exact graph, on one scpipe output each (the same cells).

Usage (on the GPU machine; h5py, numpy, scipy and scikit-learn):
  python3 scripts/device/tests/ivf_quality.py EXACT.h5ad IVF.h5ad EXACT_SEED1.h5ad [MORE_IVF.h5ad ...] [SAMPLE]
EXACT_SEED1 is the exact run with --random-state 1 (Leiden's own agreement between two seeds).
Every IVF file (other inverted-file runs of the same cells) is checked against the exact run.
Trustworthiness and silhouettes are measured on SAMPLE cells (default 20,000, seeded), the
modularities on the exact run's whole graph. Prints PASS/FAIL lines; exits 1 on a failure.
"""

import os
import sys

import h5py
import numpy as np
import scipy.sparse as sp
from sklearn.manifold import trustworthiness
from sklearn.metrics import adjusted_rand_score, silhouette_score

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "conformance"))
from graph_metrics import modularity  # noqa: E402


def read(path: str) -> dict:
    with h5py.File(path, "r") as f:
        g = f["obsp/connectivities"]
        n = f["obsm/X_pca"].shape[0]
        return {
            "pca": f["obsm/X_pca"][:],
            "umap": f["obsm/X_umap"][:],
            "leiden": f["obs/leiden/codes"][:],
            "graph": sp.csr_matrix((g["data"][:], g["indices"][:], g["indptr"][:]), shape=(n, n)),
        }


def main(argv: list[str]) -> int:
    files = [a for a in argv if not a.isdigit()]
    sizes = [int(a) for a in argv if a.isdigit()]
    exact, seed1 = read(files[0]), read(files[2])
    m = sizes[0] if sizes else 20_000
    n = exact["pca"].shape[0]
    cells = np.sort(np.random.default_rng(0).choice(n, size=min(m, n), replace=False))
    x = exact["pca"][cells]
    t_exact = trustworthiness(x, exact["umap"][cells], n_neighbors=15)
    labels = exact["leiden"][cells]
    s_exact = silhouette_score(exact["umap"][cells], labels)
    q_exact = modularity(exact["graph"], exact["leiden"])
    seeds = adjusted_rand_score(exact["leiden"], seed1["leiden"])
    clusters = lambda r: len(np.unique(r["leiden"]))  # noqa: E731
    print(f"exact: {clusters(exact)} clusters (seed 1: {clusters(seed1)}), "
          f"seed agreement (ARI) {seeds:.3f}")
    failed = 0
    for path in [files[1]] + files[3:]:
        print(f"== {path}")
        failed += check_one(read(path), exact, cells, (t_exact, s_exact, q_exact, seeds))
    return 1 if failed else 0


def check_one(ivf: dict, exact: dict, cells: np.ndarray, ref: tuple) -> int:
    t_exact, s_exact, q_exact, seeds = ref
    failed = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal failed
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({detail})", flush=True)

    x = exact["pca"][cells]
    t_ivf = trustworthiness(x, ivf["umap"][cells], n_neighbors=15)
    check("umap trustworthiness (ivf graph) >= exact graph's - 0.01", t_ivf >= t_exact - 0.01,
          f"{t_ivf:.4f} vs {t_exact:.4f} on {len(cells)} cells")
    labels = exact["leiden"][cells]
    s_ivf = silhouette_score(ivf["umap"][cells], labels)
    check("umap silhouette of the exact run's leiden within 0.05", abs(s_ivf - s_exact) <= 0.05,
          f"{s_ivf:.4f} vs {s_exact:.4f}")
    q_ivf = modularity(exact["graph"], ivf["leiden"])
    check("leiden (ivf graph) modularity on the exact graph >= exact's - 0.005",
          q_ivf >= q_exact - 0.005, f"{q_ivf:.4f} vs {q_exact:.4f}")
    ari = adjusted_rand_score(exact["leiden"], ivf["leiden"])
    check("leiden ARI (ivf vs exact graph) >= the exact graph's seed agreement - 0.05",
          ari >= seeds - 0.05, f"{ari:.3f} vs {seeds:.3f}")
    same = exact["graph"].nnz, ivf["graph"].nnz
    print(f"graph entries: exact {same[0]}, ivf {same[1]}; "
          f"ivf clusters {len(np.unique(ivf['leiden']))}")
    print(f"{4 - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
