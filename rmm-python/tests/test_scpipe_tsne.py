"""scpipe.tl.tsne against scanpy's (scikit-learn's TSNE) on the real datasets (issue 53):
trustworthiness at least scanpy's minus 0.01, scanpy's slots, the same input giving the same
embedding, bad input refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from scpipe_support import device_gate, sc

import scpipe
from test_scpipe_clustering import DATASETS, with_pca

trustworthiness = pytest.importorskip("sklearn.manifold").trustworthiness


@pytest.mark.parametrize("name", DATASETS)
def test_tsne_is_as_trustworthy_as_scanpys(name):
    device_gate()
    ours, theirs = with_pca(name), with_pca(name)
    scpipe.tl.tsne(ours)
    sc.tl.tsne(theirs)
    y = ours.obsm["X_tsne"]
    assert y.dtype == np.float32 and y.shape == (ours.n_obs, 2)
    x = ours.obsm["X_pca"]
    for k in (5, 15, 30):
        o, t = trustworthiness(x, y, n_neighbors=k), trustworthiness(x, theirs.obsm["X_tsne"], n_neighbors=k)
        assert o >= t - 0.01, f"{name}, {k} neighbours: trustworthiness {o:.4f} vs scanpy's {t:.4f}"
    assert ours.uns["tsne"]["params"] == {
        "perplexity": 30, "early_exaggeration": 12, "learning_rate": 1000, "metric": "euclidean", "n_components": 2,
    }


def test_tsne_repeats_itself_and_names_its_keys():
    device_gate()
    a = with_pca(DATASETS[0])
    b = scpipe.tl.tsne(a, n_pcs=20, perplexity=10, key_added="t10", copy=True)
    c = scpipe.tl.tsne(a, n_pcs=20, perplexity=10, key_added="t10", copy=True)
    assert "t10" not in a.obsm and np.array_equal(b.obsm["t10"], c.obsm["t10"])
    assert b.uns["t10"]["params"]["perplexity"] == 10


def test_tsne_refuses_bad_input_by_name():
    device_gate()
    a = with_pca(DATASETS[0])
    cases = [
        (dict(n_components=3), ValueError, "2 components"),
        (dict(metric="cosine"), ValueError, "euclidean"),
        (dict(perplexity=a.n_obs), ValueError, "perplexity"),
        (dict(n_pcs=99), ValueError, "n_pcs=99"),
        (dict(use_rep="X_nope"), KeyError, "X_nope"),
        (dict(max_iter=100), ValueError, "max_iter"),
    ]
    for kw, exc, words in cases:
        with pytest.raises(exc, match=words):
            scpipe.tl.tsne(a, **kw)
    assert "X_tsne" not in a.obsm
