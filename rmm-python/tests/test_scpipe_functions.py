"""scanpy's and rapids-singlecell's functions beyond the clustering tutorial, each against
scanpy 1.12's own on the real datasets (issue 53): regress_out, normalize_pearson_residuals,
scrublet."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
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
    assert np.abs(t.X - c.X).max() < 1e-5 and not isinstance(t.obs["labels"].dtype, pd.CategoricalDtype)


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
    # The same check on sparse values, for the HVG flavour too (wherever X lies).
    import scipy.sparse as sp

    frac = ad.AnnData(sp.csr_matrix(np.array([[1.5, 1.0], [2.0, 1.0], [0.0, 3.0]], dtype=np.float32)))
    with pytest.warns(UserWarning, match="non-integers"):
        scpipe.pp.highly_variable_genes(frac, flavor="pearson_residuals", n_top_genes=1)
    whole = ad.AnnData(sp.csr_matrix(np.array([[1.0, 1.0], [2.0, 1.0], [0.0, 3.0]], dtype=np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        scpipe.pp.highly_variable_genes(whole, flavor="pearson_residuals", n_top_genes=1)


COUNTS = ["celltypist_sample_559x32786_counts.h5ad", "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad"]


def scrublet_inputs(name: str, seed: int = 0) -> tuple[ad.AnnData, ad.AnnData]:
    """scanpy's own preparation of the observed cells and its simulated doublets (the path of
    `sc.pp.scrublet` with `adata_sim`): what both classifiers then get."""
    obs = ad.read_h5ad(data_dir() / name)
    sc.pp.filter_genes(obs, min_cells=3)
    sc.pp.filter_cells(obs, min_genes=3)
    obs.layers["raw"] = obs.X.copy()
    sc.pp.normalize_total(obs)
    logged = obs.copy()
    sc.pp.log1p(logged)
    sc.pp.highly_variable_genes(logged)
    obs = obs[:, logged.var["highly_variable"]].copy()
    sim = sc.pp.scrublet_simulate_doublets(obs, layer="raw", random_seed=seed)
    del obs.layers["raw"]
    sc.pp.normalize_total(obs, target_sum=1e6)
    sc.pp.normalize_total(sim, target_sum=1e6)
    return obs, sim


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scrublet_classifier_matches_scanpy_on_its_doublets(name, seed):
    """Given scanpy's doublets, every score within 1e-4 relative of scanpy's, the same threshold
    and the same calls (at these sizes scanpy's kNN is exact, as ours). The seeds give doublets
    with and without a pair and its reverse, the two cases of scanpy's neighbour count."""
    device_gate()
    pytest.importorskip("skimage", reason="scanpy's scrublet needs scikit-image for its threshold")
    obs, sim = scrublet_inputs(name, seed)
    ours, theirs = obs.copy(), obs.copy()
    scpipe.pp.scrublet(ours, adata_sim=sim)
    sc.pp.scrublet(theirs, adata_sim=sim)
    # A cell's doublet with itself is that cell again once normalized (up to rounding): scanpy's
    # kNN then drops one of the two as if it were the point itself, whichever its sort puts
    # first (which differs between numpy versions), so that cell and that doublet may count one
    # doublet neighbour more or less than ours. Every other score is within 1e-4.
    parents = sim.obsm["doublet_parents"]
    selfish = parents[:, 0] == parents[:, 1]
    a, b = ours.obs["doublet_score"].to_numpy(), theirs.obs["doublet_score"].to_numpy()
    off = ~np.isclose(a, b, rtol=1e-4, atol=0)
    assert set(np.where(off)[0]) <= set(parents[selfish, 0]), f"{name}: cells {np.where(off)[0]} differ"
    a, b = ours.uns["scrublet"]["doublet_scores_sim"], theirs.uns["scrublet"]["doublet_scores_sim"]
    off = ~np.isclose(a, b, rtol=1e-4, atol=0)
    assert np.all(selfish[off]), f"{name}: doublets {np.where(off)[0]} differ"
    # The threshold is a histogram bin's centre: the same bin, or (where such a doublet moved a
    # count) the next one.
    width = (b.max() - b.min()) / 256
    assert abs(ours.uns["scrublet"]["threshold"] - theirs.uns["scrublet"]["threshold"]) <= 1.0001 * width
    assert np.array_equal(ours.obs["predicted_doublet"].to_numpy(), theirs.obs["predicted_doublet"].to_numpy())
    assert ours.uns["scrublet"]["parameters"] == theirs.uns["scrublet"]["parameters"]
    assert np.array_equal(ours.uns["scrublet"]["doublet_parents"], theirs.uns["scrublet"]["doublet_parents"])


def seed_spread(a: ad.AnnData, seeds=(0, 1, 2), **kw) -> list[np.ndarray]:
    out = []
    for s in seeds:
        b = a.copy()
        sc.pp.scrublet(b, random_state=s, verbose=False, **kw)
        out.append(b.obs["doublet_score"].to_numpy())
    return out


@pytest.mark.parametrize("name,batch_key", [(COUNTS[0], None), (COUNTS[1], None), (COUNTS[1], "batch")])
def test_scrublet_agrees_with_scanpy_as_its_own_seeds_do(name, batch_key):
    """With other random doublets no two runs agree exactly, scanpy's with itself included: our
    scores correlate with scanpy's at least as its own three seeds do with each other (less
    0.05), and the calls agree on at least 95% of cells."""
    device_gate()
    pytest.importorskip("skimage", reason="scanpy's scrublet needs scikit-image for its threshold")
    a = ad.read_h5ad(data_dir() / name)
    ours = a.copy()
    scpipe.pp.scrublet(ours, batch_key=batch_key)
    theirs = seed_spread(a, batch_key=batch_key)
    own = min(np.corrcoef(x, y)[0, 1] for i, x in enumerate(theirs) for y in theirs[i + 1 :])
    ours_s = ours.obs["doublet_score"].to_numpy()
    r = min(np.corrcoef(ours_s, t)[0, 1] for t in theirs)
    assert r >= own - 0.05, f"{name}: r with scanpy {r:.3f}, scanpy's seeds among themselves {own:.3f}"
    b = a.copy()
    sc.pp.scrublet(b, batch_key=batch_key, verbose=False)
    agree = (ours.obs["predicted_doublet"].to_numpy() == b.obs["predicted_doublet"].to_numpy()).mean()
    assert agree >= 0.95, f"{name}: calls agree on {agree:.3f} of cells"
    assert ours.obs["doublet_score"].dtype == np.float64 and ours.obs["predicted_doublet"].dtype == bool
    if batch_key:
        assert ours.uns["scrublet"]["batched_by"] == "batch"
        assert set(ours.uns["scrublet"]["batches"]) == set(b.uns["scrublet"]["batches"])
    else:
        assert set(ours.uns["scrublet"]) == set(b.uns["scrublet"])


@pytest.mark.parametrize("name,batch_key", [(COUNTS[0], None), (COUNTS[1], None), (COUNTS[1], "batch")])
def test_scrublet_matches_scanpy_end_to_end(name, batch_key):
    """The whole call, doublets included, as scanpy's for the same random_state (below 2,731
    cells a batch scanpy's kNN is exact too): scores within 1e-4 but for the cells tied with
    their doublet with themselves (see above), thresholds within a histogram bin, and the
    same calls on at least 99.5% of cells."""
    device_gate()
    pytest.importorskip("skimage", reason="scanpy's scrublet needs scikit-image for its threshold")
    a = ad.read_h5ad(data_dir() / name)
    ours, theirs = a.copy(), a.copy()
    scpipe.pp.scrublet(ours, batch_key=batch_key)
    sc.pp.scrublet(theirs, batch_key=batch_key, verbose=False)
    x, y = ours.obs["doublet_score"].to_numpy(), theirs.obs["doublet_score"].to_numpy()
    off = ~np.isclose(x, y, rtol=1e-4, atol=0)
    assert off.mean() <= 0.01, f"{name}: {off.sum()} scores differ from scanpy's, up to {np.abs(x - y).max()}"
    agree = (ours.obs["predicted_doublet"].to_numpy() == theirs.obs["predicted_doublet"].to_numpy()).mean()
    assert agree >= 0.995, f"{name}: calls agree on {agree:.4f}"
    records = (
        [(ours.uns["scrublet"], theirs.uns["scrublet"])]
        if batch_key is None
        else [(ours.uns["scrublet"]["batches"][b], theirs.uns["scrublet"]["batches"][b]) for b in theirs.uns["scrublet"]["batches"]]
    )
    for o, t in records:
        assert np.array_equal(o["doublet_parents"], t["doublet_parents"]), "scanpy's doublets"
        assert o["parameters"] == t["parameters"]
        width = (t["doublet_scores_sim"].max() - t["doublet_scores_sim"].min()) / 256
        assert abs(o["threshold"] - t["threshold"]) <= 1.0001 * width


def test_scrublet_repeats_with_its_seed_and_leaves_x():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    before = a.X.copy()
    b = scpipe.pp.scrublet(a, copy=True)
    c = scpipe.pp.scrublet(a, copy=True)
    assert "doublet_score" not in a.obs and (a.X != before).nnz == 0
    assert np.array_equal(b.obs["doublet_score"], c.obs["doublet_score"])
    d = scpipe.pp.scrublet(a, copy=True, random_state=5)
    assert not np.array_equal(b.obs["doublet_score"], d.obs["doublet_score"])
    scpipe.pp.scrublet(a, threshold=0.1)
    assert a.uns["scrublet"]["threshold"] == 0.1
    assert np.array_equal(a.obs["predicted_doublet"], a.obs["doublet_score"] > 0.1)


def test_scrublet_simulate_doublets_as_scanpy_lays_them_out():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    ours = scpipe.pp.scrublet_simulate_doublets(a, sim_doublet_ratio=1.5)
    theirs = sc.pp.scrublet_simulate_doublets(a, sim_doublet_ratio=1.5)
    assert ours.shape == theirs.shape and list(ours.obs.columns) == ["n_counts"]
    assert ours.obsm["doublet_parents"].shape == (ours.n_obs, 2)
    assert ours.uns["scrublet"] == theirs.uns["scrublet"]
    p = ours.obsm["doublet_parents"]
    want = a.X[p[:, 0]] + a.X[p[:, 1]]
    assert abs(ours.X - want).max() == 0
    assert np.array_equal(ours.obs["n_counts"], np.asarray(want.sum(1)).ravel())
    # Our doublets feed our classifier as scanpy's feed scanpy's.
    obs = a.copy()
    sc.pp.normalize_total(obs, target_sum=1e6)
    sc.pp.normalize_total(ours, target_sum=1e6)
    scpipe.pp.scrublet(obs, adata_sim=ours)
    assert obs.obs["doublet_score"].notna().all()


@pytest.mark.parametrize(
    "kw,exc,words",
    [
        ({"batch_key": "nope"}, ValueError, "nope"),
        ({"n_prin_comps": 5000}, ValueError, "n_prin_comps"),
        ({"expected_doublet_rate": 0}, ValueError, "expected_doublet_rate"),
        ({"knn_dist_metric": "cosine"}, ValueError, "euclidean"),
        ({"random_state": None}, TypeError, "random_state"),
        ({"random_state": 2**32}, ValueError, "random_state"),
    ],
)
def test_scrublet_refuses_bad_input_and_leaves_the_object(kw, exc, words):
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    with pytest.raises(exc, match=words):
        scpipe.pp.scrublet(a, **kw)
    assert "doublet_score" not in a.obs and "scrublet" not in a.uns


def test_scrublet_refuses_values_that_are_not_counts():
    """Where it runs (on the GPU, X goes straight to the device and is checked there)."""
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    a.X = a.X.copy()
    a.X.data[3] = -1.0
    with pytest.raises(ValueError, match="negative"):
        scpipe.pp.scrublet(a)
    assert "doublet_score" not in a.obs and a.X.data[3] == -1.0


def test_scrublet_refuses_a_batch_of_one_cell():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    a.obs["lonely"] = ["a"] * (a.n_obs - 1) + ["b"]
    with pytest.raises(ValueError, match="batch 'b'.*1 cell"):
        scpipe.pp.scrublet(a, batch_key="lonely")
    assert "doublet_score" not in a.obs


S_GENES = "MCM5 PCNA TYMS FEN1 MCM2 MCM4 RRM1 UNG GINS2 MCM6 CDCA7 DTL PRIM1 UHRF1 HELLS RFC2 RPA2 NASP RAD51AP1 GMNN WDR76 SLBP CCNE2 UBR7 POLD3 MSH2 ATAD2 RAD51 RRM2 CDC45 CDC6 EXO1 TIPIN DSCC1 BLM CASP8AP2 USP1 CLSPN POLA1 CHAF1B BRIP1 E2F8".split()
G2M_GENES = "HMGB2 CDK1 NUSAP1 UBE2C BIRC5 TPX2 TOP2A NDC80 CKS2 NUF2 CKS1B MKI67 TMPO CENPF TACC3 FAM64A SMC4 CCNB2 CKAP2L CKAP2 AURKB BUB1 KIF11 ANP32E TUBB4B GTSE1 KIF20B HJURP CDCA3 HN1 CDC20 TTK CDC25C KIF2C RANGAP1 NCAPD2 DLGAP5 CDCA2 CDCA8 ECT2 KIF23 HMMR AURKA PSRC1 ANLN LBR CKAP5 CENPE CTCF NEK2 G2E3 GAS2L3 CBX5 CENPA".split()


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"ctrl_as_ref": False, "random_state": 3},
        {"n_bins": 10, "ctrl_size": 20},
        {"gene_pool": "half"},
        {"use_raw": False},
    ],
)
def test_score_genes_matches_scanpy(kw):
    """scanpy's control genes for the same seed, so its scores: within 1e-5 relative, 1e-6
    absolute (scanpy's sparse means add float32 values in float32; ours in float64)."""
    device_gate()
    a = ad.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    names = list(a.var_names if kw.get("use_raw") is False else a.raw.var_names)
    kw = dict(kw)
    genes = ["CD79A", "MS4A1", "CD19", "NOT_A_GENE"] + names[5:9]
    if kw.get("gene_pool") == "half":
        kw["gene_pool"] = names[::2]
        genes = ["NOT_A_GENE"] + names[10:30:2]
    ours, theirs = a.copy(), a.copy()
    with pytest.warns(UserWarning, match="NOT_A_GENE"):
        scpipe.tl.score_genes(ours, genes, score_name="b", **kw)
    sc.tl.score_genes(theirs, genes, score_name="b", **kw)
    assert ours.obs["b"].dtype == np.float64
    ok, worst = close(ours.obs["b"].to_numpy(), theirs.obs["b"].to_numpy(), 1e-5, 1e-6)
    assert ok, f"{kw}: scores differ from scanpy's by up to {worst}"


