"""scpipe.tl.draw_graph against scanpy's on the real datasets (issue 53): ForceAtlas2 at least
as trustworthy as scanpy's (fa2-modified's) minus 0.01, scanpy's slots and starts, igraph's
layouts as scanpy runs them, the same input giving the same layout, bad input refused by
name with the object unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from scpipe_support import device_gate, sc

import scpipe
from test_scpipe_clustering import DATASETS, with_pca

trustworthiness = pytest.importorskip("sklearn.manifold").trustworthiness


@pytest.mark.parametrize("name", DATASETS)
def test_force_atlas_is_as_trustworthy_as_scanpys(name):
    pytest.importorskip("fa2_modified", reason="scanpy's 'fa' layout needs fa2-modified")
    device_gate()
    ours, theirs = with_pca(name), with_pca(name)
    scpipe.tl.draw_graph(ours)
    sc.tl.draw_graph(theirs)
    y = ours.obsm["X_draw_graph_fa"]
    assert y.dtype == np.float64 and y.shape == (ours.n_obs, 2)
    assert ours.uns["draw_graph"] == {"params": {"layout": "fa", "random_state": 0}}
    assert theirs.uns["draw_graph"]["params"]["layout"] == "fa"
    x = ours.obsm["X_pca"]
    for k in (5, 15, 30):
        o = trustworthiness(x, y, n_neighbors=k)
        t = trustworthiness(x, theirs.obsm["X_draw_graph_fa"], n_neighbors=k)
        assert o >= t - 0.01, f"{name}, {k} neighbours: trustworthiness {o:.4f} vs scanpy's {t:.4f}"


def test_the_starts_are_scanpys():
    """No iterations: the layout is its start, numpy's draws or the obsm key's coordinates."""
    device_gate()
    a = with_pca(DATASETS[0])
    scpipe.tl.draw_graph(a, maxiter=0, random_state=3)
    np.random.seed(3)
    assert np.array_equal(a.obsm["X_draw_graph_fa"], np.random.random((a.n_obs, 2)))
    scpipe.tl.draw_graph(a, init_pos="X_pca", iterations=0, key_added_ext="from_pca")
    assert np.array_equal(a.obsm["X_draw_graph_from_pca"], a.obsm["X_pca"][:, :2].astype(np.float64))


def test_the_paga_start_is_scanpys():
    pytest.importorskip("matplotlib")
    pytest.importorskip("igraph")  # scanpy's pl.paga lays the groups out with igraph
    from scanpy.tools._utils import get_init_pos_from_paga

    device_gate()
    a = with_pca(DATASETS[0])
    scpipe.tl.leiden(a)
    scpipe.tl.paga(a)
    sc.pl.paga(a, show=False)
    scpipe.tl.draw_graph(a, init_pos="paga", maxiter=0, random_state=5)
    expected = get_init_pos_from_paga(a, a.obsp["connectivities"], random_state=5)
    assert np.array_equal(a.obsm["X_draw_graph_fa"], expected)
    b = with_pca(DATASETS[0])
    with pytest.raises(ValueError, match="Plot PAGA first"):
        scpipe.tl.draw_graph(b, init_pos="paga")


def test_force_atlas_repeats_itself():
    device_gate()
    a = with_pca(DATASETS[2])
    b = scpipe.tl.draw_graph(a, maxiter=100, copy=True)
    c = scpipe.tl.draw_graph(a, maxiter=100, copy=True)
    assert "X_draw_graph_fa" not in a.obsm
    assert np.array_equal(b.obsm["X_draw_graph_fa"], c.obsm["X_draw_graph_fa"])
    d = scpipe.tl.draw_graph(a, maxiter=100, random_state=1, copy=True)
    assert not np.array_equal(b.obsm["X_draw_graph_fa"], d.obsm["X_draw_graph_fa"])


def test_the_gpus_layout_is_the_hosts():
    """On a GPU, ForceAtlas2 gives the host's layout bit for bit (the same tree and sums)."""
    if device_gate() != "gpu":
        pytest.skip("no GPU: the host's layout is the only one")
    a = with_pca(DATASETS[0])
    gpu = scpipe.tl.draw_graph(a, maxiter=200, copy=True)
    before = scpipe.settings.device
    scpipe.settings.device = "cpu"
    try:
        host = scpipe.tl.draw_graph(a, maxiter=200, copy=True)
    finally:
        scpipe.settings.device = before
    assert np.array_equal(gpu.obsm["X_draw_graph_fa"], host.obsm["X_draw_graph_fa"])


def test_igraphs_layouts_are_scanpys():
    pytest.importorskip("igraph")
    device_gate()
    ours, theirs = with_pca(DATASETS[2]), with_pca(DATASETS[2])
    scpipe.tl.draw_graph(ours, "fr", niter=50)
    sc.tl.draw_graph(theirs, "fr", niter=50)
    assert np.array_equal(ours.obsm["X_draw_graph_fr"], theirs.obsm["X_draw_graph_fr"])
    assert ours.uns["draw_graph"] == theirs.uns["draw_graph"]


def test_draw_graph_refuses_bad_input_by_name():
    device_gate()
    a = with_pca(DATASETS[2])
    cases = [
        (dict(layout="circle"), ValueError, "valid layout"),
        (dict(init_pos="X_nope"), KeyError, "X_nope"),
        (dict(maxiter=-1), ValueError, "maxiter"),
        (dict(gravity=2.0), TypeError, "gravity"),
        (dict(random_state=-1), ValueError, "random_state"),
        (dict(neighbors_key="nope"), KeyError, "nope"),
    ]
    for kw, exc, words in cases:
        with pytest.raises(exc, match=words):
            scpipe.tl.draw_graph(a, **kw)
    g = a.obsp["connectivities"].tolil()
    g[0, 1], g[1, 0] = 0.5, 0.0
    a.obsp["connectivities"] = g.tocsr()
    with pytest.raises(ValueError, match="not symmetric"):
        scpipe.tl.draw_graph(a)
    assert "X_draw_graph_fa" not in a.obsm and "draw_graph" not in a.uns
