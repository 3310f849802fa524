"""scpipe.tl.kmeans (rapids-singlecell's tl.kmeans) against scikit-learn's KMeans on the real
datasets (issue 53): inertia at most scikit-learn's plus 1%, the same seed giving the same
clusters, bad input refused by name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scpipe_support import data_dir, device_gate, sc

import anndata as ad
import scpipe

KMeans = pytest.importorskip("sklearn.cluster").KMeans


def with_pca(name: str) -> ad.AnnData:
    a = ad.read_h5ad(data_dir() / name)
    if "X_pca" not in a.obsm:
        sc.pp.normalize_total(a)
        sc.pp.log1p(a)
        sc.pp.pca(a)
    return a


@pytest.mark.parametrize(
    "name",
    [
        "pbmc68k_reduced.h5ad",
        "celltypist_sample_559x32786_counts.h5ad",
        "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
    ],
)
def test_kmeans_inertia_is_scikit_learns(name):
    """Both are one k-means++ run per seed, a local optimum that varies by seed more than 1%:
    the gate is on the mean over 20 seeds."""
    device_gate()
    a = with_pca(name)
    x = a.obsm["X_pca"][:, :50]
    ours, theirs = [], []
    for seed in range(20):
        scpipe.tl.kmeans(a, random_state=seed)
        ours.append(a.uns["kmeans"]["inertia"])
        theirs.append(KMeans(n_clusters=8, n_init=1, random_state=seed).fit(x).inertia_)
    ratio = np.mean(ours) / np.mean(theirs)
    assert ratio <= 1.01, f"{name}: mean inertia {ratio:.4f} x scikit-learn's"
    # The inertia written is that of the clusters written.
    labels = a.obs["kmeans"].astype(int).to_numpy()
    centres = np.stack([x[labels == c].mean(axis=0) for c in range(8)])
    assert abs(((x - centres[labels]) ** 2).sum() / ours[-1] - 1) < 1e-4


def test_kmeans_writes_rapids_singlecells_slots_and_repeats_itself():
    device_gate()
    a = with_pca("pbmc68k_reduced.h5ad")
    b = scpipe.tl.kmeans(a, n_clusters=12, n_pcs=20, copy=True)
    assert "kmeans" not in a.obs and isinstance(b.obs["kmeans"].dtype, pd.CategoricalDtype)
    assert list(b.obs["kmeans"].cat.categories) == [str(c) for c in range(12)]
    c = scpipe.tl.kmeans(a, n_clusters=12, n_pcs=20, copy=True)
    assert (b.obs["kmeans"] == c.obs["kmeans"]).all() and b.uns["kmeans"]["inertia"] == c.uns["kmeans"]["inertia"]
    scpipe.tl.kmeans(a, n_clusters=3, use_rep="X_umap", n_pcs=None, key_added="k3", n_init=4)
    assert a.obs["k3"].nunique() == 3 and a.uns["k3"]["params"]["n_init"] == 4


def test_kmeans_refuses_bad_input_by_name():
    device_gate()
    a = with_pca("pbmc68k_reduced.h5ad")
    cases = [
        (dict(n_pcs=60), ValueError, "n_pcs=60"),
        (dict(use_rep="X_nope"), KeyError, "X_nope"),
        (dict(n_clusters=a.n_obs + 1), ValueError, "n_clusters"),
        (dict(n_clusters=0), ValueError, "n_clusters"),
        (dict(init="random"), TypeError, "init"),
        (dict(tol=-1.0), ValueError, "tol"),
    ]
    for kw, exc, words in cases:
        with pytest.raises(exc, match=words):
            scpipe.tl.kmeans(a, **kw)
    assert "kmeans" not in a.obs
