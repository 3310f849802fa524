"""scpipe's Python API as a user meets it: bad input refused with the right exception and the
object unchanged, copy / inplace as scanpy, the accepted matrix layouts, Ctrl-C, the recipe
equal to `scpipe run` bit for bit, and rapids-singlecell's way (anndata_to_GPU / _CPU)."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scpipe_support import ROOT, data_dir, dense, device_gate, sc

import anndata as ad
import scpipe


def counts(n_obs=300, n_vars=400, seed=0, dtype=np.float32):
    """Poisson counts in three groups, gene names with a few MT- genes."""
    rng = np.random.default_rng(seed)
    rates = rng.gamma(0.4, 2.0, size=(3, n_vars))
    groups = rng.integers(0, 3, n_obs)
    x = rng.poisson(rates[groups]).astype(dtype)
    a = ad.AnnData(sp.csr_matrix(x))
    a.var_names = [f"MT-{i}" if i < 5 else f"G{i}" for i in range(n_vars)]
    a.obs_names = [f"c{i}" for i in range(n_obs)]
    a.obs["batch"] = np.where(np.arange(n_obs) % 2 == 0, "a", "b")
    a.var["mt"] = np.asarray(a.var_names.str.startswith("MT-"), dtype=bool)
    return a


def snapshot(a):
    """What must not change when a call fails."""
    x = a.X.copy()
    return (x, a.obs.copy(), a.var.copy(), {k: v.copy() for k, v in a.obsm.items()}, set(a.uns.keys()), set(a.obsp.keys()), a.shape)


def unchanged(a, snap):
    x, obs, var, obsm, uns, obsp, shape = snap
    assert a.shape == shape
    assert np.array_equal(dense(a.X), dense(x), equal_nan=True)
    assert a.obs.equals(obs) and a.var.equals(var)
    assert set(a.obsm.keys()) == set(obsm) and all((a.obsm[k] == v).all() for k, v in obsm.items())
    assert set(a.uns.keys()) == uns and set(a.obsp.keys()) == obsp


def processed(a=None):
    a = counts() if a is None else a
    scpipe.pp.normalize_total(a)
    scpipe.pp.log1p(a)
    scpipe.pp.pca(a, n_comps=10)
    return a


# Bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,exc,words",
    [
        (lambda a: scpipe.pp.neighbors(a), KeyError, "X_pca"),
        (lambda a: scpipe.tl.umap(a), KeyError, "neighbors"),
        (lambda a: scpipe.tl.leiden(a), KeyError, "neighbors"),
        (lambda a: scpipe.tl.rank_genes_groups(a, "nope"), KeyError, "nope"),
        (lambda a: scpipe.pp.normalize_total(a, layer="nope"), KeyError, "nope"),
        (lambda a: scpipe.pp.highly_variable_genes(a, batch_key="nope"), KeyError, "nope"),
        (lambda a: scpipe.pp.calculate_qc_metrics(a, qc_vars=["nope"]), KeyError, "nope"),
        (lambda a: scpipe.pp.harmony_integrate(a, "batch"), KeyError, "X_pca"),
        (lambda a: scpipe.pp.filter_cells(a, min_genes=1, min_counts=1), ValueError, "one of"),
        (lambda a: scpipe.pp.filter_cells(a), ValueError, "one of"),
        (lambda a: scpipe.pp.filter_genes(a, min_cells=-3), ValueError, "min_cells"),
        (lambda a: scpipe.pp.highly_variable_genes(a, flavor="nope"), ValueError, "nope"),
        (lambda a: scpipe.pp.pca(a, n_comps=0), ValueError, "n_comps"),
    ],
)
def test_missing_slots_and_bad_arguments_raise_and_leave_the_object(call, exc, words):
    a = counts()
    snap = snapshot(a)
    with pytest.raises(exc, match=words):
        call(a)
    unchanged(a, snap)


@pytest.mark.parametrize("bad,words", [(np.nan, "NaN"), (-1.0, "negative")])
def test_counts_with_nan_or_negative_values_are_refused(bad, words):
    a = counts()
    a.X.data[3] = bad
    snap = snapshot(a)
    for call in (lambda: scpipe.pp.normalize_total(a), lambda: scpipe.pp.filter_cells(a, min_genes=1),
                 lambda: scpipe.pp.calculate_qc_metrics(a, inplace=True, percent_top=None)):
        with pytest.raises(ValueError, match=words):
            call()
        unchanged(a, snap)


def test_integers_float32_cannot_hold_are_refused_and_small_ones_taken():
    a = counts()
    a.X = a.X.astype(np.int64)
    scpipe.pp.normalize_total(a, target_sum=1e4)
    assert a.X.dtype == np.float32
    np.testing.assert_allclose(np.asarray(a.X.sum(axis=1)).ravel(), 1e4, rtol=1e-4)
    b = counts()
    b.X = b.X.astype(np.int64)
    b.X.data[0] = 2**25
    with pytest.raises(ValueError, match="2\\*\\*24"):
        scpipe.pp.normalize_total(b)


def test_unsupported_layouts_get_a_type_error_naming_what_is_accepted():
    # anndata itself refuses COO in X and layers; a matrix handed over from elsewhere is checked.
    from scpipe import _parts

    with pytest.raises(TypeError, match="CSR or CSC"):
        _parts.matrix_part(sp.coo_matrix(counts().X))
    with pytest.raises(TypeError, match="CSR or CSC"):
        _parts.matrix_part([[1.0, 2.0]])
    b = counts()
    b.layers["text"] = np.full(b.shape, "x")
    with pytest.raises(TypeError, match="numbers"):
        scpipe.pp.log1p(b, layer="text")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="device"):
        scpipe.settings.device = "tpu"
    with pytest.raises(ValueError, match="n_jobs"):
        scpipe.settings.n_jobs = 0


# Layouts, copy and inplace ---------------------------------------------------------------


@pytest.mark.parametrize("layout", ["csr", "csc", "csr_array", "dense", "dense_f", "float64", "int32_indices64"])
def test_every_accepted_layout_gives_the_same_result(layout):
    ref = counts()
    scpipe.pp.normalize_total(ref)
    scpipe.pp.log1p(ref)
    a = counts()
    x = a.X
    a.X = {
        "csr": x,
        "csc": x.tocsc(),
        "csr_array": sp.csr_array(x),
        "dense": x.toarray(),
        "dense_f": np.asfortranarray(x.toarray()),
        "float64": x.astype(np.float64),
        "int32_indices64": sp.csr_matrix((x.data, x.indices.astype(np.int64), x.indptr.astype(np.int64)), shape=x.shape),
    }[layout]
    scpipe.pp.normalize_total(a)
    scpipe.pp.log1p(a)
    np.testing.assert_allclose(dense(a.X), dense(ref.X), rtol=1e-6, atol=1e-7)


def test_copy_returns_a_new_object_and_inplace_false_returns_the_results():
    a = counts()
    snap = snapshot(a)
    b = scpipe.pp.normalize_total(a, copy=True)
    unchanged(a, snap)
    assert b is not a and b.X.sum() != a.X.sum()
    r = scpipe.pp.normalize_total(a, inplace=False)
    unchanged(a, snap)
    assert set(r) == {"X", "norm_factor"} and r["norm_factor"].shape == (a.n_obs,)
    mask, n_genes = scpipe.pp.filter_cells(a, min_genes=60, inplace=False)
    ref_mask, ref_n = sc.pp.filter_cells(a.copy(), min_genes=60, inplace=False)
    unchanged(a, snap)
    assert (mask == ref_mask).all() and (n_genes == ref_n).all()
    obs, var = scpipe.pp.calculate_qc_metrics(a, qc_vars=["mt"], percent_top=None)
    ref_obs, ref_var = sc.pp.calculate_qc_metrics(a.copy(), qc_vars=["mt"], percent_top=None)
    unchanged(a, snap)
    assert set(obs.columns) == set(ref_obs.columns) and set(var.columns) == set(ref_var.columns)
    df = scpipe.pp.highly_variable_genes(processed(a.copy()), n_top_genes=50, inplace=False)
    assert int(df["highly_variable"].sum()) == 50


def test_views_become_objects_of_their_own_as_in_scanpy():
    a = counts()
    v = a[:200]
    scpipe.pp.normalize_total(v)
    assert not v.is_view and v.n_obs == 200
    assert a.X.sum() == counts().X.sum()


def test_layers_and_key_added():
    a = counts()
    a.layers["counts"] = a.X.copy()
    scpipe.pp.normalize_total(a, layer="counts", key_added="nf")
    assert "nf" in a.obs and (a.X != counts().X).nnz == 0
    processed(a)
    scpipe.pp.neighbors(a, n_neighbors=10, key_added="nb")
    assert {"nb_distances", "nb_connectivities"} <= set(a.obsp.keys()) and a.uns["nb"]["params"]["n_neighbors"] == 10
    scpipe.tl.umap(a, neighbors_key="nb", key_added="U")
    scpipe.tl.leiden(a, resolution=[0.5, 1.0], neighbors_key="nb")
    assert "U" in a.obsm and {"leiden_res_0.50", "leiden_res_1.00"} <= set(a.obs.columns)
    scpipe.tl.rank_genes_groups(a, "leiden_res_0.50", key_added="m")
    assert "m" in a.uns and a.uns["m"]["params"]["groupby"] == "leiden_res_0.50"


def test_harmony_corrects_the_batches():
    a = processed()
    scpipe.pp.harmony_integrate(a, "batch")
    h = a.obsm["X_pca_harmony"]
    assert h.shape == a.obsm["X_pca"].shape and np.isfinite(h).all() and not np.allclose(h, a.obsm["X_pca"])


# Ctrl-C -----------------------------------------------------------------------------------


def test_ctrl_c_stops_the_call_and_leaves_the_object_as_it_was():
    a = processed(counts(n_obs=6000, n_vars=300))
    scpipe.pp.neighbors(a)
    snap = snapshot(a)
    # Python's Ctrl-C handler, as an interactive session has it: a process started in the
    # background of a non-interactive shell inherits SIGINT ignored, and Python then installs
    # none (interrupt_main would do nothing).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    start = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            scpipe.tl.umap(a, maxiter=1500)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    waited = time.perf_counter() - start
    assert waited < 2.0, f"Ctrl-C answered after {waited:.1f} s"
    unchanged(a, snap)
    assert "X_umap" not in a.obsm


# One implementation -------------------------------------------------------------------------


def scpipe_binary() -> Path:
    given = os.environ.get("SCPIPE")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for p in [Path(given)] if given else [target / "debug" / "scpipe", target / "release" / "scpipe"]:
        if p.is_file():
            return p
    pytest.skip("no scpipe binary (set SCPIPE, or cargo build -p sc-pipeline --bin scpipe)")


def test_recipe_equals_scpipe_run_bit_for_bit(tmp_path):
    device = device_gate()
    src = data_dir() / "celltypist_sample_559x32786_counts.h5ad"
    out = tmp_path / "out.h5ad"
    subprocess.run([str(scpipe_binary()), "run", str(src), "-o", str(out), "--device", device,
                    "--min-genes", "100", "--min-cells", "3"], check=True, capture_output=True)
    cli = ad.read_h5ad(out)
    a = sc.read_h5ad(src)
    a.obs["mine"] = np.arange(a.n_obs)
    scpipe.pp.recipe(a, min_genes=100, min_cells=3)
    assert a.shape == cli.shape and list(a.obs_names) == list(cli.obs_names) and list(a.var_names) == list(cli.var_names)
    assert "mine" in a.obs, "the user's own columns stay"
    assert (dense(a.X) == dense(cli.X)).all() and (dense(a.raw.X) == dense(cli.raw.X)).all()
    for k in cli.obsm:
        assert np.array_equal(a.obsm[k], cli.obsm[k]), k
    for k in cli.obsp:
        assert (a.obsp[k] != cli.obsp[k]).nnz == 0, k
    for c in cli.obs.columns:
        assert np.array_equal(a.obs[c].to_numpy(), cli.obs[c].to_numpy()), c
    for c in cli.var.columns:
        assert np.array_equal(a.var[c].to_numpy(), cli.var[c].to_numpy()), c
    assert set(a.uns.keys()) == set(cli.uns.keys())
    for f in cli.uns["rank_genes_groups"]["names"].dtype.names:
        assert list(a.uns["rank_genes_groups"]["names"][f]) == list(cli.uns["rank_genes_groups"]["names"][f])


def test_flag_gene_family_and_filter_highly_variable():
    a = counts()
    scpipe.pp.flag_gene_family(a, gene_family_name="mito", gene_family_prefix="MT-")
    assert a.var["mito"].dtype == bool and a.var["mito"].sum() == 5
    scpipe.pp.flag_gene_family(a, gene_family_name="two", gene_family_prefix=["MT-1", "G10"])
    assert sorted(a.var_names[a.var["two"]]) == ["G10", "G100", "G101", "G102", "G103", "G104", "G105",
                                                 "G106", "G107", "G108", "G109", "MT-1"]
    scpipe.pp.flag_gene_family(a, gene_family_name="picked", gene_list=["G7", "MT-0", "absent"])
    assert list(a.var_names[a.var["picked"]]) == ["MT-0", "G7"]
    scpipe.pp.calculate_qc_metrics(a, qc_vars=["mito"], percent_top=None, inplace=True)
    assert "pct_counts_mito" in a.obs
    snap = snapshot(a)
    for bad in [dict(), dict(gene_family_prefix="MT-", gene_list=["G1"]), dict(gene_list="G1")]:
        with pytest.raises(ValueError, match="flag_gene_family"):
            scpipe.pp.flag_gene_family(a, gene_family_name="bad", **bad)
    with pytest.raises(KeyError, match="highly_variable_genes first"):
        scpipe.pp.filter_highly_variable(a)
    unchanged(a, snap)
    scpipe.pp.normalize_total(a)
    scpipe.pp.log1p(a)
    scpipe.pp.highly_variable_genes(a, n_top_genes=50)
    keep = a.var_names[a.var["highly_variable"]]
    x = dense(a[:, keep].X)
    scpipe.pp.filter_highly_variable(a)
    assert list(a.var_names) == list(keep) and np.array_equal(dense(a.X), x)


# rapids-singlecell's way ---------------------------------------------------------------------


def test_rapids_singlecell_flow_line_for_line():
    """`rsc` replaced by `scpipe`: anndata_to_GPU, the pp and tl calls, anndata_to_CPU."""
    if os.environ.get("REQUIRE_GPU") != "1":
        pytest.importorskip("cupy", reason="anndata_to_GPU needs CuPy")
    import cupy  # noqa: F401

    a = counts(n_obs=800, n_vars=1000)
    scpipe.get.anndata_to_GPU(a)
    assert type(a.X).__module__.startswith("cupyx")
    scpipe.pp.flag_gene_family(a, gene_family_name="MT", gene_family_prefix="MT-")
    scpipe.pp.calculate_qc_metrics(a, qc_vars=["MT"], inplace=True)
    scpipe.pp.filter_cells(a, min_genes=50)
    scpipe.pp.filter_genes(a, min_cells=3)
    scpipe.pp.normalize_total(a, target_sum=1e4)
    scpipe.pp.log1p(a)
    scpipe.pp.highly_variable_genes(a, n_top_genes=200, flavor="cell_ranger")
    scpipe.pp.filter_highly_variable(a)
    assert a.n_vars == 200 and type(a.X).__module__.startswith("cupyx")
    scpipe.pp.scale(a, max_value=10)
    scpipe.pp.pca(a, n_comps=20)
    scpipe.pp.neighbors(a)
    scpipe.tl.umap(a)
    scpipe.tl.leiden(a)
    scpipe.tl.rank_genes_groups(a, "leiden", method="wilcoxon")
    scpipe.get.anndata_to_CPU(a)
    # scale made X dense (as rapids-singlecell's does); anndata_to_CPU brought it to the host.
    assert isinstance(a.X, np.ndarray) and a.X.shape == (a.n_obs, 200)
    assert {"X_pca", "X_umap"} <= set(a.obsm.keys()) and "leiden" in a.obs and "rank_genes_groups" in a.uns


@pytest.fixture
def on_gpu():
    """scpipe's calls on the GPU for the test: skipped without one, failed under REQUIRE_GPU=1."""
    import rmm_core

    if not rmm_core.gpu_available:
        if os.environ.get("REQUIRE_GPU") == "1":
            pytest.fail("REQUIRE_GPU=1 but no GPU is usable")
        pytest.skip("no GPU")
    previous = scpipe.settings.device
    scpipe.settings.device = "gpu"
    yield rmm_core
    scpipe.settings.device = previous