def test_score_genes_on_counts_layer_and_cell_cycle_as_scanpy():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[0])
    a.layers["counts"] = a.X.copy()
    sc.pp.normalize_total(a)
    sc.pp.log1p(a)
    genes = list(a.var_names[100:140])
    ours, theirs = a.copy(), a.copy()
    scpipe.tl.score_genes(ours, genes, layer="counts")
    sc.tl.score_genes(theirs, genes, layer="counts")
    ok, worst = close(ours.obs["score"].to_numpy(), theirs.obs["score"].to_numpy(), 1e-5, 1e-6)
    assert ok, f"layer: differs by up to {worst}"
    b = ad.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    ours, theirs = b.copy(), b.copy()
    with pytest.warns(UserWarning):
        scpipe.tl.score_genes_cell_cycle(ours, s_genes=S_GENES, g2m_genes=G2M_GENES)
    sc.tl.score_genes_cell_cycle(theirs, s_genes=S_GENES, g2m_genes=G2M_GENES)
    for col in ["S_score", "G2M_score"]:
        ok, worst = close(ours.obs[col].to_numpy(), theirs.obs[col].to_numpy(), 1e-5, 1e-6)
        assert ok, f"{col} differs by up to {worst}"
    assert (ours.obs["phase"].astype(str).to_numpy() == theirs.obs["phase"].astype(str).to_numpy()).all()


