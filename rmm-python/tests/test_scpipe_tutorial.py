"""The drop-in gate: scanpy's clustering tutorial written with scpipe.pp / scpipe.tl in place of
sc.pp / sc.tl, on each real dataset in ../shared/data, each step compared with scanpy's on the
same input (same keys, dtypes and shapes; values at the conformance tolerances), then scanpy's
plotting functions drawing from the result. On the GPU when one is usable (REQUIRE_GPU=1 makes
that a requirement), else on the CPU."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from scpipe_support import Checks, close, data_dir, device_gate, neighbors_match, pca_matches, same_columns, same_slots, sc  # noqa: E402

import scpipe  # noqa: E402
from scpipe.pp import SCANPY_112_FLOAT32_VAR  # noqa: E402
from graph_steps import compare_leiden, compare_markers, compare_umap  # noqa: E402

QC_OBS = [
    "n_genes_by_counts", "log1p_n_genes_by_counts", "total_counts", "log1p_total_counts",
    "pct_counts_in_top_50_genes", "pct_counts_in_top_100_genes", "pct_counts_in_top_200_genes",
    "pct_counts_in_top_500_genes", "total_counts_mt", "log1p_total_counts_mt", "pct_counts_mt",
]
QC_VAR = ["n_cells_by_counts", "mean_counts", "log1p_mean_counts", "pct_dropout_by_counts", "total_counts", "log1p_total_counts"]
HVG_VAR = ["highly_variable", "means", "dispersions", "dispersions_norm"]

# (file, reader, min_genes, min_cells, batch key)
COUNT_DATASETS = [
    ("celltypist_sample_559x32786_counts.h5ad", "h5ad", 100, 3, None),
    ("scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad", "h5ad", 100, 3, "batch"),
    ("10x/v3_filtered_feature_bc_matrix.h5", "10x", 10, 3, None),
]


def read(name: str, reader: str):
    path = data_dir() / name
    if reader == "10x":
        a = sc.read_10x_h5(path)
        a.var_names_make_unique()
        return a
    return sc.read_h5ad(path)


def graph_steps(c: Checks, tag: str, ours) -> None:
    """umap, leiden, rank_genes_groups against scanpy's on our own graph (conformance's gates)."""
    ref = ours.copy()
    scpipe.tl.leiden(ours, flavor="igraph", n_iterations=2)
    sc.tl.leiden(ref, flavor="igraph", n_iterations=2)
    o, t = ours.obs["leiden"].dtype, ref.obs["leiden"].dtype
    c.check(f"{tag} leiden categorical of strings as scanpy's", o.name == t.name == "category" and o.categories.dtype == t.categories.dtype, f"{o} vs {t}")
    # scanpy's keys, and the partition's modularity beside them.
    c.check(f"{tag} uns['leiden'] keys", set(ref.uns["leiden"]) <= set(ours.uns["leiden"]), f"{set(ours.uns['leiden'])} vs {set(ref.uns['leiden'])}")
    compare_leiden(c, tag, ours)
    scpipe.tl.umap(ours)
    compare_umap(c, tag, ours)
    scpipe.tl.rank_genes_groups(ours, "leiden", method="wilcoxon", n_genes=ours.raw.n_vars if ours.raw is not None else ours.n_vars)
    if ours.raw is not None:
        compare_markers(c, tag, ours)
    else:
        ref = ours.copy()
        sc.tl.rank_genes_groups(ref, "leiden", method="wilcoxon", n_genes=ours.n_vars)
        for g in ref.uns["rank_genes_groups"]["names"].dtype.names[:3]:
            o = sc.get.rank_genes_groups_df(ours, group=g).set_index("names")
            t = sc.get.rank_genes_groups_df(ref, group=g).set_index("names").loc[o.index]
            ok, worst = close(o["scores"].to_numpy(), t["scores"].to_numpy(), 1e-4, 1e-4)
            c.check(f"{tag} markers scores of group {g} to 1e-4", ok, f"{worst:.2e}")


def draw(ours) -> None:
    """scanpy's plots read the result unchanged."""
    import matplotlib.pyplot as plt

    gene = ours.var_names[0]
    sc.pl.umap(ours, color=["leiden", gene], show=False)
    sc.pl.rank_genes_groups_dotplot(ours, n_genes=3, show=False)
    sc.pl.rank_genes_groups(ours, n_genes=5, show=False)
    plt.close("all")