def test_regress_out_on_a_gpu_x_stays_on_the_gpu(on_gpu):
    """GPU only: regress_out densifies a CuPy X and regresses it on the GPU, bit for bit the
    host's residuals (continuous and categorical keys); a host X given with the device set to
    'gpu' comes back on the host, the same; a NaN is refused with X untouched."""
    import cupy

    base = processed(counts())
    base.obs["depth"] = np.asarray(base.obs_names.str[1:], dtype=float)
    base.obs["kind"] = pd.Categorical(np.asarray(base.obs_names.str[1:], dtype=int) % 3)
    for keys in (["depth"], ["kind"]):
        ref = base.copy()
        scpipe.settings.device = "cpu"
        scpipe.pp.regress_out(ref, keys)
        scpipe.settings.device = "gpu"
        a = base.copy()
        scpipe.get.anndata_to_GPU(a)
        scpipe.pp.regress_out(a, keys)
        assert isinstance(a.X, cupy.ndarray) and a.X.dtype == cupy.float32
        assert np.array_equal(a.X.get(), ref.X), keys
        h = base.copy()
        scpipe.pp.regress_out(h, keys)
        assert isinstance(h.X, np.ndarray) and np.array_equal(h.X, ref.X), keys
    bad = base.copy()
    bad.X = np.asarray(bad.X.toarray(), dtype=np.float32)
    bad.X[2, 1] = np.nan
    scpipe.get.anndata_to_GPU(bad)
    before = bad.X.get()
    with pytest.raises(ValueError, match="NaN"):
        scpipe.pp.regress_out(bad, ["depth"])
    assert np.array_equal(bad.X.get(), before, equal_nan=True)