def test_score_genes_refuses_bad_input_and_leaves_the_object():
    device_gate()
    a = ad.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    cols = list(a.obs.columns)
    with pytest.raises(ValueError, match="No valid genes"):
        scpipe.tl.score_genes(a, ["NOPE"])
    with pytest.raises(TypeError, match="random_state"):
        scpipe.tl.score_genes(a, ["CD79A"], random_state=None)
    with pytest.raises(ValueError, match="layer and raw"):
        scpipe.tl.score_genes(a, ["CD79A"], layer="x", use_raw=True)
    with pytest.raises(ValueError, match="n_bins"):
        scpipe.tl.score_genes(a, ["CD79A"], n_bins=1)
    with pytest.raises(KeyError, match="not in gene_pool"):
        scpipe.tl.score_genes(a, ["CD79A"], gene_pool=["MS4A1", "CD3E"])
    assert list(a.obs.columns) == cols


@pytest.mark.parametrize("name,batch_key", [(COUNTS[0], None), (COUNTS[1], None), (COUNTS[1], "batch")])
@pytest.mark.parametrize("theta,clip", [(100, None), (1.0, 5.0)])
def test_hvg_pearson_residuals_matches_scanpy(name, batch_key, theta, clip):
    """flavor='pearson_residuals' as scanpy's experimental one: the same genes, residual
    variances within 1e-6 relative, the same ranks (scanpy computes the residuals in f64 too)."""
    device_gate()
    a = ad.read_h5ad(data_dir() / name)
    sc.pp.filter_cells(a, min_counts=1)
    ours, theirs = a.copy(), a.copy()
    scpipe.pp.highly_variable_genes(ours, flavor="pearson_residuals", n_top_genes=500, batch_key=batch_key, theta=theta, clip=clip)
    sc.experimental.pp.highly_variable_genes(theirs, n_top_genes=500, batch_key=batch_key, theta=theta, clip=clip)
    assert list(ours.var.columns) == list(theirs.var.columns)
    assert np.array_equal(ours.var["highly_variable"], theirs.var["highly_variable"])
    for col in ["means", "variances", "residual_variances"]:
        ok, worst = close(ours.var[col].to_numpy(), theirs.var[col].to_numpy(), 1e-6, 1e-12)
        assert ok, f"{col} differs by up to {worst}"
    r, t = ours.var["highly_variable_rank"].to_numpy(), theirs.var["highly_variable_rank"].to_numpy()
    assert r.dtype == t.dtype and np.array_equal(np.isnan(r), np.isnan(t)) and np.array_equal(r[~np.isnan(r)], t[~np.isnan(t)])
    if batch_key:
        assert np.array_equal(ours.var["highly_variable_nbatches"], theirs.var["highly_variable_nbatches"])
    assert ours.uns["hvg"] == theirs.uns["hvg"]


