#!/usr/bin/env python3
"""tl.kmeans (rapids-singlecell's defaults: 8 clusters, one k-means++ run, max_iter 300, tol
1e-4) at N generated cells (issue 53): 12 overlapping Gaussian clusters in 50 dimensions as
X_pca (centres drawn with standard deviation 1.5, unit noise), made from a fixed seed in each
process. One library (and device) per process: `scpipe-gpu`, `scpipe-cpu` (settings.device),
or `sklearn` (scikit-learn's KMeans with the same settings, random_state 0, on every core;
rapids-singlecell's own needs cuML). Prints each call's seconds (CALLS, default 2: the first and
a warm one), the inertia and the iterations; PROFILE=1 adds a call under cProfile, PROGRESS=1
prints scpipe's own split of each call.
    python3 scripts/device/benchmarks/kmeans_side_by_side.py {scpipe-gpu|scpipe-cpu|sklearn} N"""
import os, sys, time, warnings
import numpy as np

warnings.filterwarnings("ignore")
lib, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
centres = rng.normal(scale=1.5, size=(12, 50))
x = (centres[rng.integers(12, size=n)] + rng.normal(size=(n, 50))).astype(np.float32)

if lib.startswith("scpipe"):
    import anndata as ad
    import scipy.sparse as sp
    import scpipe

    scpipe.settings.device = lib.split("-")[1]
    scpipe.settings.progress = bool(os.environ.get("PROGRESS"))  # each call's in / step / out seconds
    a = ad.AnnData(sp.csr_matrix((n, 1), dtype=np.float32))
    a.obsm["X_pca"] = x

    def call():
        scpipe.tl.kmeans(a)
        return a.uns["kmeans"]["inertia"], a.uns["kmeans"]["n_iter"]
else:
    from sklearn.cluster import KMeans

    def call():
        k = KMeans(n_clusters=8, n_init=1, max_iter=300, tol=1e-4, random_state=0).fit(x)
        return k.inertia_, k.n_iter_

times = []
for _ in range(int(os.environ.get("CALLS", "2"))):
    t = time.perf_counter()
    inertia, n_iter = call()
    times.append(time.perf_counter() - t)
print(f"{lib} {n} cells: " + " / ".join(f"{t:.3f}" for t in times) + f" s, inertia {inertia:.6e}, "
      f"{n_iter} iterations", flush=True)
if os.environ.get("PROFILE"):  # one more call under cProfile: where the Python side's time goes
    import cProfile, pstats

    cProfile.run("call()", "/tmp/kmeans.prof")
    pstats.Stats("/tmp/kmeans.prof").sort_stats("cumulative").print_stats(14)
