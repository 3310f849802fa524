#!/usr/bin/env python3
"""pp.combat, tl.ingest, tl.paga and tl.dpt (issue 53) at N generated cells, one library and one
function per process: `scpipe-gpu`, `scpipe-cpu` (settings.device) or `scanpy` (1.12, on every
core). Every process prepares the same inputs with scpipe on the GPU (not timed): N cells of 12
groups as 30-dimensional `X_pca` with 4 batches and scpipe's kNN graph (15 neighbours), then
- combat: X dense, N x G (G: GENES, default 1,000) of group and batch effects and noise;
- ingest: a reference of N cells (X: N x 2,000 log counts, 5% stored plus 30 genes a group)
  with scpipe's PCA (50), neighbors and UMAP, and N new cells drawn the same way; the call maps
  `group`, the PCA and the UMAP;
- paga: the groups over the kNN graph;
- dpt: scpipe's diffusion map (15 components), the root cell 0.
(PREP_DEVICE=cpu prepares on the host.) Prints the seconds of each call (CALLS, default 2: the first and a warm one). With SAVE=DIR the
last call's result goes to DIR/<func>_<lib>_<N>.npz, and `compare DIR N` prints how far each
library's result is from scanpy's (combat, dpt: largest difference over the largest value;
paga: largest difference; ingest: labels agreeing, PCA's largest difference, the UMAP's median
distance from scanpy's over the layout's span).
    python3 scripts/device/benchmarks/combat_ingest_paga_dpt.py {scpipe-gpu|scpipe-cpu|scanpy} N FUNC
    python3 scripts/device/benchmarks/combat_ingest_paga_dpt.py compare DIR N"""
import os, sys, time, warnings
import numpy as np

warnings.filterwarnings("ignore")


def base(n, seed=0):
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    group = rng.integers(12, size=n)
    centres = np.random.default_rng(99).normal(scale=1.0, size=(12, 30))
    obs = pd.DataFrame(
        {"group": pd.Categorical(group.astype(str), categories=[str(g) for g in range(12)]),
         "batch": pd.Categorical((np.arange(n) % 4).astype(str))},
        index=[f"c{seed}_{i}" for i in range(n)],
    )
    a = ad.AnnData(sp.csr_matrix((n, 1), dtype=np.float32), obs=obs)
    a.obsm["X_pca"] = (centres[group] + rng.normal(size=(n, 30))).astype(np.float32)
    return a, group


