"""scpipe.get.aggregate and scpipe.tl.dendrogram against scanpy's on the real datasets
(issue 53): the same groups, names and order, the same numbers."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scpipe_support import close, data_dir, device_gate, sc

import anndata as ad
import scpipe

FUNCS = ["sum", "mean", "var", "count_nonzero", "median"]
OLD_SCANPY = tuple(int(v) for v in sc.__version__.split(".")[:2]) < (1, 12)


def pbmc68k() -> ad.AnnData:
    return ad.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")


def pbmc68k_raw() -> ad.AnnData:
    """pbmc68k_reduced's 765 log-normalized genes (sparse) with its obs and obsm."""
    a = pbmc68k()
    return ad.AnnData(a.raw.X.copy(), obs=a.obs.copy(), var=a.raw.var.copy(), obsm=dict(a.obsm))


def scanpys(a, *args, **kw) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return sc.get.aggregate(a, *args, **kw)


def same_aggregate(ours: ad.AnnData, theirs: ad.AnnData, funcs, tag: str, obs: bool = True) -> None:
    assert list(ours.obs_names) == list(theirs.obs_names), tag
    assert list(ours.var_names) == list(theirs.var_names), tag
    for col in theirs.obs.columns if obs else []:
        assert ours.obs[col].astype(str).tolist() == theirs.obs[col].astype(str).tolist(), f"{tag} obs[{col!r}]"
    for f in funcs:
        o, t = ours.layers[f], theirs.layers[f]
        # scanpy < 1.12 computes var as E[X^2] - E[X]^2 with the squares rounded to float32
        # (errors of 1e-7 relative to the squared mean); 1.12 by Welford in float64, as ours.
        rtol, atol = (1e-5, 1e-6) if f == "var" and OLD_SCANPY else (1e-6, 1e-9)
        ok, worst = close(o, t, rtol=rtol, atol=atol)
        assert ok, f"{tag} {f} differs from scanpy's by up to {worst}"


@pytest.mark.parametrize("by", ["bulk_labels", ["bulk_labels", "phase"]])
def test_aggregate_matches_scanpy_on_a_sparse_x(by):
    device_gate()
    a = pbmc68k_raw()
    ours = scpipe.get.aggregate(a, by, FUNCS)
    same_aggregate(ours, scanpys(a, by, FUNCS), FUNCS, f"by={by}")
    assert ours.layers["count_nonzero"].dtype == np.int64
    assert all(ours.layers[f].dtype == np.float64 for f in ["sum", "mean", "var", "median"])
    labels = a.obs[by] if isinstance(by, str) else a.obs[by[0]].astype(str) + "_" + a.obs[by[1]].astype(str)
    counts = labels.value_counts()
    assert (ours.obs["n_obs_aggregated"] == counts.loc[ours.obs_names].to_numpy()).all()


def test_aggregate_by_var_of_obsm_and_of_a_dense_layer():
    device_gate()
    a = pbmc68k_raw()
    a.var["block"] = pd.Categorical(np.arange(a.n_vars) % 7).astype(str)
    a.layers["dense"] = a.X.toarray()
    for kw in [dict(axis="var"), dict(axis=1, layer="dense")]:
        ours = scpipe.get.aggregate(a, "block", ["mean", "var", "sum"], **kw)
        same_aggregate(ours, scanpys(a, "block", ["mean", "var", "sum"], **kw), ["mean", "var", "sum"], str(kw))
        assert ours.shape == (a.n_obs, 7)
    ours = scpipe.get.aggregate(a, "louvain", ["mean", "median"], obsm="X_pca")
    same_aggregate(ours, scanpys(a, "louvain", ["mean", "median"], obsm="X_pca"), ["mean", "median"], "obsm")
    # A CSC X grouped by var is read through its (CSR) transpose.
    c = a.copy()
    c.X = sp.csc_matrix(c.X)
    same_aggregate(scpipe.get.aggregate(c, "block", FUNCS, axis="var"), scanpys(a, "block", FUNCS, axis="var"), FUNCS, "csc")