def test_hvg_pearson_residuals_needs_n_top_genes_and_counts():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    with pytest.raises(ValueError, match="n_top_genes"):
        scpipe.pp.highly_variable_genes(a, flavor="pearson_residuals")
    with pytest.raises(ValueError, match="theta"):
        scpipe.pp.highly_variable_genes(a, flavor="pearson_residuals", n_top_genes=10, theta=0)
    df = scpipe.pp.highly_variable_genes(a, flavor="pearson_residuals", n_top_genes=10, inplace=False, subset=True)
    assert len(df) == 10 and "highly_variable" not in a.var


def test_sqrt_as_scanpys_and_refuses_negatives():
    device_gate()
    a = ad.read_h5ad(data_dir() / COUNTS[1])
    ours, theirs = a.copy(), a.copy()
    scpipe.pp.sqrt(ours)
    sc.pp.sqrt(theirs)
    assert abs(ours.X - theirs.X).max() == 0 and ours.X.dtype == theirs.X.dtype
    d = np.array([[4.0, 9.0], [0.0, 2.25]], dtype=np.float32)
    assert np.array_equal(scpipe.pp.sqrt(d), [[2.0, 3.0], [0.0, 1.5]])
    b = scpipe.pp.sqrt(a, copy=True)
    assert b is not a and abs(b.X - theirs.X).max() == 0 and abs(a.X - ours.X).max() > 0
    bad = ad.AnnData(np.array([[1.0, -1.0]], dtype=np.float32))
    with pytest.raises(ValueError, match="negative"):
        scpipe.pp.sqrt(bad)
    assert bad.X[0, 1] == -1.0