def test_a_gpu_x_is_normalized_and_logged_in_its_own_memory(on_gpu):
    """GPU only: a float32 CuPy X is changed where it lies (as rapids-singlecell does, no copy of
    X), with the host's values; values that are not counts are refused before any write, and
    copy / inplace=False leave the user's X alone."""
    ref = counts()
    scpipe.pp.normalize_total(ref)
    scpipe.pp.log1p(ref)
    a = counts()
    scpipe.get.anndata_to_GPU(a)
    ptr = a.X.data.data.ptr
    before = a.X.get()
    b = scpipe.pp.normalize_total(a, copy=True)
    r = scpipe.pp.normalize_total(a, inplace=False)
    assert a.X.data.data.ptr == ptr and (a.X.get() != before).nnz == 0
    assert b.X.data.data.ptr != ptr and r["X"].data.data.ptr != ptr
    scpipe.pp.normalize_total(a)
    scpipe.pp.log1p(a)
    assert a.X.data.data.ptr == ptr
    np.testing.assert_allclose(dense(a.X.get()), dense(ref.X), rtol=1e-6, atol=1e-7)
    for bad in (np.nan, -1.0, np.inf):
        for target_sum in (None, 1e4):
            c = counts()
            c.X.data[3] = bad
            scpipe.get.anndata_to_GPU(c)
            before = c.X.get()
            with pytest.raises(ValueError, match="negative|NaN"):
                scpipe.pp.normalize_total(c, target_sum=target_sum)
            assert np.array_equal(c.X.get().toarray(), before.toarray(), equal_nan=True)