@pytest.mark.parametrize("name,reader,min_genes,min_cells,batch_key", COUNT_DATASETS, ids=[d[0].split("_")[0].split("/")[-1] for d in COUNT_DATASETS])
def test_tutorial_on_counts(name, reader, min_genes, min_cells, batch_key):
    device = device_gate()
    a = read(name, reader)
    c = Checks()
    tag = f"{name} ({device})"
    if batch_key is not None:
        c.known_failure(
            f"{tag} umap silhouette",
            "UMAP's seed 0 puts part of leiden cluster 0 beside cluster 5 on this graph: silhouette "
            "0.375 against umap-learn's 0.533; seeds 1-15 give 0.49-0.55 against 0.53-0.545",
            strict=device == "cpu",
        )
    ours = a.copy()
    ours.var["mt"] = np.asarray(ours.var_names.str.startswith("MT-"), dtype=bool)

    def both(step_ours, step_ref, label):
        """Runs the step on ours and scanpy's on a copy of ours before it; returns the copy."""
        ref = ours.copy()
        step_ours(ours)
        step_ref(ref)
        same_slots(c, f"{tag} {label}", ours, ref)
        return ref

    ref = both(lambda x: scpipe.pp.calculate_qc_metrics(x, qc_vars=["mt"], inplace=True, log1p=True),
               lambda x: sc.pp.calculate_qc_metrics(x, qc_vars=["mt"], inplace=True, log1p=True), "qc")
    same_columns(c, f"{tag} qc obs", ours.obs, ref.obs, QC_OBS)
    # scanpy 1.12's dtypes: its genes' means are float32 (1.11's float64).
    for k in SCANPY_112_FLOAT32_VAR:
        c.check(f"{tag} qc var {k!r} float32 as scanpy 1.12", ours.var[k].dtype == np.float32, str(ours.var[k].dtype))
        ref.var[k] = ref.var[k].astype(np.float32)
    same_columns(c, f"{tag} qc var", ours.var, ref.var, QC_VAR)

    ref = both(lambda x: scpipe.pp.filter_cells(x, min_genes=min_genes), lambda x: sc.pp.filter_cells(x, min_genes=min_genes), "filter_cells")
    c.check(f"{tag} filter_cells keeps scanpy's cells", list(ours.obs_names) == list(ref.obs_names), f"{ours.n_obs} vs {ref.n_obs}")
    same_columns(c, f"{tag} filter_cells", ours.obs, ref.obs, ["n_genes"])
    ref = both(lambda x: scpipe.pp.filter_genes(x, min_cells=min_cells), lambda x: sc.pp.filter_genes(x, min_cells=min_cells), "filter_genes")
    c.check(f"{tag} filter_genes keeps scanpy's genes", list(ours.var_names) == list(ref.var_names), f"{ours.n_vars} vs {ref.n_vars}")
    same_columns(c, f"{tag} filter_genes", ours.var, ref.var, ["n_cells"])

    ours.layers["counts"] = ours.X.copy()
    ref = both(scpipe.pp.normalize_total, sc.pp.normalize_total, "normalize_total")
    ok, worst = close(ours.X, ref.X, 1e-5, 1e-6)
    c.check(f"{tag} normalize_total X to 1e-5", ok, f"{worst:.2e}")
    ref = both(scpipe.pp.log1p, sc.pp.log1p, "log1p")
    ok, worst = close(ours.X, ref.X, 1e-5, 1e-6)
    c.check(f"{tag} log1p X to 1e-5", ok, f"{worst:.2e}")
    c.check(f"{tag} uns['log1p']", dict(ours.uns["log1p"]) == dict(ref.uns["log1p"]), str(ours.uns["log1p"]))
    c.check(f"{tag} X stays sparse CSR", ours.X.format == "csr" and ours.X.dtype == np.float32, str(type(ours.X)))
    ours.raw = ours

    ref = both(lambda x: scpipe.pp.highly_variable_genes(x, n_top_genes=2000, batch_key=batch_key),
               lambda x: sc.pp.highly_variable_genes(x, n_top_genes=2000, batch_key=batch_key), "hvg")
    c.check(f"{tag} the same highly variable genes",
            np.array_equal(ours.var["highly_variable"].to_numpy(), ref.var["highly_variable"].to_numpy()),
            f"{int((ours.var['highly_variable'] != ref.var['highly_variable']).sum())} differ")
    extra = ["highly_variable_nbatches", "highly_variable_intersection"] if batch_key else []
    same_columns(c, f"{tag} hvg", ours.var, ref.var, HVG_VAR + extra, rtol=1e-5, atol=1e-6)
    c.check(f"{tag} uns['hvg']", dict(ours.uns["hvg"]) == dict(ref.uns["hvg"]), str(ours.uns["hvg"]))

    ref = both(scpipe.pp.pca, sc.pp.pca, "pca")
    pca_matches(c, tag, ours, ref)
    c.check(f"{tag} uns['pca'] keys", set(ours.uns["pca"]) == set(ref.uns["pca"]), f"{set(ours.uns['pca'])} vs {set(ref.uns['pca'])}")

    if batch_key is not None:
        scpipe.pp.harmony_integrate(ours, batch_key)
        h = ours.obsm["X_pca_harmony"]
        c.check(f"{tag} harmony X_pca_harmony", h.shape == ours.obsm["X_pca"].shape and np.isfinite(h).all(), str(h.shape))

    ref = both(scpipe.pp.neighbors, sc.pp.neighbors, "neighbors")
    neighbors_match(c, tag, ours, ref)

    graph_steps(c, tag, ours)
    draw(ours)
    c.done()