def test_scrublet_doublet_neighbor_parents_as_scanpys():
    device_gate()
    pytest.importorskip("skimage", reason="scanpy's scrublet needs scikit-image for its threshold")
    a = ad.read_h5ad(data_dir() / COUNTS[0])
    ours, theirs = a.copy(), a.copy()
    scpipe.pp.scrublet(ours, get_doublet_neighbor_parents=True)
    sc.pp.scrublet(theirs, get_doublet_neighbor_parents=True, verbose=False)
    o, t = ours.uns["scrublet"]["doublet_neighbor_parents"], theirs.uns["scrublet"]["doublet_neighbor_parents"]
    assert len(o) == len(t) == a.n_obs
    same = np.mean([np.array_equal(x, y) for x, y in zip(o, t)])
    # The cells tied with their doublet with themselves (see above) may differ by one doublet.
    assert same >= 0.99, f"{same:.4f} of the cells have scanpy's parents"


@pytest.mark.parametrize("covariates", [None, ["n_counts"]])
def test_combat_matches_scanpy(covariates):
    """ComBat in f64 as scanpy; X back in float32: within float32 rounding of scanpy's."""
    device_gate()
    ours, theirs = pbmc68k_log(), pbmc68k_log()
    scpipe.pp.combat(ours, "phase", covariates=covariates)
    sc.pp.combat(theirs, "phase", covariates=covariates)
    assert isinstance(ours.X, np.ndarray) and ours.X.dtype == np.float32
    ok, worst = close(ours.X, theirs.X, rtol=1e-6, atol=1e-6)
    assert ok, f"combat differs from scanpy by up to {worst}"
    back = scpipe.pp.combat(pbmc68k_log(), "phase", covariates=covariates, inplace=False)
    assert np.array_equal(back, ours.X)