def test_aggregate_sums_integer_counts_as_integers():
    device_gate()
    a = ad.read_h5ad(data_dir() / "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
    key = next(c for c in a.obs.columns if isinstance(a.obs[c].dtype, pd.CategoricalDtype))
    a.X = sp.csr_matrix(a.X).astype(np.int32)
    ours, theirs = scpipe.get.aggregate(a, key, ["sum", "count_nonzero"]), scanpys(a, key, ["sum", "count_nonzero"])
    assert ours.layers["sum"].dtype == np.int64
    assert np.array_equal(ours.layers["sum"], np.asarray(theirs.layers["sum"]))
    assert np.array_equal(ours.layers["count_nonzero"], np.asarray(theirs.layers["count_nonzero"]))


def test_aggregate_leaves_out_masked_rows_and_missing_categories():
    """scanpy 1.12's definition: a masked-out cell or one without a category counts nowhere
    (n_obs_aggregated included), as if it were not there."""
    device_gate()
    a = pbmc68k_raw()
    rng = np.random.default_rng(0)
    mask = rng.random(a.n_obs) < 0.7
    a.obs["keep"] = mask
    a.obs["labels"] = a.obs["bulk_labels"].astype(object)
    a.obs.loc[~mask, "labels"] = np.nan
    a.obs["labels"] = a.obs["labels"].astype("category")
    subset = a[mask].copy()
    want = scanpys(subset, "bulk_labels", FUNCS)
    for got in [
        scpipe.get.aggregate(a, "bulk_labels", FUNCS, mask="keep"),
        scpipe.get.aggregate(a, "bulk_labels", FUNCS, mask=mask),
        scpipe.get.aggregate(a, "labels", FUNCS),
    ]:
        got = got[want.obs_names]
        same_aggregate(got, want, FUNCS, "mask", obs=False)
        assert (got.obs["n_obs_aggregated"].to_numpy() == subset.obs["bulk_labels"].value_counts().loc[want.obs_names].to_numpy()).all()


def test_aggregate_warns_of_groups_of_at_most_dof_cells():
    device_gate()
    a = pbmc68k_raw()[:50].copy()
    a.obs["g"] = pd.Categorical(["one"] + ["many"] * 49)
    with pytest.warns(RuntimeWarning, match="one"):
        r = scpipe.get.aggregate(a, "g", "var")
    assert np.isnan(r["one"].layers["var"]).all() and not np.isnan(r["many"].layers["var"]).any()
    r = scpipe.get.aggregate(a, "g", "var", dof=0)
    assert (r["one"].layers["var"] == 0).all()


def test_aggregate_refuses_bad_input_by_name():
    device_gate()
    a = pbmc68k_raw()
    cases = [
        (dict(by="nope", func="mean"), KeyError, "nope"),
        (dict(by="bulk_labels", func="max"), ValueError, "max"),
        (dict(by="bulk_labels", func="mean", obsm="X_pca", layer="x"), TypeError, "only provide one"),
        (dict(by="bulk_labels", func="mean", obsm="X_pca", axis="var"), ValueError, "obsm can only"),
        (dict(by="bulk_labels", func="mean", obsm="nope"), KeyError, "nope"),
        (dict(by="bulk_labels", func="mean", mask=np.ones(3, bool)), ValueError, "shape of the mask"),
        (dict(by="bulk_labels", func="mean", mask="nope"), ValueError, "nope"),
        (dict(by="bulk_labels", func="mean", dof=-1), ValueError, "dof"),
        (dict(by="bulk_labels", func="mean", axis=2), ValueError, "axis"),
    ]
    for kw, exc, words in cases:
        with pytest.raises(exc, match=words):
            scpipe.get.aggregate(a, **kw)


GENES = ["CD79A", "MS4A1", "CST3", "LYZ", "NKG7", "GNLY", "HLA-DRA", "CCL5", "IL32"]


def same_dendrogram(ours: dict, theirs: dict, tag: str) -> None:
    assert ours["categories_ordered"] == theirs["categories_ordered"], tag
    assert list(ours["categories_idx_ordered"]) == list(theirs["categories_idx_ordered"]), tag
    for k in ["linkage", "correlation_matrix"]:
        ok, worst = close(ours[k], theirs[k], rtol=1e-5, atol=1e-6)
        assert ok, f"{tag} {k} differs from scanpy's by up to {worst}"
    for k in ["groupby", "use_rep", "cor_method", "linkage_method"]:
        assert ours[k] == theirs[k], f"{tag} {k}"


@pytest.mark.parametrize(
    "kw",
    [
        dict(groupby="bulk_labels"),
        dict(groupby="louvain", n_pcs=10, cor_method="spearman", linkage_method="average"),
        dict(groupby=["bulk_labels", "phase"]),
        dict(groupby="bulk_labels", var_names=GENES),
        dict(groupby="bulk_labels", var_names=GENES, use_raw=False),
        dict(groupby="bulk_labels", n_pcs=20, optimal_ordering=True),
    ],
)
def test_dendrogram_matches_scanpy(kw):
    """With ``var_names``, ours uses those genes, as documented; scanpy 1.12 uses every gene
    of X (``var_names`` only switches from the PCA to X), so its figure for the documented
    definition is its own on X restricted to the genes."""
    device_gate()
    a = pbmc68k()
    ours = scpipe.tl.dendrogram(a, inplace=False, **kw)
    theirs = sc.tl.dendrogram(a[:, GENES].copy() if "var_names" in kw else a, inplace=False, **kw)
    same_dendrogram(ours, theirs, str(kw))
    scpipe.tl.dendrogram(a, **kw)
    g = kw["groupby"]
    assert f"dendrogram_{g if isinstance(g, str) else '_'.join(g)}" in a.uns


def test_dendrogram_refuses_bad_input_by_name():
    device_gate()
    a = pbmc68k()
    with pytest.raises(ValueError, match="valid observation"):
        scpipe.tl.dendrogram(a, "nope")
    with pytest.raises(ValueError, match="categorical"):
        scpipe.tl.dendrogram(a, "n_counts")
    with pytest.raises(ValueError, match="n_pcs=99"):
        scpipe.tl.dendrogram(a, "bulk_labels", n_pcs=99)
    with pytest.raises(KeyError, match="X_nope"):
        scpipe.tl.dendrogram(a, "bulk_labels", use_rep="X_nope")
    a.obs["empty"] = a.obs["bulk_labels"].cat.add_categories(["nobody"])
    with pytest.raises(ValueError, match="nobody"):
        scpipe.tl.dendrogram(a, "empty")
    assert not any(k.startswith("dendrogram") for k in a.uns)