def test_a_dense_gpu_x_goes_through_the_steps_and_stays_dense(on_gpu):
    """GPU only: a dense CuPy X (anndata_to_GPU of a dense X) is read as a CSR copy made on the
    device by the steps that take CSR, and comes back dense, with the host's values."""
    ref = counts()
    ref.X = ref.X.toarray()
    a = ref.copy()
    scpipe.get.anndata_to_GPU(a)
    assert type(a.X).__module__.startswith("cupy") and a.X.ndim == 2
    for ad_ in (ref, a):
        scpipe.pp.calculate_qc_metrics(ad_, qc_vars=["mt"], percent_top=(50, 100), inplace=True)
        scpipe.pp.filter_cells(ad_, min_genes=20)
        scpipe.pp.normalize_total(ad_)
        scpipe.pp.log1p(ad_)
        scpipe.pp.highly_variable_genes(ad_, n_top_genes=100)
        scpipe.pp.pca(ad_, n_comps=5)
    assert type(a.X).__name__ == "ndarray" and type(a.X).__module__.startswith("cupy")
    np.testing.assert_allclose(a.X.get(), dense(ref.X), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a.obs["total_counts"].to_numpy(), ref.obs["total_counts"].to_numpy())
    assert (a.var["highly_variable"] == ref.var["highly_variable"]).all()


