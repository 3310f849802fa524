#!/usr/bin/env python3
"""2026-12-04: a CuPy X that scpipe hands back keeps cupyx's canonical-format flag (a column subset
without the check), and the subset equals the one of the same matrix built afresh."""
import time, numpy as np, scipy.sparse as sp, cupy as cp, anndata as ad, scpipe
import cupyx.scipy.sparse as cusparse
scpipe.settings.device = "gpu"
x = sp.random(200000, 2000, density=0.05, format="csr", dtype=np.float32, random_state=0)
a = ad.AnnData(x)
scpipe.get.anndata_to_GPU(a)
scpipe.pp.normalize_total(a)
print("flag kept:", getattr(a.X, "_has_canonical_format", None))
mask = np.arange(2000) % 3 == 0
def t(label, m):
    cp.cuda.Device().synchronize(); s = time.perf_counter(); m[:, mask]; cp.cuda.Device().synchronize()
    print(label, round((time.perf_counter() - s) * 1e3, 1), "ms")
t("ours, flag carried", a.X)
fresh = cusparse.csr_matrix((a.X.data.copy(), a.X.indices.copy(), a.X.indptr.copy()), shape=a.X.shape)
t("same matrix, flag unknown", fresh)
ok = bool((a.X[:, mask] != fresh[:, mask]).nnz == 0)
print("same subset:", ok)