def test_combat_refuses_bad_input_and_leaves_x():
    device_gate()
    a = pbmc68k_log()
    x = dense(a.X).copy()
    a.obs["one"] = pd.Categorical(["lonely"] + ["many"] * (a.n_obs - 1))
    cases = [
        (dict(key="nope"), ValueError, "nope"),
        (dict(key="phase", covariates=["nope"]), ValueError, "nope"),
        (dict(key="phase", covariates=["phase"]), ValueError, "overlap"),
        (dict(key="one"), ValueError, "lonely"),
        # The batches again under another name: a singular model.
        (dict(key="phase", covariates=["phase_again"]), ValueError, "singular"),
        (dict(key="phase", covariates=["missing_some"]), ValueError, "missing_some"),
    ]
    a.obs["phase_again"] = a.obs["phase"].astype(str)
    a.obs["missing_some"] = pd.Categorical(["x"] + [None] * (a.n_obs - 1), categories=["x", "y"])
    for kw, exc, words in cases:
        with pytest.raises(exc, match=words):
            scpipe.pp.combat(a, **kw)
    assert np.array_equal(dense(a.X), x)


def test_combat_takes_categorical_covariates_as_the_full_rank_model():
    """A categorical covariate is its levels but the first as 0/1 columns: equal to scanpy's
    combat given those columns as numeric covariates (scanpy's own formula keeps every level,
    a singular model). Its effect is kept: the covariate's groups still differ after."""
    device_gate()
    ours, theirs = pbmc68k_log(), pbmc68k_log()
    scpipe.pp.combat(ours, "phase", covariates=["bulk_labels", "n_counts"])
    levels = theirs.obs["bulk_labels"].cat.categories
    dummies = [f"is_{i}" for i in range(1, len(levels))]
    for name, level in zip(dummies, levels[1:]):
        theirs.obs[name] = (theirs.obs["bulk_labels"] == level).astype(np.float64)
    sc.pp.combat(theirs, "phase", covariates=[*dummies, "n_counts"])
    ok, worst = close(ours.X, theirs.X, rtol=1e-6, atol=1e-6)
    assert ok, f"combat with a categorical covariate differs from scanpy's dummies by up to {worst}"
    plain = pbmc68k_log()
    scpipe.pp.combat(plain, "phase")
    assert not np.allclose(dense(plain.X), dense(ours.X), atol=1e-3)


def test_combat_with_genes_of_zero_variance_matches_scanpy():
    """Genes without variance (1,272 of the scvi file's, log-normalized) end scanpy's fixed
    point after one iteration (its criterion turns NaN); ours follows it."""
    device_gate()
    a = ad.read_h5ad(data_dir() / "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad")
    sc.pp.normalize_total(a)
    sc.pp.log1p(a)
    ours, theirs = a.copy(), a.copy()
    scpipe.pp.combat(ours, "batch")
    sc.pp.combat(theirs, "batch")
    ok, worst = close(ours.X, theirs.X, rtol=1e-6, atol=1e-6)
    assert ok, f"combat differs from scanpy by up to {worst}"