# One memory manager ---------------------------------------------------------------------------


def test_the_steps_run_on_rmm_cores_current_device(on_gpu):
    """GPU only: scpipe's GPU steps run on the device rmm_core takes as current, whose resource
    rmm_core.mr sets; a simulated current device is refused by name."""
    rmm_core = on_gpu
    try:
        rmm_core.set_current_device(rmm_core.Device.simulated(1 << 30))
        a = counts()
        snap = snapshot(a)
        with pytest.raises(RuntimeError, match="simulated"):
            scpipe.pp.normalize_total(a)
        unchanged(a, snap)
        rmm_core.set_current_device(None)
        scpipe.pp.normalize_total(a)
    finally:
        rmm_core.set_current_device(None)


def test_the_steps_allocate_from_rmm_cores_resource_and_a_full_pool_raises_memory_error(on_gpu):
    """GPU only: rmm_core.statistics sees the steps' allocations; a pool too small for a step
    makes it raise MemoryError naming the pool, the object unchanged."""
    rmm_core = on_gpu
    try:
        a = counts(n_obs=2000, n_vars=2000)
        with rmm_core.statistics.statistics():
            scpipe.pp.normalize_total(a)
            counted = rmm_core.statistics.get_statistics()
        assert counted["total_count"] > 0 and counted["total_bytes"] >= a.X.data.nbytes, counted
        rmm_core.reinitialize(pool_allocator=True, initial_pool_size=1 << 20, maximum_pool_size=1 << 20)
        b = counts(n_obs=2000, n_vars=2000)
        snap = snapshot(b)
        with pytest.raises(MemoryError, match="out of memory in pool"):
            scpipe.pp.normalize_total(b)
        unchanged(b, snap)
    finally:
        rmm_core.reinitialize(pool_allocator=False)


