#!/usr/bin/env python3
"""scpipe.pp.scrublet against scanpy's on the CPU, in one process, on an h5ad file of raw counts:
time, the calls' agreement and the scores' correlation, beside scanpy's own agreement with
itself under another random_state (scrublet's doublets are random: no two seeds agree exactly).

Usage: .venv/bin/python scripts/checks/scrublet_vs_scanpy.py FILE.h5ad [BATCH_KEY]
(e.g. a file of `scpipe generate 10000 5000 -o g.h5ad`).
"""

from __future__ import annotations

import sys
import time
import warnings


def main() -> int:
    import anndata as ad
    import numpy as np
    import scanpy as sc

    import scpipe

    warnings.filterwarnings("ignore")
    scpipe.settings.device = "cpu"
    path = sys.argv[1]
    key = sys.argv[2] if len(sys.argv) > 2 else None
    a = ad.read_h5ad(path)
    runs = {}
    for name, call in [
        ("scpipe", lambda b: scpipe.pp.scrublet(b, batch_key=key)),
        ("scanpy seed 0", lambda b: sc.pp.scrublet(b, batch_key=key, verbose=False)),
        ("scanpy seed 1", lambda b: sc.pp.scrublet(b, batch_key=key, verbose=False, random_state=1)),
    ]:
        b = a.copy()
        t = time.perf_counter()
        call(b)
        runs[name] = (time.perf_counter() - t, b.obs["doublet_score"].to_numpy(), b.obs["predicted_doublet"].to_numpy())
    print(f"{path}: {a.n_obs} cells x {a.n_vars} genes, batch_key={key}")
    for name, (t, s, p) in runs.items():
        print(f"  {name}: {t:.2f} s, {int(p.sum())} called doublets, median score {np.nanmedian(s):.4f}")
    (_, s0, p0), (_, s1, p1) = runs["scanpy seed 0"], runs["scanpy seed 1"]
    _, so, po = runs["scpipe"]
    ok = ~np.isnan(so) & ~np.isnan(s0)
    print(
        f"  scpipe vs scanpy seed 0: r {np.corrcoef(so[ok], s0[ok])[0, 1]:.4f}, calls agree on "
        f"{(po == p0).mean():.4f}; scanpy seed 0 vs seed 1: r {np.corrcoef(s0, s1)[0, 1]:.4f}, "
        f"calls agree on {(p0 == p1).mean():.4f}; time scanpy / scpipe {runs['scanpy seed 0'][0] / runs['scpipe'][0]:.1f}x",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
