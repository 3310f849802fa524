"""scpipe.tl.kmeans and scpipe.tl.louvain on the real datasets (issue 53): k-means' inertia
at most scikit-learn's plus 1%, Louvain's modularity at least igraph's multilevel (scanpy's
igraph flavour) minus 0.005, the same seed giving the same clusters, bad input refused by
name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scpipe_support import data_dir, device_gate, sc

import anndata as ad
import scpipe

KMeans = pytest.importorskip("sklearn.cluster").KMeans


DATASETS = [
    "pbmc68k_reduced.h5ad",
    "celltypist_sample_559x32786_counts.h5ad",
    "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
]


def with_pca(name: str) -> ad.AnnData:
    """The dataset with scanpy's PCA and neighbors graph (pbmc68k_reduced has its own)."""
    a = ad.read_h5ad(data_dir() / name)
    if "X_pca" not in a.obsm:
        sc.pp.normalize_total(a)
        sc.pp.log1p(a)
        sc.pp.pca(a)
        sc.pp.neighbors(a)
    return a


@pytest.mark.parametrize("name", DATASETS)
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


def test_kmeans_on_the_gpu_is_the_hosts():
    """On a GPU, Lloyd's passes give the host's clusters, centres' inertia and iterations bit
    for bit."""
    if device_gate() != "gpu":
        pytest.skip("no GPU: the host's clusters are the only ones")
    a = with_pca("pbmc68k_reduced.h5ad")
    gpu = scpipe.tl.kmeans(a, n_clusters=12, n_init=3, copy=True)
    before = scpipe.settings.device
    scpipe.settings.device = "cpu"
    try:
        host = scpipe.tl.kmeans(a, n_clusters=12, n_init=3, copy=True)
    finally:
        scpipe.settings.device = before
    assert (gpu.obs["kmeans"] == host.obs["kmeans"]).all()
    assert gpu.uns["kmeans"]["inertia"] == host.uns["kmeans"]["inertia"]
    assert gpu.uns["kmeans"]["n_iter"] == host.uns["kmeans"]["n_iter"]


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


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("use_weights", [False, True])
def test_louvain_modularity_is_igraphs(name, use_weights):
    device_gate()
    ig = pytest.importorskip("igraph")
    a = with_pca(name)
    g = a.obsp["connectivities"].tocoo()
    keep = g.row < g.col
    graph = ig.Graph(n=a.n_obs, edges=list(zip(g.row[keep].tolist(), g.col[keep].tolist())))
    weights = g.data[keep].astype(float) if use_weights else None
    theirs = max(graph.community_multilevel(weights=weights).modularity for _ in range(3))
    scpipe.tl.louvain(a, use_weights=use_weights)
    ours = graph.modularity(a.obs["louvain"].astype(int).tolist(), weights=weights)
    assert abs(ours - a.uns["louvain"]["modularity"]) < 1e-6
    assert ours >= theirs - 0.005, f"{name}: modularity {ours:.4f} vs igraph's {theirs:.4f}"
    sizes = a.obs["louvain"].value_counts(sort=False).to_numpy()
    assert (np.diff(sizes) <= 0).all(), "clusters are numbered by decreasing size"
    b = scpipe.tl.louvain(a, use_weights=use_weights, copy=True)
    assert (b.obs["louvain"] == a.obs["louvain"]).all()
    assert a.uns["louvain"]["params"] == {"resolution": None, "random_state": 0}


def test_louvain_resolution_and_bad_input():
    device_gate()
    a = with_pca("pbmc68k_reduced.h5ad")
    scpipe.tl.louvain(a, resolution=0.3, key_added="coarse")
    scpipe.tl.louvain(a, resolution=2.0, key_added="fine")
    assert a.obs["coarse"].nunique() < a.obs["fine"].nunique()
    with pytest.raises(NotImplementedError, match="restrict_to"):
        scpipe.tl.louvain(a, restrict_to=("bulk_labels", ["CD14+ Monocyte"]))
    with pytest.raises(ValueError, match="flavor"):
        scpipe.tl.louvain(a, flavor="rapids")
    with pytest.raises(KeyError, match="neighbors"):
        scpipe.tl.louvain(a, neighbors_key="nope")
    del a.obsp["connectivities"]
    with pytest.raises(KeyError, match="connectivities"):
        scpipe.tl.louvain(a)