def test_qc_names_follow_expr_type_and_var_type():
    a = counts()
    a.var["genes_x"] = np.asarray(a.var_names.str.startswith("G1"), dtype=bool)
    kw = dict(qc_vars=["mt", "genes_x"], expr_type="umis", var_type="features", percent_top=(50, 100))
    obs, var = scpipe.pp.calculate_qc_metrics(a, **kw)
    ref_obs, ref_var = sc.pp.calculate_qc_metrics(a.copy(), **kw)
    assert sorted(obs.columns) == sorted(ref_obs.columns) and sorted(var.columns) == sorted(ref_var.columns)
    for c in ref_obs.columns:
        np.testing.assert_allclose(obs[c].to_numpy(np.float64), ref_obs[c].to_numpy(np.float64), rtol=1e-6)


def test_scrublet_and_score_genes_read_a_gpu_x_as_the_host_one(on_gpu):
    """GPU only: scrublet and score_genes read a CuPy X where it lies and give the host X's
    results; X stays on the GPU, untouched."""
    base = counts()
    ref = base.copy()
    scpipe.settings.device = "cpu"
    scpipe.pp.scrublet(ref)
    scpipe.tl.score_genes(ref, list(ref.var_names[:20]), use_raw=False)
    scpipe.settings.device = "gpu"
    a = base.copy()
    scpipe.get.anndata_to_GPU(a)
    before = a.X.copy()
    scpipe.pp.scrublet(a)
    scpipe.tl.score_genes(a, list(a.var_names[:20]), use_raw=False)
    assert type(a.X).__module__.startswith("cupyx") and (a.X != before).nnz == 0
    assert np.array_equal(a.obs["doublet_score"], ref.obs["doublet_score"])
    assert np.array_equal(a.obs["predicted_doublet"], ref.obs["predicted_doublet"])
    assert np.array_equal(a.obs["score"], ref.obs["score"])


