"""Conformance of the steps after neighbors (umap, leiden, rank_genes_groups) with scanpy.

The references run on scpipe's own output (its graph, `X_pca`, `.raw` and leiden labels), so only
the step under test differs. Gates (issue 28):

- UMAP: trustworthiness (k 15, on `X_pca`) at least umap-learn's (through `sc.tl.umap`, same graph)
  minus 0.01; the farthest cell from the layout's median at most 2x umap-learn's, each in units of
  its layout's 99th-percentile distance (no cell flung far out, issue 50); the silhouette of the
  leiden labels in the layout within 0.05 of umap-learn's (ours no worse than theirs minus 0.05).
- Leiden: modularity at least leidenalg's (through `sc.tl.leiden`, same resolution) minus 0.005;
  adjusted Rand index with leidenalg's at least leidenalg's own agreement between two seeds minus
  0.05.
- rank_genes_groups (same groups, same method, scanpy's default call: no tie correction): scores
  and log fold changes within 1e-4 relative, adjusted p-values within 1e-4, the same top 25 genes
  per group (genes whose scores tie at the cut aside); `uns['rank_genes_groups']['params']` as
  scanpy records it. The same for `t-test` and `t-test_overestim_var`, and for `--tie-correct`
  against `tie_correct=True` (issue 50), each a markers-only run of scpipe on the first run's
  output (`compare_marker_calls`).
"""

from __future__ import annotations

import numpy as np
import scanpy as sc
import scipy.sparse as sp
from sklearn.manifold import trustworthiness
from sklearn.metrics import adjusted_rand_score, silhouette_score

from graph_metrics import far_cell_ratio, modularity

TOP = 25


def compare_graph_steps(rep, tag: str, ours) -> None:
    """Checks scpipe's X_umap, obs['leiden'] and uns['rank_genes_groups'] in `ours`."""
    for key, where in [("X_umap", ours.obsm), ("leiden", ours.obs), ("rank_genes_groups", ours.uns)]:
        if key not in where:
            rep.check(f"{tag} {key} present", False)
            return
    compare_umap(rep, tag, ours)
    compare_leiden(rep, tag, ours)
    compare_markers(rep, tag, ours)


def compare_umap(rep, tag: str, ours) -> None:
    theirs = ours.copy()
    sc.tl.umap(theirs, random_state=0)
    x = np.asarray(ours.obsm["X_pca"], dtype=np.float64)
    t_ours = trustworthiness(x, ours.obsm["X_umap"], n_neighbors=15)
    t_theirs = trustworthiness(x, theirs.obsm["X_umap"], n_neighbors=15)
    rep.check(f"{tag} umap trustworthiness >= umap-learn's - 0.01", t_ours >= t_theirs - 0.01, f"{t_ours:.4f} vs {t_theirs:.4f}")
    labels = ours.obs["leiden"].to_numpy()
    if len(np.unique(labels)) > 1:
        s_ours = silhouette_score(ours.obsm["X_umap"], labels)
        s_theirs = silhouette_score(theirs.obsm["X_umap"], labels)
        rep.check(f"{tag} umap silhouette of leiden >= umap-learn's - 0.05", s_ours >= s_theirs - 0.05, f"{s_ours:.4f} vs {s_theirs:.4f}")
    f_ours, f_theirs = far_cell_ratio(ours.obsm["X_umap"]), far_cell_ratio(theirs.obsm["X_umap"])
    rep.check(f"{tag} umap farthest cell <= 2x umap-learn's (in 99th-percentile units)", f_ours <= 2 * f_theirs, f"{f_ours:.2f} vs {f_theirs:.2f}")
    u = ours.uns["umap"]["params"]
    rep.check(f"{tag} uns['umap'] a, b as scanpy's", abs(u["a"] - theirs.uns["umap"]["params"]["a"]) < 1e-6 and abs(u["b"] - theirs.uns["umap"]["params"]["b"]) < 1e-6, f"{u['a']}, {u['b']}")


def compare_leiden(rep, tag: str, ours) -> None:
    graph = ours.obsp["connectivities"]
    runs = []
    for seed in (0, 1):
        a = ours.copy()
        sc.tl.leiden(a, resolution=1.0, random_state=seed, flavor="leidenalg", key_added="ref")
        runs.append(a.obs["ref"].to_numpy())
    labels = ours.obs["leiden"].to_numpy()
    q_ours, q_theirs = modularity(graph, labels), modularity(graph, runs[0])
    rep.check(f"{tag} leiden modularity >= leidenalg's - 0.005", q_ours >= q_theirs - 0.005, f"{q_ours:.4f} vs {q_theirs:.4f}")
    stored = float(ours.uns["leiden"]["modularity"])
    rep.check(f"{tag} uns['leiden']['modularity'] is the partition's", abs(stored - q_ours) < 1e-6, f"{stored:.6f} vs {q_ours:.6f}")
    ari, seeds = adjusted_rand_score(runs[0], labels), adjusted_rand_score(runs[0], runs[1])
    rep.check(f"{tag} leiden ARI with leidenalg >= leidenalg's seed agreement - 0.05", ari >= seeds - 0.05, f"{ari:.3f} vs {seeds:.3f}")
    cats = list(ours.obs["leiden"].cat.categories)
    sizes = ours.obs["leiden"].value_counts().reindex(cats).to_numpy()
    rep.check(f"{tag} leiden categories '0'.. by size", cats == [str(i) for i in range(len(cats))] and all(np.diff(sizes) <= 0), str(list(zip(cats, sizes))[:5]))


