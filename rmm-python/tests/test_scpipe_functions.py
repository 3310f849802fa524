"""scanpy's and rapids-singlecell's functions beyond the clustering tutorial, each against
scanpy 1.12's own on the real datasets (issue 53): regress_out, normalize_pearson_residuals."""

from __future__ import annotations

import numpy as np
import pytest

from scpipe_support import close, data_dir, dense, device_gate, sc

import anndata as ad
import scpipe


def pbmc68k_log() -> ad.AnnData:
    """pbmc68k_reduced's log-normalized genes (its `.raw`) with its obs: n_counts,
    percent_mito (continuous), bulk_labels (categorical)."""
    a = ad.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    return ad.AnnData(a.raw.X.copy(), obs=a.obs.copy(), var=a.raw.var.copy())


@pytest.mark.parametrize("keys", [["n_counts", "percent_mito"], "n_counts", "bulk_labels"])
def test_regress_out_matches_scanpy(keys):
    device_gate()
    ours, theirs = pbmc68k_log(), pbmc68k_log()
    scpipe.pp.regress_out(ours, keys)
    sc.pp.regress_out(theirs, keys)
    assert isinstance(ours.X, np.ndarray) and ours.X.dtype == np.float32
    # Residuals of values up to about 5: 1e-4 relative, 1e-5 absolute (f32 rounding); the
    # categorical key's regressor is an f32 mean in both.
    ok, worst = close(ours.X, theirs.X, rtol=1e-4, atol=1e-5)
    assert ok, f"regress_out({keys!r}) differs from scanpy by up to {worst}"


def test_regress_out_copy_layer_and_text_keys():
    device_gate()
    a = pbmc68k_log()
    a.layers["log"] = a.X.copy()
    b = scpipe.pp.regress_out(a, "n_counts", copy=True)
    assert b is not a and np.array_equal(dense(a.X), dense(a.layers["log"]))
    scpipe.pp.regress_out(a, "n_counts", layer="log")
    assert np.array_equal(dense(a.layers["log"]), dense(b.X))
    # A text column is a category, as scanpy's sanitize_anndata makes it (ours leaves obs alone).
    t = pbmc68k_log()
    t.obs["labels"] = t.obs["bulk_labels"].astype(str).to_numpy()
    c = pbmc68k_log()
    scpipe.pp.regress_out(t, "labels")
    scpipe.pp.regress_out(c, "bulk_labels")
    # (The categories' order differs, so their sums add in another order: f32 rounding.)
    assert np.abs(t.X - c.X).max() < 1e-5 and t.obs["labels"].dtype == object


@pytest.mark.parametrize(
    "keys,exc,words",
    [
        (["nope"], KeyError, "nope"),
        (["bulk_labels", "n_counts"], ValueError, "only key"),
        (["n_counts", "bulk_labels"], ValueError, "not numeric"),
    ],
)
def test_regress_out_refuses_bad_keys_and_leaves_the_object(keys, exc, words):
    device_gate()
    a = pbmc68k_log()
    x, obs = dense(a.X), a.obs.copy()
    with pytest.raises(exc, match=words):
        scpipe.pp.regress_out(a, keys)
    assert np.array_equal(dense(a.X), x) and a.obs.equals(obs)


def test_regress_out_with_a_nan_covariate_is_refused():
    device_gate()
    a = pbmc68k_log()
    a.obs["bad"] = np.where(np.arange(a.n_obs) == 3, np.nan, 1.0 + np.arange(a.n_obs))
    x = dense(a.X)
    with pytest.raises(ValueError, match="NaN at cell 3"):
        scpipe.pp.regress_out(a, "bad")
    assert np.array_equal(dense(a.X), x)


def counts_file(name: str) -> ad.AnnData:
    """A real counts file with the genes that have no count left out (scanpy would give them
    NaN residuals; scpipe refuses them)."""
    a = ad.read_h5ad(data_dir() / name)
    sc.pp.filter_genes(a, min_counts=1)
    sc.pp.filter_cells(a, min_counts=1)
    return a


@pytest.mark.parametrize(
    "name", ["celltypist_sample_559x32786_counts.h5ad", "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad"]
)
@pytest.mark.parametrize("theta,clip", [(100, None), (1.0, 5.0)])
def test_normalize_pearson_residuals_matches_scanpy(name, theta, clip):
    device_gate()
    ours, theirs = counts_file(name), counts_file(name)
    scpipe.pp.normalize_pearson_residuals(ours, theta=theta, clip=clip)
    sc.experimental.pp.normalize_pearson_residuals(theirs, theta=theta, clip=clip)
    assert isinstance(ours.X, np.ndarray) and ours.X.dtype == np.float32
    # scanpy computes in float32, scpipe in float64 rounded once: a few f32 ulp apart.
    ok, worst = close(ours.X, theirs.X, rtol=1e-4, atol=1e-5)
    assert ok, f"{name} theta={theta} clip={clip}: differs from scanpy by up to {worst}"
    assert ours.uns["pearson_residuals_normalization"] == theirs.uns["pearson_residuals_normalization"]


def test_normalize_pearson_residuals_inplace_copy_layer_and_bad_input():
    device_gate()
    a = counts_file("scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
    before = dense(a.X)
    r = scpipe.pp.normalize_pearson_residuals(a, inplace=False)
    assert set(r) == {"X", "theta", "clip", "computed_on"} and np.array_equal(dense(a.X), before)
    b = scpipe.pp.normalize_pearson_residuals(a, copy=True)
    assert np.array_equal(b.X, r["X"]) and np.array_equal(dense(a.X), before)
    a.layers["counts"] = a.X.copy()
    scpipe.pp.normalize_pearson_residuals(a, layer="counts")
    assert np.array_equal(a.layers["counts"], r["X"])
    assert a.uns["pearson_residuals_normalization"]["computed_on"] == "counts"
    with pytest.raises(ValueError, match="theta"):
        scpipe.pp.normalize_pearson_residuals(a, theta=0)
    with pytest.raises(ValueError, match="copy=True"):
        scpipe.pp.normalize_pearson_residuals(a, copy=True, inplace=False)
    empty = ad.AnnData(np.array([[1.0, 0.0], [2.0, 0.0]], dtype=np.float32))
    with pytest.raises(ValueError, match="gene 1 has no counts"):
        scpipe.pp.normalize_pearson_residuals(empty)
    assert np.array_equal(empty.X, [[1.0, 0.0], [2.0, 0.0]])
    with pytest.warns(UserWarning, match="non-integers"):
        scpipe.pp.normalize_pearson_residuals(ad.AnnData(np.array([[1.5, 1.0], [2.0, 1.0]], dtype=np.float32)))