def test_aggregate_of_a_gpu_x_is_the_host_ones_bit_for_bit(on_gpu):
    """GPU only: get.aggregate of a CuPy X (by cells, on the GPU; with the median, on the host)
    gives the host X's numbers, bit for bit; X stays on the GPU, untouched."""
    base = counts()
    base.obs["g"] = pd.Categorical((np.arange(base.n_obs) * 7 % 5).astype(str))
    funcs = [["sum", "mean", "var", "count_nonzero"], ["mean", "median"]]
    scpipe.settings.device = "cpu"
    ref = [scpipe.get.aggregate(base, "g", f) for f in funcs]
    scpipe.settings.device = "gpu"
    a = base.copy()
    scpipe.get.anndata_to_GPU(a)
    before = a.X.copy()
    for f, r in zip(funcs, ref):
        ours = scpipe.get.aggregate(a, "g", f)
        assert list(ours.obs_names) == list(r.obs_names)
        for k in f:
            assert ours.layers[k].dtype == r.layers[k].dtype, k
            assert np.array_equal(ours.layers[k], r.layers[k], equal_nan=True), k
    assert type(a.X).__module__.startswith("cupyx") and (a.X != before).nnz == 0


def test_a_host_csr_index_out_of_range_is_refused_by_name():
    """A negative column index or row offset (scipy builds such a matrix without a full check)
    is refused with a ValueError naming the array and the first bad value, before any work."""
    a = counts()
    before = a.X.copy()
    bad = a.copy()
    indices = bad.X.indices.copy()
    indices[[5, 9]] = [-3, -7]
    bad.X = sp.csr_matrix((bad.X.data, indices, bad.X.indptr), shape=bad.X.shape)
    with pytest.raises(ValueError, match=r"X\.indices: index -3 is out of range"):
        scpipe.pp.normalize_total(bad)
    wide = a.copy()
    indptr = wide.X.indptr.astype(np.int64)
    indptr[2] = -1
    wide.X = sp.csr_matrix((wide.X.data, wide.X.indices, indptr), shape=wide.X.shape)
    with pytest.raises(ValueError, match=r"X\.indptr: index -1 is out of range"):
        scpipe.pp.normalize_total(wide)
    assert (a.X != before).nnz == 0


def with_counts(a):
    """``a`` without its genes of no counts (the Pearson residuals refuse them)."""
    return a[:, np.asarray(a.X.sum(axis=0)).ravel() > 0].copy()


def split_and_reversed(x, split=True):
    """``x`` (scipy CSR of whole counts) with each value of 2 or more in its even rows stored as
    two values in the same column (1 and the rest; not with ``split`` off), and every odd row's
    values in reverse column order: a valid, non-canonical CSR that scipy reads as ``x``."""
    indptr, indices, data = [0], [], []
    for r in range(x.shape[0]):
        cols = x.indices[x.indptr[r]:x.indptr[r + 1]]
        vals = x.data[x.indptr[r]:x.indptr[r + 1]]
        if r % 2:
            cols, vals = cols[::-1], vals[::-1]
        for c, v in zip(cols, vals):
            if split and r % 2 == 0 and v >= 2:
                indices += [c, c]
                data += [1.0, v - 1.0]
            else:
                indices.append(c)
                data.append(v)
        indptr.append(len(indices))
    m = sp.csr_matrix((np.array(data, np.float32), np.array(indices, np.int32), np.array(indptr, np.int32)), shape=x.shape)
    assert (m.nnz > x.nnz) == split and (m != x).nnz == 0
    return m


@pytest.mark.parametrize("func", ["pearson", "aggregate", "score_genes"])
def test_a_host_csr_storing_a_column_twice_is_read_summed_as_scipy_does(func):
    """A scipy X whose rows store a column twice (and rows out of column order) gives the
    results of its summed form, as scanpy reads it (the densified rows would keep one value);
    the user's matrix is left as it is."""
    a = with_counts(counts())
    b = a.copy()
    b.X = split_and_reversed(a.X)
    arrays = (b.X.data.copy(), b.X.indices.copy(), b.X.indptr.copy())
    if func == "pearson":
        got = [scpipe.pp.normalize_pearson_residuals(m, inplace=False)["X"] for m in (a, b)]
        assert np.array_equal(got[0], got[1])
    elif func == "aggregate":
        got = [scpipe.get.aggregate(m, "batch", ["sum", "count_nonzero"]) for m in (a, b)]
        assert np.array_equal(got[0].layers["sum"], got[1].layers["sum"])
    else:
        for m in (a, b):
            scpipe.tl.score_genes(m, [f"G{i}" for i in range(10, 40)], random_state=0)
        np.testing.assert_allclose(a.obs["score"], b.obs["score"], rtol=1e-6, atol=1e-7)
    assert all(np.array_equal(x, y) for x, y in zip(arrays, (b.X.data, b.X.indices, b.X.indptr)))