# A markers-only run of scpipe on an output that has .raw and leiden's labels: every other step off.
MARKERS_ONLY = ["--no-qc", "--no-filter-cells", "--no-filter-genes", "--no-normalize", "--no-log1p", "--no-hvg",
                "--no-scale", "--no-pca", "--no-neighbors", "--groupby", "leiden"]


def compare_marker_calls(rep, tag: str, run_markers) -> None:
    """The other methods and the tie correction: `run_markers(extra_args)` runs scpipe's markers
    alone on the first run's output and returns the result."""
    for method, tie in [("t-test", False), ("t-test_overestim_var", False), ("wilcoxon", True)]:
        extra = ["--markers-method", method] + (["--tie-correct"] if tie else [])
        try:
            ours = run_markers(MARKERS_ONLY + extra)
        except RuntimeError as e:
            rep.check(f"{tag} markers {' '.join(extra)}: scpipe run", False, str(e).splitlines()[0])
            continue
        compare_markers(rep, f"{tag} markers {' '.join(extra)}:", ours, tie_correct=tie)


def compare_markers(rep, tag: str, ours, tie_correct: bool = False) -> None:
    r = ours.uns["rank_genes_groups"]
    params = r["params"]
    a = ours.copy()
    sc.tl.rank_genes_groups(a, groupby=params["groupby"], method=params["method"], use_raw=True, tie_correct=tie_correct, n_genes=len(r["names"]))
    t = a.uns["rank_genes_groups"]
    rep.check(f"{tag} uns['rank_genes_groups']['params'] as scanpy's", dict(params) == dict(t["params"]), f"{dict(params)} vs {dict(t['params'])}")
    groups = list(r["names"].dtype.names)
    rep.check(f"{tag} rank_genes_groups groups as scanpy's", groups == list(t["names"].dtype.names), f"{groups[:5]}")
    worst = {"scores": 0.0, "logfoldchanges": 0.0, "pvals_adj": 0.0}
    top_ok, detail = True, ""
    full = a.copy()
    sc.tl.rank_genes_groups(full, groupby=params["groupby"], method=params["method"], use_raw=True, tie_correct=tie_correct, n_genes=full.raw.n_vars)
    for g in groups:
        # By gene, over the genes both list (scanpy's order of tied scores is arbitrary).
        ref = sc.get.rank_genes_groups_df(full, group=g).set_index("names")
        mine = sc.get.rank_genes_groups_df(ours, group=g).set_index("names")
        ref = ref.loc[mine.index]
        for col in worst:
            x, y = mine[col].to_numpy(np.float64), ref[col].to_numpy(np.float64)
            if col == "pvals_adj":
                d = np.abs(x - y)
            else:
                d = np.abs(x - y) / np.maximum(np.abs(y), 1e-3)
            worst[col] = max(worst[col], float(np.nanmax(d)) if len(d) else 0.0)
        theirs_top = sc.get.rank_genes_groups_df(full, group=g)
        score_at_cut = float(theirs_top["scores"].iloc[TOP - 1])
        mine_top = set(mine.index[:TOP])
        sure = set(theirs_top[theirs_top["scores"] > score_at_cut + 1e-5 * abs(score_at_cut)]["names"][:TOP])
        if not sure <= mine_top:
            top_ok, detail = False, f"group {g}: {sorted(sure - mine_top)[:5]} missing"
    rep.check(f"{tag} rank_genes_groups scores to 1e-4", worst["scores"] <= 1e-4, f"{worst['scores']:.2e}")
    rep.check(f"{tag} rank_genes_groups logfoldchanges to 1e-4", worst["logfoldchanges"] <= 1e-4, f"{worst['logfoldchanges']:.2e}")
    rep.check(f"{tag} rank_genes_groups pvals_adj to 1e-4", worst["pvals_adj"] <= 1e-4, f"{worst['pvals_adj']:.2e}")
    rep.check(f"{tag} rank_genes_groups top {TOP} genes per group", top_ok, detail)


def compare_repeat(rep, tag: str, first, second) -> None:
    """The same input and seed twice: the same layout and labels bit for bit."""
    same_umap = np.array_equal(np.asarray(first.obsm["X_umap"]), np.asarray(second.obsm["X_umap"]))
    same_leiden = np.array_equal(first.obs["leiden"].to_numpy(), second.obs["leiden"].to_numpy())
    rep.check(f"{tag} the same seed twice: X_umap bit for bit", same_umap)
    rep.check(f"{tag} the same seed twice: leiden labels identical", same_leiden)