def test_tutorial_on_processed_pbmc68k():
    """pbmc68k_reduced comes scaled (dense X) with log-normalized .raw: the tutorial from PCA on."""
    device = device_gate()
    a = sc.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    for slot in (a.obsm, a.obsp):
        for k in list(slot.keys()):
            del slot[k]
    for k in ("pca", "neighbors", "rank_genes_groups", "louvain", "louvain_colors", "bulk_labels_colors"):
        a.uns.pop(k, None)
    for k in list(a.varm.keys()):
        del a.varm[k]
    c = Checks()
    tag = f"pbmc68k ({device})"
    ours = a.copy()
    ref = ours.copy()
    scpipe.pp.pca(ours)
    sc.pp.pca(ref)
    same_slots(c, f"{tag} pca", ours, ref)
    pca_matches(c, tag, ours, ref)
    ref = ours.copy()
    scpipe.pp.neighbors(ours)
    sc.pp.neighbors(ref)
    neighbors_match(c, tag, ours, ref)
    # leidenalg's own seeds agree only to 0.86-0.98 on this graph (ARI), ours to 0.77-0.96 with
    # the same modularity (0.770 against 0.770-0.771): the agreement gate is checked on the
    # count datasets.
    c.known_failure(f"{tag} leiden ARI", "seed-dependent on pbmc68k's graph", strict=False)
    graph_steps(c, tag, ours)
    # Markers by the dataset's own labels too, with scanpy's default method (t-test).
    scpipe.tl.rank_genes_groups(ours, "bulk_labels", n_genes=ours.raw.n_vars)
    compare_markers(c, f"{tag} bulk_labels t-test", ours)
    draw(ours)
    c.done()


def test_markers_of_some_groups_as_scanpys():
    """`groups`: the tables of the groups asked for, each against every other cell."""
    device_gate()
    a = sc.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    groups = ["Dendritic", "CD14+ Monocyte"]
    ref = a.copy()
    sc.tl.rank_genes_groups(ref, "bulk_labels", groups=groups, method="wilcoxon", n_genes=ref.raw.n_vars)
    scpipe.tl.rank_genes_groups(a, "bulk_labels", groups=groups, method="wilcoxon", n_genes=a.raw.n_vars)
    assert list(a.uns["rank_genes_groups"]["names"].dtype.names) == list(ref.uns["rank_genes_groups"]["names"].dtype.names)
    for g in groups:
        o = sc.get.rank_genes_groups_df(a, group=g).set_index("names")
        t = sc.get.rank_genes_groups_df(ref, group=g).set_index("names").loc[o.index]
        ok, worst = close(o["scores"].to_numpy(), t["scores"].to_numpy(), 1e-4, 1e-4)
        assert ok, f"{g}: scores differ by {worst}"
        ok, worst = close(o["pvals_adj"].to_numpy(), t["pvals_adj"].to_numpy(), 0, 1e-4)
        assert ok, f"{g}: pvals_adj differ by {worst}"
    with pytest.raises(ValueError, match="nope"):
        scpipe.tl.rank_genes_groups(a, "bulk_labels", groups=["nope"])


def test_markers_pts_as_scanpys():
    """`pts=True`: the share of each group's cells, and of the other cells, expressing each gene."""
    device_gate()
    a = sc.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    ref = a.copy()
    sc.tl.rank_genes_groups(ref, "bulk_labels", pts=True)
    scpipe.tl.rank_genes_groups(a, "bulk_labels", pts=True)
    for k in ("pts", "pts_rest"):
        o, t = a.uns["rank_genes_groups"][k], ref.uns["rank_genes_groups"][k]
        assert list(o.columns) == list(t.columns) and list(o.index) == list(t.index), k
        np.testing.assert_allclose(o.to_numpy(), t.to_numpy(), rtol=1e-12, atol=0)
    b = sc.read_h5ad(data_dir() / "pbmc68k_reduced.h5ad")
    scpipe.tl.rank_genes_groups(b, "bulk_labels", groups=["Dendritic"], pts=True, use_raw=False)
    assert list(b.uns["rank_genes_groups"]["pts"].columns) == ["Dendritic"]