def test_a_gpu_csr_storing_a_column_twice_is_refused_by_name(on_gpu):
    """GPU only: a CuPy X whose row stores a column twice is refused before any work, naming
    the row and sum_duplicates; rows out of column order alone are read as they are; a column
    index past the columns is refused."""
    import cupyx.scipy.sparse as cusparse

    a = with_counts(counts())
    ref = scpipe.pp.normalize_pearson_residuals(a.copy(), inplace=False)["X"]
    x = split_and_reversed(a.X)
    b = a.copy()
    b.X = cusparse.csr_matrix(x)
    with pytest.raises(ValueError, match=r"row \d+ stores a column twice \(call X\.sum_duplicates\(\) first"):
        scpipe.pp.normalize_pearson_residuals(b)
    c = a.copy()
    c.X = cusparse.csr_matrix(split_and_reversed(a.X, split=False))
    assert not c.X.get().has_sorted_indices
    got = scpipe.pp.normalize_pearson_residuals(c, inplace=False)["X"]
    assert np.array_equal(got.get(), ref)
    past = a.copy()
    indices = a.X.indices.copy()
    indices[7] = a.n_vars + 3
    past.X = cusparse.csr_matrix(sp.csr_matrix((a.X.data, indices, a.X.indptr), shape=a.X.shape))
    with pytest.raises(ValueError, match=f"has a column index at or past its {a.n_vars} columns"):
        scpipe.pp.normalize_pearson_residuals(past)


def test_a_malformed_gpu_csr_x_is_refused_by_name(on_gpu):
    """GPU only: row offsets that go back are refused (the extension's check, before any work)
    with a ValueError naming X; int32 and int64 offsets are both taken as they are."""
    import cupy
    import cupyx.scipy.sparse as cusparse

    a = counts()
    scpipe.get.anndata_to_GPU(a)
    ref = scpipe.pp.normalize_total(a.copy(), inplace=False)["X"]
    wide = a.copy()
    wide.X = cusparse.csr_matrix((a.X.data, a.X.indices, a.X.indptr.astype(cupy.int64)), shape=a.X.shape)
    assert np.array_equal(scpipe.pp.normalize_total(wide, inplace=False)["X"].get().toarray(), ref.get().toarray())
    indptr = a.X.indptr.copy()
    indptr[3] = indptr[4] + 1
    a.X = cusparse.csr_matrix((a.X.data, a.X.indices, indptr), shape=a.X.shape)
    with pytest.raises(ValueError, match="X is not a valid CSR matrix"):
        scpipe.pp.normalize_total(a)


def test_a_host_x_stays_on_the_host_through_gpu_steps(on_gpu):
    """GPU only: a host X goes to the device for the steps that read it there (straight from
    scipy's arrays) and comes back a scipy matrix, filtered and scored as on the CPU."""
    a = counts()
    ref = a.copy()
    for device, b in (("cpu", ref), ("gpu", a)):
        scpipe.settings.device = device
        scpipe.pp.filter_cells(b, min_genes=50)
        scpipe.pp.filter_genes(b, min_cells=5)
        scpipe.pp.scrublet(b)
    assert type(a.X).__module__.startswith("scipy") and a.X.format == "csr"
    assert list(a.obs_names) == list(ref.obs_names) and list(a.var_names) == list(ref.var_names)
    assert (a.X != ref.X).nnz == 0
    np.testing.assert_allclose(a.obs["doublet_score"], ref.obs["doublet_score"], rtol=1e-5)


def test_sqrt_of_a_gpu_x_stays_on_the_gpu(on_gpu):
    """GPU only: sqrt of a CuPy X is computed by CuPy where X lies, equal to the host's."""
    a = counts()
    ref = a.copy()
    scpipe.pp.sqrt(ref)
    scpipe.get.anndata_to_GPU(a)
    scpipe.pp.sqrt(a)
    assert type(a.X).__module__.startswith("cupyx")
    assert np.array_equal(a.X.get().toarray(), ref.X.toarray())
