#!/usr/bin/env python3
"""fa2-modified's ForceAtlas2 with scanpy's settings and every pair summed exactly
(``barnesHutOptimize=False``) on the 12-node ring of ``sc-kernels/src/draw_graph/tests.rs``
(``ring()``: each node linked to the next with weight 1, each even node to the node 5 on with
weight 0.5), from scanpy's start (``np.random.seed(0); np.random.random((12, 2))``), 30
iterations. Prints the positions, row-major, as the test's ``FA2_RING_30``.

Usage: .venv/bin/python scripts/checks/fa2_reference.py   (needs ``pip install fa2-modified``)
"""

from __future__ import annotations


def main() -> int:
    import numpy as np
    import scipy.sparse as sp
    from fa2_modified import ForceAtlas2

    n = 12
    rows, cols, vals = [], [], []
    for i in range(n):
        for j, w in [((i + 1) % n, 1.0)] + ([((i + 5) % n, 0.5)] if i % 2 == 0 else []):
            rows += [i, j]
            cols += [j, i]
            vals += [w, w]
    g = sp.csr_matrix((np.array(vals, dtype=np.float32), (rows, cols)), shape=(n, n))
    np.random.seed(0)
    start = np.random.random((n, 2))
    fa2 = ForceAtlas2(
        outboundAttractionDistribution=False,
        linLogMode=False,
        adjustSizes=False,
        edgeWeightInfluence=1.0,
        jitterTolerance=1.0,
        barnesHutOptimize=False,
        barnesHutTheta=1.2,
        multiThreaded=False,
        scalingRatio=2.0,
        strongGravityMode=False,
        gravity=1.0,
        verbose=False,
    )
    pos = np.array(fa2.forceatlas2(g, pos=start, iterations=30))
    print("const FA2_RING_30: [f64; 24] = [")
    for v in pos.ravel():
        print(f"    {float(v)!r},")
    print("];")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