def counts(n, group, seed):
    """N x 2,000 log counts: 100 random genes a cell (1 to 5) and its group's 30 genes at 5."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rand_cols = rng.integers(2000, size=(n, 100))
    group_cols = group[:, None] * 150 + np.arange(30)[None, :]
    cols = np.concatenate([rand_cols, group_cols], axis=1)
    vals = np.concatenate([np.ceil(rng.random((n, 100)) * 5), np.full((n, 30), 5.0)], axis=1)
    m = sp.csr_matrix((vals.ravel().astype(np.float32), cols.ravel(), np.arange(0, n * 130 + 1, 130)),
                      shape=(n, 2000))
    m.sum_duplicates()
    m.data = np.log1p(m.data)
    return m


def prepare(func, n):
    import anndata as ad
    import scpipe

    scpipe.settings.device = os.environ.get("PREP_DEVICE", "gpu")
    a, group = base(n)
    if func == "combat":
        genes = int(os.environ.get("GENES", "1000"))
        rng = np.random.default_rng(5)
        g_eff = np.random.default_rng(6).normal(size=(12, genes)).astype(np.float32)
        b_eff = np.random.default_rng(7).normal(scale=0.5, size=(4, genes)).astype(np.float32)
        batch = np.arange(n) % 4
        x = g_eff[group] + b_eff[batch] + (1.0 + 0.3 * batch[:, None]) * rng.standard_normal((n, genes), dtype=np.float32)
        c = ad.AnnData(x.astype(np.float32), obs=a.obs)
        return (c,)
    if func == "ingest":
        ref = ad.AnnData(counts(n, group, 1), obs=a.obs)
        ref.var_names = [f"g{j}" for j in range(2000)]
        scpipe.pp.pca(ref, n_comps=50)
        scpipe.pp.neighbors(ref)
        scpipe.tl.umap(ref)
        new_base, new_group = base(n, seed=1)
        new = ad.AnnData(counts(n, new_group, 2), obs=new_base.obs[[]])
        new.var_names = ref.var_names
        new.obs["truth"] = new_base.obs["group"].values
        return ref, new
    scpipe.pp.neighbors(a, use_rep="X_pca")
    if func == "dpt":
        scpipe.tl.diffmap(a)
        a.uns["iroot"] = 0
    return (a,)


def search_forest_of_pynndescent_06():
    """scanpy 1.12's ingest rebuilds pynndescent's search forest with the index's
    `n_search_trees`, which pynndescent 0.7 leaves None (a TypeError inside `make_forest`; 0.6
    defaulted it to 1): None means 1 again, as test_scpipe_ingest.py does it."""
    import pynndescent.rp_trees as rp

    make_forest = rp.make_forest

    def with_a_tree_count(data, n_neighbors, n_trees, *args, **kw):
        return make_forest(data, n_neighbors, 1 if n_trees is None else n_trees, *args, **kw)

    rp.make_forest = with_a_tree_count


def run(lib, n, func):
    parts = prepare(func, n)
    if lib.startswith("scpipe"):
        import scpipe as m

        m.settings.device = lib.split("-")[1]
        pp, tl = m.pp, m.tl
    else:
        import scanpy as m

        pp, tl = m.pp, m.tl
    if lib == "scanpy" and func == "ingest":
        search_forest_of_pynndescent_06()
    if func == "combat":
        call = lambda p: pp.combat(p[0], key="batch")
    elif func == "ingest":
        call = lambda p: tl.ingest(p[1], p[0], obs="group")
    elif func == "paga":
        call = lambda p: tl.paga(p[0], groups="group")
    else:
        call = lambda p: tl.dpt(p[0])
    times = []
    for _ in range(int(os.environ.get("CALLS", "2"))):
        fresh = tuple(p.copy() for p in parts)
        t = time.perf_counter()
        call(fresh)
        times.append(time.perf_counter() - t)
    print(f"{lib} {func} {n} cells: " + " / ".join(f"{t:.3f}" for t in times) + " s", flush=True)
    save = os.environ.get("SAVE")
    if save:
        os.makedirs(save, exist_ok=True)
        out = {}
        if func == "combat":
            out["x"] = np.asarray(fresh[0].X, dtype=np.float32)
        elif func == "ingest":
            new = fresh[1]
            out["labels"] = new.obs["group"].astype(str).to_numpy()
            out["truth"] = new.obs["truth"].astype(str).to_numpy()
            out["pca"] = np.asarray(new.obsm["X_pca"], dtype=np.float32)
            out["umap"] = np.asarray(new.obsm["X_umap"], dtype=np.float32)
        elif func == "paga":
            out["conn"] = fresh[0].uns["paga"]["connectivities"].toarray()
        else:
            out["t"] = fresh[0].obs["dpt_pseudotime"].to_numpy()
        np.savez(f"{save}/{func}_{lib}_{n}.npz", **out)


def compare(folder, n):
    def load(func, lib):
        try:
            return np.load(f"{folder}/{func}_{lib}_{n}.npz", allow_pickle=True)
        except FileNotFoundError:
            return None

    for func in ("combat", "ingest", "paga", "dpt"):
        want = load(func, "scanpy")
        for lib in ("scpipe-gpu", "scpipe-cpu"):
            got = load(func, lib)
            if got is None or want is None:
                continue
            if func in ("combat", "dpt"):
                k = "x" if func == "combat" else "t"
                a, b = got[k].astype(np.float64), want[k].astype(np.float64)
                fin = np.isfinite(b)
                scale = np.abs(b[fin]).max()
                line = f"largest difference {np.abs(a[fin] - b[fin]).max() / scale:.2e} of the largest value"
                if func == "dpt":
                    line += f", the same infinite cells: {bool((np.isfinite(a) == fin).all())}"
            elif func == "paga":
                line = f"largest difference {np.abs(got['conn'] - want['conn']).max():.2e}"
            else:
                agree = (got["labels"] == want["labels"]).mean()
                truth = (got["labels"] == got["truth"]).mean()
                pca = np.abs(got["pca"].astype(np.float64) - want["pca"]).max() / np.abs(want["pca"]).max()
                span = np.ptp(want["umap"], axis=0).max()
                moved = np.median(np.linalg.norm(got["umap"] - want["umap"], axis=1)) / span
                line = (f"labels agree {agree:.4f} (scanpy's with the truth {(want['labels'] == want['truth']).mean():.4f}, "
                        f"ours {truth:.4f}); PCA {pca:.2e}; UMAP median {moved:.2%} of the span from scanpy's")
            print(f"{func} {lib} vs scanpy at {n}: {line}", flush=True)
        got, cpu = load(func, "scpipe-gpu"), load(func, "scpipe-cpu")
        if got is not None and cpu is not None:
            same = all(np.array_equal(got[k], cpu[k]) for k in got.files)
            print(f"{func} scpipe-gpu vs scpipe-cpu at {n}: identical {same}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        compare(sys.argv[2], int(sys.argv[3]))
    else:
        run(sys.argv[1], int(sys.argv[2]), sys.argv[3])
