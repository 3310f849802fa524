#!/usr/bin/env python3
"""scpipe.tl.draw_graph against scanpy's (fa2-modified's ForceAtlas2) on the CPU, in one
process: each call's time and its layout's trustworthiness (scikit-learn's, 15 neighbours, on
X_pca), on the real datasets (scanpy's normalize, log1p, PCA and neighbors) and on generated
blobs of N cells (50-dimensional Gaussian clusters as X_pca, scanpy's neighbors on it).
With OUT, both layouts of each input side by side as OUT/draw_graph_<name>.png.

Usage: .venv/bin/python scripts/checks/draw_graph_vs_scanpy.py [N ...] [--out OUT]
       (default: the real datasets only; needs fa2-modified, conformance/requirements.txt)
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tools_vs_scanpy import FILES, with_pca  # noqa: E402


def real(name: str):
    return with_pca(Path(os.environ.get("SCPIPE_DATA", ROOT.parent / "shared" / "data")), name)


def blobs(n: int, groups: int = 12):
    import anndata as ad
    import numpy as np
    import scanpy as sc

    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(groups, 50))
    label = rng.integers(groups, size=n)
    a = ad.AnnData(np.zeros((n, 1), dtype=np.float32))
    a.obsm["X_pca"] = (centres[label] + rng.normal(size=(n, 50))).astype(np.float32)
    a.obs["group"] = label.astype(str)
    sc.pp.neighbors(a, use_rep="X_pca")
    return a


def main() -> int:
    import numpy as np
    import scanpy as sc
    from sklearn.manifold import trustworthiness

    import scpipe

    warnings.filterwarnings("ignore")
    scpipe.settings.device = "cpu"
    args = sys.argv[1:]
    out = None
    if "--out" in args:
        i = args.index("--out")
        out = Path(args[i + 1])
        out.mkdir(parents=True, exist_ok=True)
        del args[i : i + 2]
    inputs = [(n, lambda n=n: real(n)) for n in FILES] if not args else []
    inputs += [(f"blobs_{n}", lambda n=int(n): blobs(n)) for n in args]
    print(f"{'input':<52} {'cells':>8} {'scpipe s':>9} {'scanpy s':>9} {'trust ours':>10} {'trust scanpy':>12}")
    for name, make in inputs:
        ours, theirs = make(), None
        theirs = ours.copy()
        t0 = time.perf_counter()
        scpipe.tl.draw_graph(ours)
        t1 = time.perf_counter()
        sc.tl.draw_graph(theirs)
        t2 = time.perf_counter()
        x = ours.obsm["X_pca"]
        sample = np.random.default_rng(1).choice(ours.n_obs, min(ours.n_obs, 5000), replace=False)
        trust = [
            trustworthiness(x[sample], a.obsm["X_draw_graph_fa"][sample], n_neighbors=15) for a in (ours, theirs)
        ]
        print(f"{name:<52} {ours.n_obs:>8} {t1 - t0:>9.2f} {t2 - t1:>9.2f} {trust[0]:>10.4f} {trust[1]:>12.4f}", flush=True)
        if out is not None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            colour = next((c for c in ("bulk_labels", "group") if c in ours.obs), None)
            codes = ours.obs[colour].astype("category").cat.codes if colour else None
            fig, axes = plt.subplots(1, 2, figsize=(12, 6))
            for ax, a, who in zip(axes, (ours, theirs), ("scpipe", "scanpy (fa2-modified)")):
                xy = a.obsm["X_draw_graph_fa"]
                ax.scatter(xy[:, 0], xy[:, 1], c=codes, s=4, cmap="tab20")
                ax.set_title(f"{who}: {name}")
                ax.set_xticks([])
                ax.set_yticks([])
            fig.savefig(out / f"draw_graph_{name.split('.')[0]}.png", dpi=80)
            plt.close(fig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
