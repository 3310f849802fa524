"""scpipe.tl.ingest against scanpy 1.12's tl.ingest (issue 53) on the three real datasets: a
reference of some cells (PCA, neighbors, UMAP, leiden by scanpy) and new cells mapped onto it. The PCA projection within
1e-4 of scanpy's (relative to its largest value); the labels agreeing with scanpy's on 95% of
the cells (scanpy's neighbours are pynndescent's approximate ones, ours exact); the UMAP as
trustworthy as scanpy's mapped one (minus 0.01) and its cells within 5% of the layout's span
of scanpy's, in the median; the same result twice; bad input refused by name."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from scpipe_support import data_dir, sc

import anndata as ad
import scpipe

trustworthiness = pytest.importorskip("sklearn.manifold").trustworthiness


DATASETS = [
    "pbmc68k_reduced.h5ad",
    "celltypist_sample_559x32786_counts.h5ad",
    "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
]


def split(name: str):
    """(reference, new cells): the scvi sample by its batches (the second batch ingested into
    the first), the others split at random (65% reference); counts normalized and logged."""
    a = ad.read_h5ad(data_dir() / name)
    if "counts" in name:
        sc.pp.normalize_total(a)
        sc.pp.log1p(a)
    if name.startswith("scvi"):
        ref, new = a[a.obs["batch"] == "pbmc5k"].copy(), a[a.obs["batch"] != "pbmc5k"].copy()
    else:
        order = np.random.default_rng(0).permutation(a.n_obs)
        cut = int(0.65 * a.n_obs)
        ref, new = a[order[:cut]].copy(), a[order[cut:]].copy()
    sc.pp.pca(ref)
    sc.pp.neighbors(ref)
    sc.tl.umap(ref, random_state=0)
    pytest.importorskip("igraph")  # scanpy's leiden, the reference's labels
    sc.tl.leiden(ref, flavor="igraph", n_iterations=2, directed=False, random_state=0)
    for k in ("X_pca", "X_umap"):
        new.obsm.pop(k, None)
    return ref, new


@contextlib.contextmanager
def search_forest_of_pynndescent_06():
    """scanpy 1.12's ingest rebuilds pynndescent's search forest with the index's
    `n_search_trees`, which pynndescent 0.7 deprecates and leaves None (a TypeError inside
    `make_forest`); 0.6 defaulted it to 1. For the reference's call, None means 1 again."""
    import pynndescent.rp_trees as rp

    make_forest = rp.make_forest

    def with_a_tree_count(data, n_neighbors, n_trees, *args, **kw):
        return make_forest(data, n_neighbors, 1 if n_trees is None else n_trees, *args, **kw)

    rp.make_forest = with_a_tree_count
    try:
        yield
    finally:
        rp.make_forest = make_forest


def scanpy_ingest(new, ref, **kw):
    """scanpy's tl.ingest as 1.12 defines it: the new cells centred by the reference's gene
    means before the projection (1.11 centres them by their own; under 1.11 its projection is
    made 1.12's for the call)."""
    from packaging.version import Version
    from scanpy.tools._ingest import Ingest

    if Version(sc.__version__) >= Version("1.12"):
        with search_forest_of_pynndescent_06():
            return sc.tl.ingest(new, ref, **kw)

    def projection(self, n_pcs=None):
        x, ref_x = self._adata_new.X, self._adata_ref.X
        if self._pca_use_hvg:
            hv = self._adata_ref.var["highly_variable"].to_numpy()
            x, ref_x = x[:, hv], ref_x[:, hv]
        basis = self._pca_basis[:, :n_pcs]
        out = np.asarray(x @ basis)
        if self._pca_centered:
            out = out - np.asarray(ref_x.mean(axis=0)).ravel() @ basis
        return out

    saved, Ingest._pca = Ingest._pca, projection
    try:
        return sc.tl.ingest(new, ref, **kw)
    finally:
        Ingest._pca = saved


@pytest.mark.parametrize("name", DATASETS)
def test_ingest_maps_as_scanpy(name):
    ref, new = split(name)
    labels = ["leiden"] + (["louvain", "bulk_labels"] if "louvain" in ref.obs else [])
    ours, theirs = new.copy(), new.copy()
    scpipe.tl.ingest(ours, ref, obs=labels)
    scanpy_ingest(theirs, ref, obs=labels)
    p, q = ours.obsm["X_pca"], theirs.obsm["X_pca"]
    assert p.shape == q.shape
    assert np.abs(p - q).max() <= 1e-4 * np.abs(q).max()
    for c in labels:
        assert list(ours.obs[c].cat.categories) == list(theirs.obs[c].cat.categories)
        agree = (ours.obs[c].astype(str) == theirs.obs[c].astype(str)).mean()
        assert agree >= 0.95, f"{name} {c}: {agree:.3f}"
    u, v = ours.obsm["X_umap"], theirs.obsm["X_umap"]
    t_ours = trustworthiness(p, u, n_neighbors=15)
    t_theirs = trustworthiness(q, v, n_neighbors=15)
    assert t_ours >= t_theirs - 0.01, f"{name}: {t_ours:.4f} vs scanpy's {t_theirs:.4f}"
    span = np.ptp(ref.obsm["X_umap"], axis=0).max()
    moved = np.median(np.linalg.norm(u - v, axis=1)) / span
    assert moved <= 0.05, f"{name}: {moved:.3f} of the span from scanpy's"
    again = new.copy()
    scpipe.tl.ingest(again, ref, obs=labels)
    assert np.array_equal(again.obsm["X_umap"], u)


def test_ingest_copies_and_refuses_bad_input():
    ref, new = split("pbmc68k_reduced.h5ad")
    out = scpipe.tl.ingest(new, ref, obs="leiden", embedding_method="pca", inplace=False)
    assert "X_pca" in out.obsm and "X_umap" not in out.obsm and "leiden" in out.obs
    assert "X_pca" not in new.obsm and "leiden" not in new.obs
    with pytest.raises(ValueError, match="different from variables"):
        scpipe.tl.ingest(new[:, :100].copy(), ref)
    with pytest.raises(NotImplementedError, match="umap and pca"):
        scpipe.tl.ingest(new, ref, embedding_method="tsne")
    with pytest.raises(NotImplementedError, match="knn"):
        scpipe.tl.ingest(new, ref, obs="leiden", labeling_method="svm")
    with pytest.raises(KeyError, match="nope"):
        scpipe.tl.ingest(new, ref, obs="nope")
    bare = ref.copy()
    del bare.uns["neighbors"]
    with pytest.raises(ValueError, match="pp.neighbors"):
        scpipe.tl.ingest(new, bare)
    with pytest.raises(TypeError, match="bogus"):
        scpipe.tl.ingest(new, ref, bogus=1)
