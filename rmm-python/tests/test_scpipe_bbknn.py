"""scpipe.pp.bbknn against bbknn's definition (issue 53): the bbknn package's exact search
(`computation='cKDTree'`: scipy's cKDTree per batch), its neighbours sorted by distance,
umap-learn's fuzzy_simplicial_set and its trim, written out here from the package's text (the
package itself needs annoy to import)."""

from __future__ import annotations

import anndata as ad
import numpy as np
import pytest
import scipy.sparse as sp

from scpipe_support import data_dir, device_gate, sc

import scpipe


def reference(pca: np.ndarray, batch: np.ndarray, within: int, trim: int | None):
    from scipy.spatial import cKDTree
    from umap.umap_ import fuzzy_simplicial_set

    batches = np.unique(batch)
    n, k = pca.shape[0], within * len(batches)
    idx = np.zeros((n, k), dtype=np.int64)
    dist = np.zeros((n, k))
    for b, name in enumerate(batches):
        rows = np.flatnonzero(batch == name)
        d, i = cKDTree(pca[rows]).query(pca, k=within)
        idx[:, b * within:(b + 1) * within] = rows[i.reshape(n, within)]
        dist[:, b * within:(b + 1) * within] = d.reshape(n, within)
    order = np.argsort(dist, axis=1, kind="stable")
    idx, dist = np.take_along_axis(idx, order, 1), np.take_along_axis(dist, order, 1)
    conn = fuzzy_simplicial_set(sp.coo_matrix((n, 1)), k, None, None, knn_indices=idx, knn_dists=dist)[0].tocsr()
    trim = 10 * k if trim is None else trim
    if trim > 0:
        thr = np.zeros(n)
        for i in range(n):
            row = conn.data[conn.indptr[i]:conn.indptr[i + 1]]
            if len(row) > trim:
                thr[i] = np.sort(row)[-trim]
        coo = conn.tocoo()
        keep = (coo.data >= thr[coo.row]) & (coo.data >= thr[coo.col])
        conn = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=conn.shape)
    dists = sp.csr_matrix((dist.ravel(), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n))
    dists.setdiag(0)
    dists.eliminate_zeros()
    return dists, conn


def scvi_pca():
    a = ad.read_h5ad(data_dir() / "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
    sc.pp.normalize_total(a)
    sc.pp.log1p(a)
    sc.pp.pca(a, n_comps=30)
    return a


@pytest.mark.parametrize("within,trim", [(3, None), (5, 8)])
def test_bbknn_matches_the_definition(within, trim):
    device_gate()
    a = scvi_pca()
    scpipe.pp.bbknn(a, within, batch_key="batch", trim=trim)
    d_ref, c_ref = reference(a.obsm["X_pca"].astype(np.float64), a.obs["batch"].astype(str).to_numpy(), within, trim)
    c, d = a.obsp["connectivities"], a.obsp["distances"]
    assert (c != c.T).nnz == 0
    assert (abs(d - d_ref) > 1e-4 * abs(d_ref).max()).nnz == 0
    assert (abs(c - c_ref) > 1e-5).nnz == 0, "connectivities differ from bbknn's definition"
    p = a.uns["neighbors"]["params"]
    n_batches = a.obs["batch"].nunique()
    assert p["n_neighbors"] == within * n_batches and p["bbknn"]["batch_key"] == "batch"
    assert p["bbknn"]["trim"] == (10 * within * n_batches if trim is None else trim)
    if trim is None:
        # Every cell reaches the other batch: the point of bbknn (a low trim may cut it).
        other = a.obs["batch"].to_numpy()
        rows = np.repeat(np.arange(a.n_obs), np.diff(c.indptr))
        assert np.all(np.bincount(rows[other[rows] != other[c.indices]], minlength=a.n_obs) > 0)
    scpipe.tl.umap(a)
    assert np.isfinite(a.obsm["X_umap"]).all()


def test_bbknn_refuses_bad_input():
    device_gate()
    a = scvi_pca()
    a.obs["tiny"] = ["a"] * (a.n_obs - 2) + ["b"] * 2
    for kw, words in [
        (dict(batch_key="nope"), "nope"),
        (dict(batch_key="tiny"), "fewer than"),
        (dict(batch_key="batch", neighbors_within_batch=0), "neighbors_within_batch"),
        (dict(batch_key="batch", metric="cosine"), "euclidean"),
    ]:
        with pytest.raises(ValueError, match=words):
            scpipe.pp.bbknn(a, **kw)
    assert "connectivities" not in a.obsp
