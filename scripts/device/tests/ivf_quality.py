"""Issue 29's first gate: UMAP and Leiden from the inverted file's graph within issue 28's quality
gates of the same steps on the exact graph, on scpipe outputs of the same cells run with several
seeds (`--random-state`).

Usage (on the GPU machine; h5py, numpy, scipy and scikit-learn):
  python3 scripts/device/tests/ivf_quality.py EXACT_S0,EXACT_S1[,...] IVF_S0[,IVF_S1,...] [MORE ...] [SAMPLE]
The first argument lists the exact graph's runs, one file per seed (two at least: Leiden's own
agreement between seeds is the ARI gate's reference); every later one lists one inverted-file
variant's runs, one per seed. A single pair of seeds is a noisy estimate of that agreement
(on the 1 M demo two seeds agreed at 0.884, and one inverted-file run's ARI with one exact run
moved by more than the gate's 0.05 margin between seeds), so each gate compares means over the
seeds: the ARI over every (inverted file, exact) pair against the mean over the exact runs'
pairs, the modularity, trustworthiness and silhouette over each side's runs. The spread (lowest
and highest) is printed beside each mean.
Trustworthiness and silhouettes are measured on SAMPLE cells (default 20,000, seeded) of the
first exact run's X_pca, the silhouettes of the first exact run's Leiden labels; the
modularities on the first exact run's whole graph. Prints PASS/FAIL lines; exits 1 on a failure.
"""

import os
import sys
from itertools import combinations

import h5py
import numpy as np
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score, silhouette_score
from sklearn.neighbors import NearestNeighbors

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "conformance"))
from graph_metrics import modularity  # noqa: E402

K = 15  # the neighbours trustworthiness looks at, as issue 28's gate states


def read(path: str) -> dict:
    with h5py.File(path, "r") as f:
        g = f["obsp/connectivities"]
        n = f["obsm/X_pca"].shape[0]
        return {
            "path": path,
            "pca": f["obsm/X_pca"][:],
            "umap": f["obsm/X_umap"][:],
            "leiden": f["obs/leiden/codes"][:],
            "graph": sp.csr_matrix((g["data"][:], g["indices"][:], g["indptr"][:]), shape=(n, n)),
        }


class Trustworthiness:
    """sklearn.manifold.trustworthiness's definition with the original space's ranks computed
    once: every layout is measured against the same PCs, and the full sort of the sample's
    distances is the costly part."""

    def __init__(self, x: np.ndarray):
        x = x.astype(np.float64)
        sq = (x * x).sum(axis=1)
        d = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
        np.fill_diagonal(d, np.inf)
        order = np.argsort(d, axis=1)
        m = len(x)
        self.rank = np.empty((m, m), dtype=np.int32)  # 1 = the nearest other cell
        np.put_along_axis(self.rank, order, np.arange(1, m + 1, dtype=np.int32)[None, :], axis=1)

    def __call__(self, layout: np.ndarray) -> float:
        m = len(layout)
        near = NearestNeighbors(n_neighbors=K).fit(layout).kneighbors(return_distance=False)
        excess = np.take_along_axis(self.rank, near, axis=1).astype(np.int64) - K
        penalty = excess[excess > 0].sum()
        return float(1.0 - penalty * 2.0 / (m * K * (2.0 * m - 3.0 * K - 1.0)))


def spread(values: list, what: str = "runs") -> str:
    return f"{np.mean(values):.4f} ({min(values):.4f} to {max(values):.4f}, {len(values)} {what})"


def main(argv: list[str]) -> int:
    groups = [a.split(",") for a in argv if not a.isdigit()]
    sizes = [int(a) for a in argv if a.isdigit()]
    if len(groups) < 2 or len(groups[0]) < 2:
        print(__doc__)
        return 2
    exact = [read(p) for p in groups[0]]
    m = sizes[0] if sizes else 20_000
    n = exact[0]["pca"].shape[0]
    cells = np.sort(np.random.default_rng(0).choice(n, size=min(m, n), replace=False))
    trust = Trustworthiness(exact[0]["pca"][cells])
    labels = exact[0]["leiden"][cells]
    graph = exact[0]["graph"]

    def measures(run: dict) -> dict:
        return {
            "trust": trust(run["umap"][cells]),
            "silhouette": float(silhouette_score(run["umap"][cells], labels)),
            "modularity": modularity(graph, run["leiden"]),
            "clusters": len(np.unique(run["leiden"])),
        }

    ref = [measures(r) for r in exact]
    seeds = [adjusted_rand_score(a["leiden"], b["leiden"]) for a, b in combinations(exact, 2)]
    print(f"exact graph, {len(exact)} seeds: clusters {[r['clusters'] for r in ref]}, "
          f"seed agreement (ARI) {spread(seeds, 'pairs')}, modularity "
          f"{spread([r['modularity'] for r in ref])}, trustworthiness "
          f"{spread([r['trust'] for r in ref])}, silhouette {spread([r['silhouette'] for r in ref])}")
    failed = 0
    for paths in groups[1:]:
        print(f"== {','.join(paths)}")
        failed += check_one([read(p) for p in paths], exact, measures, ref, seeds, len(cells))
    return 1 if failed else 0


def check_one(runs: list, exact: list, measures, ref: list, seeds: list, m: int) -> int:
    failed = 0

    def check(name: str, ok: bool, detail: str) -> None:
        nonlocal failed
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({detail})", flush=True)

    got = [measures(r) for r in runs]
    mean = lambda rows, key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    t_ivf, t_exact = mean(got, "trust"), mean(ref, "trust")
    check("umap trustworthiness (ivf graph) >= exact graph's - 0.01", t_ivf >= t_exact - 0.01,
          f"{spread([r['trust'] for r in got])} vs {t_exact:.4f} on {m} cells")
    s_ivf, s_exact = mean(got, "silhouette"), mean(ref, "silhouette")
    check("umap silhouette of the exact run's leiden within 0.05", abs(s_ivf - s_exact) <= 0.05,
          f"{spread([r['silhouette'] for r in got])} vs {s_exact:.4f}")
    q_ivf, q_exact = mean(got, "modularity"), mean(ref, "modularity")
    check("leiden (ivf graph) modularity on the exact graph >= exact's - 0.005",
          q_ivf >= q_exact - 0.005, f"{spread([r['modularity'] for r in got])} vs {q_exact:.4f}")
    cross = [adjusted_rand_score(e["leiden"], r["leiden"]) for r in runs for e in exact]
    check("leiden ARI (ivf vs exact graph) >= the exact graph's seed agreement - 0.05",
          np.mean(cross) >= np.mean(seeds) - 0.05, f"{spread(cross, 'pairs')} vs {np.mean(seeds):.4f}")
    same = [adjusted_rand_score(e["leiden"], r["leiden"]) for e, r in zip(exact, runs)]
    print("same seed pairs' ARI: " + ", ".join(f"{a:.3f}" for a in same))
    print(f"graph entries: exact {exact[0]['graph'].nnz}, ivf {runs[0]['graph'].nnz}; "
          f"ivf clusters {[r['clusters'] for r in got]}")
    print(f"{4 - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
