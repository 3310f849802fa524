"""Tools: scanpy's ``sc.tl`` functions on the neighbors graph and the groups (``umap``,
``leiden``, ``rank_genes_groups``), with scanpy's names, arguments, defaults and output slots,
run by scpipe's steps on the GPU (``scpipe.settings.device``) or the CPU. Results are written
only once a step has succeeded.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from scpipe import _parts
from scpipe._settings import settings

__all__ = ["umap", "tsne", "draw_graph", "diffmap", "dpt", "embedding_density", "paga", "leiden", "louvain", "kmeans", "ingest", "rank_genes_groups", "dendrogram", "score_genes", "score_genes_cell_cycle"]

def _graph(adata, neighbors_key: str | None, obsp: str | None = None, unweighted: bool = False) -> dict:
    """The connectivities of ``neighbors_key`` (or ``obsp``), as the steps read them (every
    edge weighing 1 when ``unweighted``)."""
    g = _adjacency(adata, neighbors_key, obsp)
    if unweighted:
        g = g.copy()
        g.data[:] = 1
    return {"connectivities": _parts.matrix_part(g, "the neighbors graph")}


def _adjacency(adata, neighbors_key: str | None, obsp: str | None = None):
    """The connectivities of ``neighbors_key`` (or ``obsp``) as a scipy CSR matrix."""
    if obsp is not None:
        key = obsp
    else:
        nk = neighbors_key or "neighbors"
        if nk not in adata.uns:
            raise KeyError(f"no uns[{nk!r}]: run scpipe.pp.neighbors first")
        key = adata.uns[nk].get("connectivities_key", "connectivities")
    if key not in adata.obsp:
        raise KeyError(f"no obsp[{key!r}]: run scpipe.pp.neighbors first")
    return adata.obsp[key].tocsr()


def _seed(random_state: Any) -> int:
    if random_state is None:
        return int(settings.random_state)
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    raise TypeError("random_state must be an int (or None for scpipe.settings.random_state)")


def umap(
    adata,
    *,
    min_dist: float = 0.5,
    spread: float = 1.0,
    n_components: int = 2,
    maxiter: int | None = None,
    alpha: float = 1.0,
    gamma: float = 1.0,
    negative_sample_rate: int = 5,
    init_pos: str = "spectral",
    random_state: Any = 0,
    a: float | None = None,
    b: float | None = None,
    method: str = "umap",
    key_added: str | None = None,
    neighbors_key: str = "neighbors",
    copy: bool = False,
):
    """A UMAP embedding of the neighbors graph (scanpy's ``umap``).

    Writes ``obsm['X_umap']`` and ``uns['umap']`` (``params`` with ``a`` and ``b``);
    ``key_added`` renames both, as scanpy.
    """
    if a is not None or b is not None:
        raise ValueError("umap: a and b follow from min_dist and spread in scpipe")
    if method != "umap":
        raise ValueError("umap: scpipe has method='umap' only")
    target = adata.copy() if copy else adata
    parts = {"X": _parts.no_x(target.n_obs), "obsp": _graph(target, neighbors_key)}
    params = dict(
        min_dist=min_dist, spread=spread, n_components=n_components, maxiter=maxiter,
        alpha=alpha, gamma=gamma, negative_sample_rate=negative_sample_rate,
        init_pos=init_pos, random_state=_seed(random_state),
    )
    out = _parts.call("umap", parts, params)
    _parts.view_to_actual(target)
    obsm_key, uns_key = (key_added, key_added) if key_added else ("X_umap", "umap")
    target.obsm[obsm_key] = out["obsm"]["X_umap"]
    if "umap" in out["uns"]:
        target.uns[uns_key] = _parts.value_from(out["uns"]["umap"])
    return target if copy else None


def tsne(
    adata,
    n_pcs: int | None = None,
    *,
    n_components: int = 2,
    use_rep: str | None = None,
    perplexity: float = 30,
    metric: str = "euclidean",
    early_exaggeration: float = 12,
    learning_rate: float = 1000,
    random_state: Any = 0,
    use_fast_tsne: bool = False,
    n_jobs: int | None = None,
    key_added: str | None = None,
    copy: bool = False,
    max_iter: int = 1000,
):
    """t-SNE (scanpy's ``tl.tsne``, scikit-learn's ``TSNE`` with scanpy's arguments):
    affinities of each cell's ``3 perplexity + 1`` nearest others, a start from the first two
    principal components, 250 exaggerated iterations then ``max_iter - 250`` more. The
    repulsion: Barnes-Hut (angle 0.5) on the CPU; on the GPU interpolated on a grid and
    convolved by FFT (FIt-SNE's scheme; seconds at a million cells). Reads ``use_rep`` (else X at <= 50 genes, else ``X_pca``), its
    first ``n_pcs`` columns.

    Writes ``obsm['X_tsne']`` (float32) and ``uns['tsne']['params']`` (``key_added`` names
    both), as scanpy. The same input gives the same embedding (its start is the PCA; scikit-
    learn's result is matched by quality, not coordinate for coordinate; so are the GPU's and
    the CPU's). Two components, euclidean metric. On the GPU when ``scpipe.settings.device``
    resolves to it.
    """
    if n_components != 2:
        raise ValueError(f"tsne: scpipe computes 2 components, not {n_components}")
    if metric != "euclidean":
        raise ValueError(f"tsne: scpipe computes the euclidean metric, not {metric!r}")
    _parts.count(max_iter, "tsne: max_iter", 250)
    target = _parts.target(adata, copy)
    obsm, _ = _parts.dense_representation(target, use_rep, n_pcs, "tsne")
    key_uns, key_obsm = ("tsne", "X_tsne") if key_added is None else (key_added, key_added)
    params = {
        "perplexity": float(perplexity),
        "early_exaggeration": float(early_exaggeration),
        "learning_rate": float(learning_rate),
        "max_iter": int(max_iter),
        "random_state": _seed(random_state),
        "key_added": key_obsm,
    }
    out = _parts.call("tsne", {"X": _parts.no_x(target.n_obs), "obsm": obsm}, params)
    target.obsm[key_obsm] = out["obsm"][key_obsm]
    recorded = dict(
        perplexity=perplexity, early_exaggeration=early_exaggeration, learning_rate=learning_rate,
        n_jobs=n_jobs, metric=metric, use_rep=use_rep, n_components=n_components,
    )
    target.uns[key_uns] = {"params": {k: v for k, v in recorded.items() if v is not None}}
    return target if copy else None


_LAYOUTS = ("fr", "drl", "kk", "grid_fr", "lgl", "rt", "rt_circular", "fa")


def draw_graph(
    adata,
    layout: str = "fa",
    *,
    init_pos: str | bool | None = None,
    root: int | None = None,
    random_state: Any = 0,
    n_jobs: int | None = None,
    adjacency: Any = None,
    key_added_ext: str | None = None,
    neighbors_key: str | None = None,
    obsp: str | None = None,
    copy: bool = False,
    **kwds,
):
    """Force-directed layout of the neighbors graph (scanpy's ``tl.draw_graph``).

    ``layout='fa'`` (the default): ForceAtlas2 (Jacomy et al. 2014) in Rust with the settings
    scanpy gives fa2-modified (scaling 2, gravity 1, Barnes-Hut angle 1.2, jitter tolerance
    1; ``maxiter`` or ``iterations``: 500), all cells' forces at once, on the GPU when
    ``settings.device`` has one (the host's layout bit for bit), else on the host's cores; it
    needs no fa2-modified (scanpy falls back to ``'fr'`` without it). Any other of scanpy's
    layouts runs igraph's as scanpy does (igraph must be installed).

    The start: ``init_pos`` naming an ``obsm`` key, ``'paga'`` (or ``True``: around the
    groups' positions of ``uns['paga']['pos']``, which ``sc.pl.paga`` writes), else scanpy's
    ``np.random.seed(random_state); np.random.random((n, 2))`` (drawn here without touching
    numpy's global state). The same start gives the same layout bit for bit, on either device.

    Writes ``obsm[f'X_draw_graph_{key_added_ext or layout}']`` (float64) and
    ``uns['draw_graph']['params']`` (``layout``, ``random_state``), as scanpy.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"Provide a valid layout, one of {_LAYOUTS}.")
    iterations = kwds.pop("maxiter", kwds.pop("iterations", 500)) if layout == "fa" else None
    if layout == "fa" and kwds:
        raise TypeError(f"draw_graph: layout 'fa' takes maxiter (or iterations), not {sorted(kwds)}")
    target = adata.copy() if copy else adata
    if adjacency is None:
        adjacency = _adjacency(target, neighbors_key, obsp)
    elif adjacency.shape != (target.n_obs, target.n_obs):
        raise ValueError(f"draw_graph: adjacency is {adjacency.shape}, not cells x cells ({target.n_obs})")
    if isinstance(init_pos, str) and init_pos in target.obsm:
        start = np.asarray(_parts.host(target.obsm[init_pos]), dtype=np.float64)
        if start.ndim != 2 or start.shape[0] != target.n_obs or start.shape[1] < 2:
            raise ValueError(f"draw_graph: obsm[{init_pos!r}] has shape {start.shape}, not cells x 2")
        start = start[:, :2]
    elif init_pos == "paga" or (init_pos and not isinstance(init_pos, str)):
        _parts.numpy_seed(random_state, "random_state")
        start = _start_from_paga(target, random_state)
    elif init_pos:
        raise KeyError(f"draw_graph: init_pos {init_pos!r} is neither an obsm key nor 'paga'")
    else:
        _parts.numpy_seed(random_state, "random_state")
        start = None
    if layout == "fa":
        _parts.count(iterations, "draw_graph: maxiter", 0)
        import scipy.sparse as sp

        graph = _parts.matrix_part(sp.csr_matrix(adjacency), "the neighbors graph")
        parts = {"X": _parts.no_x(target.n_obs), "obsp": {"connectivities": graph}}
        # The seed draws the start when none is given (checked above); else it is only recorded.
        seed = int(random_state) if start is None else 0
        params = {"iterations": int(iterations), "random_state": seed, "key_ext": key_added_ext}
        if start is not None:
            parts["obsm"] = {"start": np.ascontiguousarray(start, dtype=np.float64)}
        out = _parts.call("draw_graph", parts, params)
        positions = out["obsm"][f"X_draw_graph_{key_added_ext or layout}"]
    else:
        positions = _igraph_layout(adjacency, layout, start, root, random_state, kwds)
    _parts.view_to_actual(target)
    target.uns["draw_graph"] = {"params": dict(layout=layout, random_state=random_state)}
    target.obsm[f"X_draw_graph_{key_added_ext or layout}"] = positions
    return target if copy else None


def _start_from_paga(adata, random_state: int) -> np.ndarray:
    """scanpy's start around the PAGA groups' positions: each group's cells spread by uniform
    draws over the half-way segment towards its most connected neighbour group."""
    if "pos" not in adata.uns.get("paga", {}):
        raise ValueError("Plot PAGA first, so that `adata.uns['paga']['pos']` exists.")
    rng = np.random.RandomState(random_state)
    groups = adata.obs[adata.uns["paga"]["groups"]]
    pos = np.asarray(adata.uns["paga"]["pos"], dtype=np.float64)
    coarse = adata.uns["paga"]["connectivities"]
    start = np.ones((adata.n_obs, 2))
    for i, group_pos in enumerate(pos):
        subset = (groups == groups.cat.categories[i]).to_numpy()
        linked = coarse[i].nonzero()
        if len(linked[1]) > 0:
            nearest = linked[1][np.argmax(coarse[i][linked])]
            dist = group_pos - pos[nearest]
            start[subset] = group_pos - 0.5 * dist + rng.random_sample((int(subset.sum()), 2)) * dist
        else:
            start[subset] = group_pos
    return start


def _igraph_layout(adjacency, layout: str, start, root, random_state, kwds: dict) -> np.ndarray:
    """igraph's ``layout`` of the graph, as scanpy runs it: Python's ``random`` seeded with
    ``random_state`` (igraph draws from it), the start for the layouts that take one."""
    import random

    try:
        import igraph as ig
    except ImportError as e:
        raise ImportError(f"draw_graph: layout {layout!r} is igraph's; install python-igraph, or use layout='fa'") from e
    n = adjacency.shape[0]
    sources, targets = adjacency.nonzero()
    weights = np.asarray(adjacency[sources, targets]).ravel()
    if start is None:
        start = np.random.RandomState(random_state).random_sample((n, 2))
    random.seed(random_state)
    graph = ig.Graph(directed=None)
    graph.add_vertices(n)
    graph.add_edges(list(zip(sources.tolist(), targets.tolist())))
    graph.es["weight"] = weights
    if layout in {"fr", "drl", "kk", "grid_fr"}:
        coords = graph.layout(layout, seed=start.tolist(), **kwds)
    elif "rt" in layout:
        coords = graph.layout(layout, root=[root] if root is not None else None, **kwds)
    else:
        coords = graph.layout(layout, **kwds)
    return np.array(coords.coords)


def diffmap(adata, n_comps: int = 15, *, neighbors_key: str | None = None, random_state: Any = 0, copy: bool = False):
    """The diffusion map of the neighbors graph (scanpy's ``tl.diffmap``, Coifman and Lafon
    2006): the ``n_comps`` eigenvectors of largest eigenvalue magnitude of the graph's
    symmetric, density-normalized transition matrix, the first one the steady state.

    Writes ``obsm['X_diffmap']`` (float32, cells x ``n_comps``) and ``uns['diffmap_evals']``
    (float32, decreasing), as scanpy. Each component's sign is arbitrary in scanpy (ARPACK's);
    ours has its entry of largest magnitude positive. Computed in Rust by a thick-restart
    Lanczos solver in f64: on the GPU when ``settings.device`` gives one (the host's
    bits), else on the host.
    """
    nk = neighbors_key or "neighbors"
    if nk not in adata.uns:
        raise ValueError("You need to run `pp.neighbors` first to compute a neighborhood graph.")
    if isinstance(n_comps, bool) or not isinstance(n_comps, (int, np.integer)) or n_comps <= 2:
        raise ValueError(f"Provide any value greater than 2 for `n_comps` (got {n_comps!r}).")
    target = adata.copy() if copy else adata
    parts = {"X": _parts.no_x(target.n_obs), "obsp": _graph(target, neighbors_key)}
    out = _parts.call("diffmap", parts, {"n_comps": int(n_comps), "random_state": _seed(random_state)})
    _parts.view_to_actual(target)
    target.obsm["X_diffmap"] = out["obsm"]["X_diffmap"]
    target.uns["diffmap_evals"] = _parts.value_from(out["uns"]["diffmap_evals"])
    return target if copy else None


def dpt(
    adata,
    n_dcs: int = 10,
    *,
    n_branchings: int = 0,
    min_group_size: float = 0.01,
    allow_kendall_tau_shift: bool = True,
    neighbors_key: str | None = None,
    copy: bool = False,
):
    """Diffusion pseudotime (scanpy's ``tl.dpt``, Haghverdi et al. 2016): each cell's DPT
    distance from the root cell (``uns['iroot']``, or the cell closest to ``uns['xroot']`` /
    ``var['xroot']``) over the first ``n_dcs`` diffusion components, divided by the largest;
    cells outside the root's connected component get ``inf``.

    With ``n_branchings > 0``, scanpy's ``haghverdi16`` branchings too: segments split from
    their tips where the Kendall tau of the distances to the other tips changes most, segments
    of at most ``min_group_size`` cells (a share of all cells below 1) left whole. Costs
    ``O(m^2)`` in a segment's ``m`` cells, as scanpy's.

    Writes ``obs['dpt_pseudotime']`` (float32) and ``uns['iroot']``, as scanpy; with
    branchings also ``obs['dpt_groups']`` (categorical), ``obs['dpt_order']``,
    ``obs['dpt_order_indices']``, ``uns['dpt_changepoints']`` and ``uns['dpt_grouptips']``.
    Runs :func:`diffmap` first (with a warning) when there is no ``X_diffmap``. Without a root
    it warns and, as scanpy, computes only the branchings (from cell 0).
    """
    nk = neighbors_key or "neighbors"
    if nk not in adata.uns:
        raise ValueError("You need to run `pp.neighbors` and `tl.diffmap` first.")
    if n_branchings < 0 or not (min_group_size >= 0):
        raise ValueError(f"dpt: n_branchings and min_group_size must be >= 0, got {n_branchings} and {min_group_size}")
    target = adata.copy() if copy else adata
    root = _dpt_root(target)
    if root is None:
        warnings.warn(
            "No root cell found. To compute pseudotime, pass the index or expression vector of a root cell, one of:\n"
            "    adata.uns['iroot'] = root_cell_index\n    adata.var['xroot'] = adata[root_cell_name, :].X",
            UserWarning,
            stacklevel=2,
        )
        if n_branchings == 0:
            return target if copy else None
    if "X_diffmap" not in target.obsm:
        warnings.warn("Trying to run `tl.dpt` without prior call of `tl.diffmap`. Falling back to `tl.diffmap` with default parameters.", UserWarning, stacklevel=2)
        diffmap(target, neighbors_key=neighbors_key)
    evals = np.asarray(target.uns["diffmap_evals"], dtype=np.float32)
    if n_dcs is not None and n_dcs > len(evals):
        raise ValueError(f"Cannot instantiate using `n_dcs`={n_dcs}. Compute diffmap/spectrum with more components first.")
    k = len(evals) if n_dcs is None else int(n_dcs)
    basis = np.ascontiguousarray(np.asarray(target.obsm["X_diffmap"])[:, :k], dtype=np.float32)
    parts = {"X": _parts.no_x(target.n_obs), "obsm": {"X_diffmap": basis}, "obsp": _graph(target, neighbors_key)}
    params = {
        "evals": [float(v) for v in evals[:k]],
        "iroot": None if root is None else int(root),
        "n_branchings": int(n_branchings),
        "min_group_size": float(min_group_size),
        "allow_kendall_tau_shift": bool(allow_kendall_tau_shift),
    }
    out = _parts.call("dpt", parts, params)
    _parts.view_to_actual(target)
    if root is not None:
        target.uns["iroot"] = root
        target.obs["dpt_pseudotime"] = _parts.column_from(out["obs"]["dpt_pseudotime"])
    if n_branchings > 0:
        for key in ("dpt_groups", "dpt_order", "dpt_order_indices"):
            target.obs[key] = _parts.column_from(out["obs"][key])
        for key in ("dpt_changepoints", "dpt_grouptips"):
            target.uns[key] = _parts.value_from(out["uns"][key])
    return target if copy else None


def _dpt_root(adata) -> int | None:
    """scanpy's root cell: ``uns['iroot']`` (ignored, with a warning, when out of range), else
    the cell whose X is closest to ``uns['xroot']`` or ``var['xroot']``."""
    if "iroot" in adata.uns:
        root = int(adata.uns["iroot"])
        if root >= adata.n_obs:
            warnings.warn(f"Root cell index {root} does not exist for {adata.n_obs} samples. It's ignored.", UserWarning, stacklevel=3)
            return None
        return root
    xroot = adata.uns.get("xroot", adata.var["xroot"] if "xroot" in adata.var else None)
    if xroot is None:
        return None
    xroot = np.asarray(xroot, dtype=np.float64).ravel()
    if xroot.size != adata.n_vars:
        return None
    x = _parts.host(adata.X)
    if hasattr(x, "toarray"):
        sq = np.asarray(x.multiply(x).sum(axis=1)).ravel() - 2 * np.asarray(x @ xroot).ravel() + xroot @ xroot
    else:
        diff = np.asarray(x, dtype=np.float64) - xroot
        sq = np.einsum("ij,ij->i", diff, diff)
    return int(np.argmin(sq))


def embedding_density(
    adata,
    basis: str = "umap",
    *,
    groupby: str | None = None,
    key_added: str | None = None,
    components: str | Sequence[str] | None = None,
):
    """The density of cells in an embedding (scanpy's ``tl.embedding_density``): each cell's
    Gaussian kernel density estimate (scipy's ``gaussian_kde``: Scott's bandwidth) among all
    cells, or among the cells of its ``groupby`` category, scaled to ``[0, 1]``.

    Writes ``obs[key_added or f'{basis}_density[_{groupby}]']`` and ``uns[f'{key}_params']``
    (``covariate``, ``components``), as scanpy. ``components``: two, 1-based (``"1,2"``; for
    ``diffmap`` counted after the steady state). Every pair of cells of a group is summed
    (quadratic in the group's size): on the GPU when scpipe runs on one (seconds at a million
    cells), else on the host in Rust.
    """
    basis = basis.lower()
    if basis == "fa":
        basis = "draw_graph_fa"
    if f"X_{basis}" not in adata.obsm:
        raise ValueError(f"Cannot find the embedded representation `adata.obsm['X_{basis}']`. Compute the embedding first.")
    if components is None:
        components = "1,2"
    if isinstance(components, str):
        components = components.split(",")
    components = np.array(components).astype(int) - 1
    if len(components) != 2:
        raise ValueError("Please specify exactly 2 components, or `None`.")
    if basis == "diffmap":
        components += 1
    embedding = np.asarray(adata.obsm[f"X_{basis}"])
    if components.min() < 0 or components.max() >= embedding.shape[1]:
        raise ValueError(f"components {list(components + 1)} are not among the {embedding.shape[1]} of X_{basis}")
    if groupby is not None:
        if groupby not in adata.obs:
            raise ValueError(f"Could not find {groupby!r} `.obs` column.")
        if adata.obs[groupby].dtype.name != "category":
            raise ValueError(f"{groupby!r} column does not contain categorical data")
        codes = adata.obs[groupby].cat.codes.to_numpy().astype(np.int64)
    else:
        codes = np.zeros(adata.n_obs, dtype=np.int64)
    key = key_added if key_added is not None else f"{basis}_density_{groupby}" if groupby is not None else f"{basis}_density"
    xy = np.ascontiguousarray(embedding[:, components], dtype=np.float64)
    names = adata.obs[groupby].cat.categories if groupby is not None else pd.Index(["all cells"])
    sizes = np.bincount(codes[codes >= 0], minlength=len(names))
    if (small := [str(names[g]) for g in range(len(names)) if 0 < sizes[g] < 3]):
        raise ValueError(f"embedding_density: groups {small} have fewer than 3 cells; the density needs 3 or more")
    n_groups = len(names)
    out = _parts.call("embedding_density", {"X": _parts.no_x(adata.n_obs), "obsm": {"xy": xy}}, {"groups": codes, "n_groups": n_groups, "key_added": key})
    _parts.view_to_actual(adata)
    adata.obs[key] = _parts.column_from(out["obs"][key])
    if basis != "diffmap":
        components += 1
    adata.uns[f"{key}_params"] = dict(covariate=groupby, components=components.tolist())


def paga(
    adata,
    groups: str | None = None,
    *,
    use_rna_velocity: bool = False,
    model: str = "v1.2",
    neighbors_key: str | None = None,
    copy: bool = False,
):
    """Partition-based graph abstraction (scanpy's ``tl.paga``, Wolf et al. 2019, model
    v1.2): how connected each pair of ``groups`` (default ``leiden``, else ``louvain``) is in
    the kNN graph, the kNN edges between them (both ways) over those a random graph with the
    same out-degrees would have, at most 1.

    Writes ``uns['paga']`` (``connectivities``: groups x groups CSR; ``connectivities_tree``:
    its maximum spanning tree, the edges scipy's ``minimum_spanning_tree`` of the inverse keeps,
    as scanpy, ties included; ``groups``) and ``uns[f'{groups}_sizes']``, computed in Rust. Model v1.0 and RNA velocity are not computed by scpipe.
    """
    import scipy.sparse as sp

    nk = neighbors_key or "neighbors"
    if nk not in adata.uns:
        raise ValueError("You need to run `pp.neighbors` first to compute a neighborhood graph.")
    if use_rna_velocity or model != "v1.2":
        raise NotImplementedError("paga: scpipe computes model 'v1.2' connectivities (no RNA velocity)")
    if groups is None:
        groups = next((k for k in ("leiden", "louvain") if k in adata.obs.columns), None)
    if groups is None:
        raise ValueError("You need to run `tl.leiden` or `tl.louvain` to compute community labels, or specify `groups='an_existing_key'`")
    if groups not in adata.obs.columns:
        raise KeyError(f"`groups` key {groups!r} not found in `adata.obs`.")
    target = adata.copy() if copy else adata
    _parts.view_to_actual(target)
    if not isinstance(target.obs[groups].dtype, pd.CategoricalDtype):
        target.obs[groups] = target.obs[groups].astype("category")  # as scanpy's sanitize_anndata
    codes = target.obs[groups].cat.codes.to_numpy().astype(np.int64)
    if (codes < 0).any():
        raise ValueError(f"paga: {int((codes < 0).sum())} cells have no {groups!r} category")
    dist_key = target.uns[nk].get("distances_key", "distances")
    if dist_key not in target.obsp:
        raise KeyError(f"no obsp[{dist_key!r}]: run scpipe.pp.neighbors first")
    graph = target.obsp[dist_key].tocsr()
    n_groups = len(target.obs[groups].cat.categories)
    parts = {"X": _parts.no_x(target.n_obs), "obsp": {"distances": _parts.matrix_part(graph, f"obsp[{dist_key!r}]")}}
    out = _parts.call("paga", parts, {"groups": codes, "n_groups": n_groups})
    result = _parts.value_from(out["uns"]["paga"])
    connectivities = sp.csr_matrix(np.asarray(result["connectivities"], dtype=np.float64))
    tree = sp.csr_matrix(np.asarray(result["connectivities_tree"], dtype=np.float64))
    paga_uns = target.uns.get("paga", {})
    paga_uns.update(connectivities=connectivities, connectivities_tree=tree, groups=groups)
    target.uns["paga"] = paga_uns
    target.uns[f"{groups}_sizes"] = np.asarray(result["sizes"])
    return target if copy else None


def leiden(
    adata,
    resolution: float | Iterable[float] = 1,
    *,
    random_state: Any = 0,
    key_added: str = "leiden",
    n_iterations: int = -1,
    flavor: str = "leidenalg",
    neighbors_key: str | None = None,
    obsp: str | None = None,
    beta: float = 0.01,
    copy: bool = False,
    **_clustering_args,
):
    """Leiden communities of the neighbors graph (scanpy's ``leiden``; its ``igraph`` and
    ``leidenalg`` flavours are both the same modularity optimisation here).

    ``resolution`` may be a list: one column per resolution, ``{key_added}_res_{r:4.2f}``
    (scanpy's tutorial's naming), all from one pass over the graph.

    Writes ``obs[key_added]`` (categorical, ``"0"``, ``"1"``, ... by decreasing size) and
    ``uns[key_added]`` (``params``, ``modularity``).
    """
    if flavor not in ("leidenalg", "igraph"):
        raise ValueError(f"flavor must be 'leidenalg' or 'igraph', not {flavor!r}")
    target = adata.copy() if copy else adata
    if np.isscalar(resolution):
        resolutions, keys = [float(resolution)], [key_added]
    else:
        resolutions = [float(r) for r in resolution]
        keys = [f"{key_added}_res_{r:4.2f}" for r in resolutions]
    parts = {"X": _parts.no_x(target.n_obs), "obsp": _graph(target, neighbors_key, obsp)}
    params = dict(
        resolutions=resolutions, keys=keys, n_iterations=n_iterations,
        random_state=_seed(random_state), beta=beta,
    )
    out = _parts.call("leiden", parts, params)
    _parts.view_to_actual(target)
    for k in keys:
        target.obs[k] = _parts.column_from(out["obs"][k])
        u = _parts.value_from(out["uns"][k])
        u.setdefault("params", {})["flavor"] = flavor
        target.uns[k] = u
    return target if copy else None


def louvain(
    adata,
    resolution: float | None = None,
    *,
    random_state: Any = 0,
    restrict_to: Any = None,
    key_added: str = "louvain",
    adjacency: Any = None,
    flavor: str = "vtraag",
    directed: bool = True,
    use_weights: bool = False,
    partition_type: Any = None,
    partition_kwargs: Any = None,
    neighbors_key: str | None = None,
    obsp: str | None = None,
    copy: bool = False,
):
    """Louvain communities of the neighbors graph (scanpy's ``tl.louvain``, Blondel et al.
    2008): modularity at ``resolution`` (``None``: 1) optimised by local moving and
    aggregation, without Leiden's refinement, until an iteration changes nothing.

    ``use_weights=False`` (scanpy's default) counts every edge as 1; ``True`` uses the
    connectivities (rapids-singlecell's default). The ``vtraag`` and ``igraph`` flavours are
    the same optimisation here. Writes ``obs[key_added]`` (categorical, ``"0"``, ``"1"``, ... by
    decreasing size) and ``uns[key_added]`` (``params``: resolution and random_state;
    ``modularity``, of the graph optimised).
    """
    if flavor not in ("vtraag", "igraph"):
        raise ValueError(f"flavor must be 'vtraag' or 'igraph', not {flavor!r}")
    for name, v in [("restrict_to", restrict_to), ("adjacency", adjacency), ("partition_type", partition_type), ("partition_kwargs", partition_kwargs)]:
        if v is not None:
            raise NotImplementedError(f"louvain: {name} is not supported by scpipe")
    r = 1.0 if resolution is None else float(resolution)
    target = adata.copy() if copy else adata
    parts = {"X": _parts.no_x(target.n_obs), "obsp": _graph(target, neighbors_key, obsp, unweighted=not use_weights)}
    params = dict(resolutions=[r], keys=[key_added], n_iterations=-1, random_state=_seed(random_state), refine=False)
    out = _parts.call("leiden", parts, params)
    _parts.view_to_actual(target)
    target.obs[key_added] = _parts.column_from(out["obs"][key_added])
    u = _parts.value_from(out["uns"][key_added])
    target.uns[key_added] = {"params": {"resolution": resolution, "random_state": random_state}, "modularity": u["modularity"]}
    return target if copy else None


def _fractions_expressing(x, labels, order: list, genes):
    """scanpy's ``pts`` and ``pts_rest``: for each group (columns, in ``order``), the share of
    its cells, and of all other cells, in which each gene (rows) has a value other than 0. One
    sparse product of the groups' indicator with X's non-zero pattern, where X lies (NumPy /
    SciPy on the host, CuPy on the GPU)."""
    import pandas as pd
    import scipy.sparse as sp

    on_gpu = _parts._cupy_module(x)
    if on_gpu:
        import cupy as xp
        import cupyx.scipy.sparse as xsp
    else:
        xp, xsp = np, sp
    n = x.shape[0]
    names = [str(c) for c in labels.cat.categories]
    codes = np.asarray(labels.cat.codes)
    wanted = np.array([names.index(g) for g in order])
    # Each cell's row in the indicator: its group's place in `order` (cells of other groups,
    # and unlabelled ones, count only in the rest).
    place = np.full(len(names) + 1, -1)
    place[wanted] = np.arange(len(order))
    rows = place[codes]
    keep = np.flatnonzero(rows >= 0)
    if xsp.issparse(x):
        nz = x.tocsr(copy=True)
        nz.data = (nz.data != 0).astype(xp.float32)
    else:
        nz = xsp.csr_matrix((xp.asarray(x) != 0).astype(xp.float32))
    ind = xsp.csr_matrix(
        (xp.ones(len(keep), dtype=xp.float32), (xp.asarray(rows[keep]), xp.asarray(keep))),
        shape=(len(order), n),
    )
    counts = ind @ nz
    counts = counts.toarray() if xsp.issparse(counts) else xp.asarray(counts)
    every = xp.asarray(nz.sum(axis=0)).ravel()
    if on_gpu:
        counts, every = counts.get(), every.get()
    counts = counts.astype(np.float64)
    sizes = np.bincount(rows[keep], minlength=len(order)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        pts = counts / sizes[:, None]
        pts_rest = (every.astype(np.float64)[None, :] - counts) / (n - sizes)[:, None]
    index = pd.Index(_parts.names(genes))
    return (
        pd.DataFrame(pts.T, index=index, columns=order),
        pd.DataFrame(pts_rest.T, index=index, columns=order),
    )


def rank_genes_groups(
    adata,
    groupby: str,
    *,
    mask_var=None,
    use_raw: bool | None = None,
    groups: Any = "all",
    reference: str = "rest",
    n_genes: int | None = None,
    rankby_abs: bool = False,
    pts: bool = False,
    key_added: str | None = None,
    copy: bool = False,
    method: str | None = None,
    corr_method: str = "benjamini-hochberg",
    tie_correct: bool = False,
    layer: str | None = None,
    **_kwds,
):
    """Marker genes of each group (or of ``groups``) against all other cells (scanpy's
    ``rank_genes_groups``):
    ``t-test`` (the default), ``t-test_overestim_var`` or ``wilcoxon`` (``tie_correct`` off by
    default, as scanpy), or ``logreg``: the coefficients of scikit-learn's
    ``LogisticRegression`` as scanpy fits it (``C``, ``max_iter``, ``tol`` taken, with
    scikit-learn's meaning and defaults: L-BFGS until the mean loss's gradient is under
    ``tol=1e-4``, or ``max_iter=100`` iterations, with scikit-learn's warning when that ends it
    first; pass a small ``tol`` and a large ``max_iter`` for the minimum itself; its other
    arguments taken at the values of this fit, ``solver='lbfgs'``, ``penalty='l2'``, ...,
    and refused by name at others), ``names`` and
    ``scores`` only; its passes over the cells run on the GPU with more cells than genes. ``pts=True`` adds the share of cells expressing each gene in the group
    (``pts``) and in the rest (``pts_rest``), as scanpy. Reads ``.raw`` when it exists and ``use_raw`` is not False, else X or
    ``layer``.

    Writes ``uns[key_added or 'rank_genes_groups']``: ``names``, ``scores``,
    ``logfoldchanges``, ``pvals``, ``pvals_adj`` (record arrays, one field per group) and
    ``params``, which ``sc.pl.rank_genes_groups*`` and ``sc.get.rank_genes_groups_df`` read.
    """
    if reference != "rest":
        raise ValueError("rank_genes_groups: scpipe compares each group with the rest (reference='rest')")
    if rankby_abs or mask_var is not None:
        raise ValueError("rank_genes_groups: rankby_abs and mask_var are not supported by scpipe yet")
    if corr_method != "benjamini-hochberg":
        raise ValueError("rank_genes_groups: corr_method='benjamini-hochberg' only")
    if groupby not in adata.obs.columns:
        raise KeyError(f"groupby: obs has no column {groupby!r}")
    selected = None
    if not (isinstance(groups, str) and groups == "all"):
        # Each group against every other cell (scanpy's 'rest' counts the groups left out too):
        # the tables of the groups asked for, in their order.
        selected = [str(g) for g in ([groups] if isinstance(groups, str) else groups)]
        known = set(map(str, adata.obs[groupby].astype("category").cat.categories))
        missing = [g for g in selected if g not in known]
        if missing:
            raise ValueError(f"groups: {missing} are not categories of obs[{groupby!r}]")
    if use_raw is None:
        use_raw = adata.raw is not None and layer is None
    if use_raw and adata.raw is None:
        raise ValueError("use_raw=True but the AnnData has no .raw")
    if use_raw and layer is not None:
        raise ValueError("give layer or use_raw=True, not both")
    target = adata.copy() if copy else adata
    if use_raw:
        x, what, genes = target.raw.X, "raw.X", target.raw.var_names
    elif layer is not None:
        if layer not in target.layers:
            raise KeyError(f"layer {layer!r} does not exist")
        x, what, genes = target.layers[layer], f"layers[{layer!r}]", target.var_names
    else:
        x, what, genes = target.X, "X", target.var_names
    labels = target.obs[groupby]
    if not hasattr(labels, "cat"):
        labels = labels.astype("category")
    if method == "logreg":
        return _logreg(target, adata, x, what, genes, labels, groupby, selected, n_genes, pts, use_raw, layer, corr_method, key_added, copy, _kwds)
    xp = _parts.matrix_part(x, what)
    parts = {
        "X": xp,
        "var_names": _parts.names(genes),
        "obs": {groupby: _parts.column_part(labels, f"obs[{groupby!r}]")},
    }
    if "log1p" in target.uns:
        parts["uns"] = {"log1p": _parts.uns_part(target.uns["log1p"])}
    params = dict(groupby=groupby, method=method or "t-test", n_genes=n_genes, tie_correct=tie_correct)
    out = _parts.call("rank_genes_groups", parts, params)
    _parts.view_to_actual(target)
    result = _parts.value_from(out["uns"]["rank_genes_groups"])
    if selected is not None:
        for k, v in list(result.items()):
            if isinstance(v, np.recarray):
                result[k] = np.rec.fromarrays([v[g] for g in selected], names=selected)
    order = selected if selected is not None else [str(c) for c in labels.cat.categories]
    _store_markers(target, result, (x, labels, order, genes) if pts else None, use_raw, layer, corr_method, key_added)
    return target if copy else None


def _store_markers(target, result: dict, pts, use_raw, layer, corr_method, key_added) -> None:
    """Writes the markers' record with ``pts`` (when given: the matrix, labels, groups and
    genes to count expressing cells in) and scanpy's ``params`` entries."""
    if pts is not None:
        result["pts"], result["pts_rest"] = _fractions_expressing(*pts)
    p = result.setdefault("params", {})
    p["use_raw"] = bool(use_raw)
    p["layer"] = layer
    p["corr_method"] = corr_method
    target.uns[key_added or "rank_genes_groups"] = result


_LOGREG_ARGS = {"C", "max_iter", "tol"}
# LogisticRegression's other arguments at the values whose fit scpipe's is (lbfgs, an L2
# penalty, an unpenalised intercept, no class weights), and those lbfgs itself ignores.
_LOGREG_AS_FITTED = {
    "penalty": ("l2",),
    "solver": ("lbfgs",),
    "fit_intercept": (True,),
    "dual": (False,),
    "class_weight": (None,),
    "l1_ratio": (None,),
    "warm_start": (False,),
    "multi_class": ("auto", "deprecated", "multinomial"),
}
_LOGREG_IGNORED = {"n_jobs", "random_state", "verbose", "intercept_scaling"}


def _logreg_arguments(kwds: dict) -> None:
    """Refuses, by name, LogisticRegression's arguments that would fit another model than
    scpipe's (``penalty='l1'``, ``solver='saga'``, ...); takes those that match its fit."""
    known = _LOGREG_ARGS | set(_LOGREG_AS_FITTED) | _LOGREG_IGNORED
    if unknown := set(kwds) - known:
        raise TypeError(f"rank_genes_groups(method='logreg'): scpipe takes {sorted(_LOGREG_ARGS)} of LogisticRegression's arguments (and {sorted(set(_LOGREG_AS_FITTED))} at the values it fits with), not {sorted(unknown)}")
    for name, allowed in _LOGREG_AS_FITTED.items():
        if name in kwds and not any(kwds[name] is a or (a is not None and kwds[name] == a) for a in allowed):
            raise TypeError(f"rank_genes_groups(method='logreg'): scpipe fits LogisticRegression with {name}={allowed[0]!r} only, not {kwds[name]!r}")


def _logreg(target, adata, x, what, genes, labels, groupby, selected, n_genes, pts, use_raw, layer, corr_method, key_added, copy, kwds):
    """``rank_genes_groups(method='logreg')``: as scanpy, the model is fitted on the cells of
    the groups compared (all, or ``groups``), each group's scores its coefficients; for two
    groups the binary model's one row, under the first group alone."""
    _logreg_arguments(kwds)
    x = _parts.host(x)  # read from the host (the extension sends its passes to the GPU)
    if selected is not None:
        mask = labels.astype(str).isin(selected).to_numpy()
        x, labels = x[mask], labels[mask]
    present = [str(c) for c in labels.cat.categories if (labels == c).any()]
    if len(present) < 2:
        raise ValueError("Cannot perform logistic regression on a single cluster.")
    if kwds.get("multi_class") == "multinomial" and len(present) == 2:
        raise TypeError("rank_genes_groups(method='logreg'): scpipe fits two groups with the binary model (multi_class='auto', scanpy's default), not the multinomial one")
    parts = {
        "X": _parts.matrix_part(x, what),
        "var_names": _parts.names(genes),
        "obs": {groupby: _parts.column_part(labels, f"obs[{groupby!r}]")},
    }
    params = dict(groupby=groupby, n_genes=n_genes, C=float(kwds.get("C", 1.0)), max_iter=_parts.count(kwds.get("max_iter", 100), "max_iter", 1), tol=float(kwds.get("tol", 1e-4)))
    out = _parts.call("rank_genes_groups_logreg", parts, params)
    if why := out.get("logreg_shortfall"):
        # scikit-learn's ConvergenceWarning, which scanpy's users see from the same fit.
        warnings.warn(f"rank_genes_groups(method='logreg'): {why}", UserWarning, stacklevel=3)
    _parts.view_to_actual(target)
    result = _parts.value_from(out["uns"]["rank_genes_groups"])
    order = selected if selected is not None else present
    for k in ("names", "scores"):
        v = result[k]
        if len(present) == 2:
            # scanpy reports the binary model's row under the first group compared.
            result[k] = np.rec.fromarrays([v[v.dtype.names[0]]], names=[order[0]])
        elif selected is not None:
            result[k] = np.rec.fromarrays([v[g] for g in selected], names=selected)
    _store_markers(target, result, (x, labels, order, genes) if pts else None, use_raw, layer, corr_method, key_added)
    return target if copy else None


def score_genes(
    adata,
    gene_list: Sequence[str] | str,
    *,
    ctrl_as_ref: bool = True,
    ctrl_size: int = 50,
    gene_pool: Sequence[str] | None = None,
    n_bins: int = 25,
    score_name: str = "score",
    random_state: int = 0,
    copy: bool = False,
    use_raw: bool | None = None,
    layer: str | None = None,
):
    """Each cell's score for a gene set (scanpy's ``tl.score_genes``): its mean over the genes
    less its mean over control genes drawn from the same expression bins (``n_bins`` bins of
    the pool genes' means, ``ctrl_size`` genes a bin). Writes ``obs[score_name]`` (float64).

    The control genes are scanpy's for the same ``random_state`` (numpy's ``RandomState``
    draws repeated), so the scores are scanpy's. ``use_raw=None`` reads ``.raw`` when the
    AnnData has one (and no ``layer`` is given), as scanpy. Genes not in ``var_names`` are left
    out with a warning. ``random_state=None`` (scanpy: unseeded) is refused: give a seed.
    A sparse X on the GPU is scored there (the host's control genes and scores, bit for bit).
    """
    _parts.numpy_seed(random_state, "random_state")
    if layer is not None and use_raw:
        raise ValueError("Cannot use expression from both layer and raw.")
    if use_raw is None:
        use_raw = layer is None and adata.raw is not None
    x, what = _parts.matrix_of(adata, layer, use_raw)
    var_names = adata.raw.var_names if use_raw else adata.var_names
    genes = pd.Index([gene_list] if isinstance(gene_list, str) else gene_list)
    missing = genes.difference(var_names, sort=False)
    genes = genes.intersection(var_names)
    if len(missing) > 0:
        warnings.warn(f"genes are not in var_names and ignored: {list(missing)}", UserWarning, stacklevel=2)
    if len(genes) == 0:
        raise ValueError("No valid genes were passed for scoring.")
    pool = var_names if gene_pool is None else pd.Index(gene_pool, dtype="string").intersection(var_names)
    if len(pool) == 0:
        raise ValueError("No valid genes were passed for reference set.")
    outside = genes.difference(pool, sort=False)
    if len(outside) > 0:
        raise KeyError(f"genes of gene_list not in gene_pool (scanpy refuses them too): {list(outside)}")
    params = {
        "genes": [int(i) for i in var_names.get_indexer(genes)],
        "pool": [int(i) for i in var_names.get_indexer(pool)],
        "ctrl_as_ref": bool(ctrl_as_ref),
        "ctrl_size": int(ctrl_size),
        "n_bins": int(n_bins),
        "random_state": int(random_state),
        "score_name": str(score_name),
    }
    out = _parts.call("score_genes", {"X": _parts.matrix_part(x, what)}, params)
    target = _parts.target(adata, copy)
    target.obs[score_name] = pd.Series(np.asarray(out["obs"][score_name]), index=target.obs_names, dtype="float64")
    return target if copy else None


def score_genes_cell_cycle(
    adata, *, s_genes: Sequence[str], g2m_genes: Sequence[str], copy: bool = False, **kwargs
):
    """Cell cycle scores and phase (scanpy's ``tl.score_genes_cell_cycle``): ``S_score`` and
    ``G2M_score`` by :func:`score_genes` with ``ctrl_size`` the smaller gene list's length, and
    ``phase``: ``G1`` where both are negative, else ``S`` or ``G2M``, whichever is larger."""
    target = adata.copy() if copy else adata
    ctrl_size = min(len(s_genes), len(g2m_genes))
    for genes, name in [(s_genes, "S_score"), (g2m_genes, "G2M_score")]:
        score_genes(target, genes, score_name=name, ctrl_size=ctrl_size, **kwargs)
    scores = target.obs[["S_score", "G2M_score"]]
    phase = pd.Series("S", index=scores.index)
    phase[scores["G2M_score"] > scores["S_score"]] = "G2M"
    phase[np.all(scores < 0, axis=1)] = "G1"
    target.obs["phase"] = phase
    return target if copy else None


def dendrogram(
    adata,
    groupby: str | Sequence[str],
    *,
    n_pcs: int | None = None,
    use_rep: str | None = None,
    var_names: Sequence[str] | None = None,
    use_raw: bool | None = None,
    cor_method: str = "pearson",
    linkage_method: str = "complete",
    optimal_ordering: bool = False,
    key_added: str | None = None,
    inplace: bool = True,
):
    """A hierarchical clustering of the ``groupby`` categories (scanpy's ``tl.dendrogram``,
    which ordering dot plots and heatmaps follow): each category's mean representation
    (``X_pca``, ``use_rep``, or the genes ``var_names``), their correlation (``cor_method``:
    pearson, kendall or spearman) and scipy's ``linkage`` of ``1 - correlation``.

    Writes ``uns[key_added or 'dendrogram_<groupby>']`` as scanpy (``linkage``,
    ``categories_ordered``, ``categories_idx_ordered``, ``dendrogram_info``,
    ``correlation_matrix``, ...), or returns it with ``inplace=False``. The means over the cells
    are scpipe's :func:`scpipe.get.aggregate`; the clustering of the categories is scipy's.
    Several ``groupby`` columns: their values joined by ``_``, as scanpy. ``var_names``: the
    means of those genes (of ``.raw`` when the AnnData has one, unless ``use_raw=False``), as
    scanpy documents it (scanpy 1.12 itself reads every gene of X then).
    """
    import scipy.cluster.hierarchy as sch
    from scipy.spatial import distance

    from scpipe.get import aggregate

    groupby = [groupby] if isinstance(groupby, str) else list(groupby)
    for g in groupby:
        if g not in adata.obs:
            raise ValueError(f"groupby has to be a valid observation. Given value: {g}, valid observations: {adata.obs.columns.tolist()}")
        if not isinstance(adata.obs[g].dtype, pd.CategoricalDtype):
            raise ValueError(f"groupby has to be a categorical observation. Given value: {g}, Column type: {adata.obs[g].dtype}")
    if cor_method not in ("pearson", "kendall", "spearman"):
        raise ValueError(f"cor_method must be 'pearson', 'kendall' or 'spearman', not {cor_method!r}")
    labels = adata.obs[groupby[0]]
    for g in groupby[1:]:
        labels = labels.astype(str) + "_" + adata.obs[g].astype(str)
    labels = labels.astype("category")
    categories = labels.cat.categories
    if var_names is None:
        rep, _ = _parts.representation(adata, use_rep, n_pcs, "dendrogram")
        cells = _rep_anndata(rep, labels)
    else:
        if use_raw is None:
            use_raw = adata.raw is not None
        genes = list(var_names)
        rep = adata.raw[:, genes].X if use_raw else adata[:, genes].X
        cells = _rep_anndata(rep, labels)
    means = aggregate(cells, "group", "mean")
    unused = categories.difference(means.obs_names)
    if len(unused) > 0:
        raise ValueError(f"dendrogram: categories {list(unused)} of {'_'.join(groupby)} have no cells (remove_unused_categories first)")
    mean_df = pd.DataFrame(means.layers["mean"], index=means.obs_names).loc[categories]
    corr_matrix = mean_df.T.corr(method=cor_method).clip(-1, 1)
    z_var = sch.linkage(distance.squareform(1 - corr_matrix), method=linkage_method, optimal_ordering=optimal_ordering)
    info = sch.dendrogram(z_var, labels=list(categories), no_plot=True)
    dat = dict(
        linkage=z_var,
        groupby=groupby,
        use_rep=use_rep,
        cor_method=cor_method,
        linkage_method=linkage_method,
        categories_ordered=info["ivl"],
        categories_idx_ordered=info["leaves"],
        dendrogram_info=info,
        correlation_matrix=corr_matrix.values,
    )
    if not inplace:
        return dat
    adata.uns[key_added or f"dendrogram_{'_'.join(groupby)}"] = dat
    return None


def _rep_anndata(rep, labels: pd.Series):
    """A bare AnnData over a representation (on the host), its cells labelled ``group``."""
    from anndata import AnnData

    rep = rep.to_numpy() if isinstance(rep, pd.DataFrame) else _parts.host(rep)
    return AnnData(X=rep, obs=pd.DataFrame({"group": labels.to_numpy()}, index=labels.index))


def kmeans(
    adata,
    n_clusters: int = 8,
    n_pcs: int = 50,
    *,
    use_rep: str = "X_pca",
    n_init: int = 1,
    random_state: int = 42,
    key_added: str = "kmeans",
    copy: bool = False,
    max_iter: int = 300,
    tol: float = 1e-4,
    **kwargs,
):
    """k-means of the cells (rapids-singlecell's ``tl.kmeans``, scikit-learn's ``KMeans``):
    greedy k-means++ seeds, Lloyd's iterations to ``tol`` (relative to the mean variance of the
    columns) or ``max_iter``, the best of ``n_init`` runs. Reads ``use_rep`` (``"X"`` for X)'s
    first ``n_pcs`` columns, as rapids-singlecell.

    Writes ``obs[key_added]`` (categories ``"0"``, ``"1"``, ... in numeric order) and
    ``uns[key_added]`` (``params``, ``inertia``, ``n_iter``). The same ``random_state`` gives
    the same clusters; they are not scikit-learn's or cuML's draws (matched by inertia).
    Lloyd's passes over the cells run on the GPU when ``settings.device`` has one (the host's
    clusters bit for bit), else on the host in Rust.
    """
    if kwargs:
        raise TypeError(f"kmeans: unsupported arguments {sorted(kwargs)} (scpipe takes max_iter and tol)")
    for name, v in [("n_clusters", n_clusters), ("n_init", n_init), ("max_iter", max_iter)]:
        _parts.count(v, f"kmeans: {name}", 1)
    target = _parts.target(adata, copy)
    obsm, _ = _parts.dense_representation(target, use_rep, n_pcs, "kmeans")
    params = {
        "n_clusters": int(n_clusters),
        "n_init": int(n_init),
        "max_iter": int(max_iter),
        "tol": float(tol),
        "random_state": _seed(random_state),
        "key_added": key_added,
    }
    out = _parts.call("kmeans", {"X": _parts.no_x(target.n_obs), "obsm": obsm}, params)
    target.obs[key_added] = _parts.column_from(out["obs"][key_added])
    target.uns[key_added] = _parts.value_from(out["uns"][key_added])
    return target if copy else None


def ingest(
    adata,
    adata_ref,
    *,
    obs: str | Iterable[str] | None = None,
    embedding_method: str | Iterable[str] = ("umap", "pca"),
    labeling_method: str = "knn",
    neighbors_key: str | None = None,
    inplace: bool = True,
    **kwargs,
):
    """Maps labels and embeddings of a reference onto new cells (scanpy's ``tl.ingest``): the new
    cells are projected on the reference's PCA (centred by the reference's gene means when its
    PCA was centred, as scanpy 1.12), their nearest reference cells found in the representation the
    reference's neighbors used (``adata_ref.uns[neighbors_key]['params']``: ``use_rep`` or
    ``n_pcs``), each label in ``obs`` taken as the most common among them (ties: the first
    category) and the UMAP mapped as umap-learn's ``transform`` maps it (the reference's layout
    fixed; 100 epochs up to 10,000 new cells, else 30).

    Writes ``adata.obsm['X_pca']`` / ``['X_umap']`` (for ``embedding_method``) and
    ``adata.obs[label]`` (categorical, the reference's categories); with ``inplace=False``, on a
    copy that is returned. ``adata`` and ``adata_ref`` must have the same genes
    (``var_names``). The projection, the neighbour search and the UMAP's epochs run on the GPU
    when ``settings.device`` is one (the host's values; the neighbours the host's wherever the
    GPU's f32 scan kept them among its candidates), the vote on the host.

    Differences from scanpy: the neighbours are exact (scanpy queries pynndescent's approximate
    index; ``kwargs``' ``k`` is honoured, its search settings ``queue_size``, ``epsilon`` and
    ``random_state`` are accepted and change nothing); the UMAP's negative samples are scpipe's own
    draws (the same seed gives the same layout); only the euclidean metric.
    """
    unknown = set(kwargs) - {"k", "queue_size", "epsilon", "random_state"}
    if unknown:
        raise TypeError(f"ingest: unexpected arguments {sorted(unknown)}")
    labels = [obs] if isinstance(obs, str) else list(obs or [])
    methods = [embedding_method] if isinstance(embedding_method, str) else list(embedding_method)
    labeling = [labeling_method] if isinstance(labeling_method, str) else list(labeling_method)
    if any(m not in ("umap", "pca") for m in methods):
        raise NotImplementedError("Ingest supports only umap and pca embeddings for now.")
    if any(m != "knn" for m in labeling):
        raise NotImplementedError("Ingest supports knn labeling for now.")
    if not adata_ref.var_names.str.upper().equals(adata.var_names.str.upper()):
        raise ValueError("Variables in the new adata are different from variables in the reference adata")
    key = neighbors_key or "neighbors"
    if key not in adata_ref.uns:
        raise ValueError(f'There is no neighbors data in `adata.uns["{key}"]`.\nPlease run pp.neighbors.')
    nparams = adata_ref.uns[key]["params"]
    if nparams.get("metric", "euclidean") != "euclidean":
        raise ValueError(f"ingest: only the euclidean metric is supported, not {nparams['metric']!r}")
    missing = [c for c in labels if c not in adata_ref.obs.columns]
    if missing:
        raise KeyError(f"ingest: {missing} not in adata_ref.obs")
    params: dict = {"k": _parts.count(kwargs.get("k") or int(nparams["n_neighbors"]), "ingest: k", 1)}
    # The reference's PCA (scanpy's Ingest._init_pca).
    if "pca" in adata_ref.uns:
        pp = adata_ref.uns["pca"]["params"]
        basis = np.asarray(adata_ref.varm["PCs"])
        if pp.get("use_highly_variable", False):
            if "highly_variable" not in adata_ref.var.columns:
                raise ValueError("Did not find `adata.var['highly_variable']`.")
            mask = adata_ref.var["highly_variable"].to_numpy(dtype=bool)
            basis = basis[mask]
            params["pca_genes"] = mask.tolist()
        params["pca_basis"] = np.ascontiguousarray(basis, dtype=np.float32)
        if pp.get("zero_center", True):
            # scanpy 1.12 centres the new cells by the reference's means (1.11: their own).
            ref_x = _parts.host(adata_ref.X)
            if "pca_genes" in params:
                ref_x = ref_x[:, mask]
            params["pca_mean"] = np.asarray(ref_x.mean(axis=0, dtype=np.float64)).ravel()
    # The representation of the reference's neighbors (scanpy's Ingest._init_neighbors).
    parts = {"X": _parts.matrix_part(_parts.host(adata.X), "X")}
    if "use_rep" in nparams:
        use_rep = nparams["use_rep"]
        ref_rep = adata_ref.X if use_rep == "X" else adata_ref.obsm[use_rep]
        new_rep = adata.X if use_rep == "X" or use_rep not in adata.obsm else adata.obsm[use_rep]
        if use_rep == "X_pca" and use_rep not in adata.obsm and "pca_basis" in params:
            new_rep, params["rep_pcs"] = None, params["pca_basis"].shape[1]
    elif "n_pcs" in nparams or (adata_ref.n_vars > 50 and "X_pca" in adata_ref.obsm):
        n_pcs = int(nparams.get("n_pcs") or min(50, adata_ref.obsm["X_pca"].shape[1]))
        ref_rep, new_rep, params["rep_pcs"] = adata_ref.obsm["X_pca"][:, :n_pcs], None, n_pcs
        if "pca_basis" not in params:
            raise ValueError("ingest: the reference's neighbors used its PCA, but it has no uns['pca'] / varm['PCs']")
    else:
        ref_rep, new_rep = adata_ref.X, adata.X
    params["reference_rep"] = _parts.dense_host(ref_rep)
    if new_rep is not None:
        parts["obsm"] = {"rep": _parts.dense_host(new_rep)}
    if "pca" in methods and "pca_basis" not in params:
        raise ValueError("ingest: embedding_method 'pca' needs the reference's PCA (run pp.pca on it)")
    params["map_pca"] = "pca" in methods
    if "umap" in methods:
        if "X_umap" not in adata_ref.obsm or "umap" not in adata_ref.uns:
            raise ValueError("ingest: embedding_method 'umap' needs the reference's UMAP (run tl.umap on it)")
        up = adata_ref.uns["umap"]["params"]
        params["umap_layout"] = _parts.dense_host(adata_ref.obsm["X_umap"])
        params["umap_a"], params["umap_b"] = float(up["a"]), float(up["b"])
        params["umap_random_state"] = _seed(up.get("random_state", 0))
    cats = [adata_ref.obs[c].astype("category") for c in labels]
    params["label_names"] = labels
    params["label_codes"] = [np.ascontiguousarray(c.cat.codes, dtype=np.int32) for c in cats]
    params["label_categories"] = [len(c.cat.categories) for c in cats]
    out = _parts.call("ingest", parts, params)
    target = adata if inplace else adata.copy()
    for m in methods:
        target.obsm[f"X_{m}"] = np.asarray(out["obsm"][f"X_{m}"])
    for c, cat in zip(labels, cats):
        codes = np.asarray(out["obs"][c], dtype=np.int64)
        target.obs[c] = pd.Categorical.from_codes(codes, categories=cat.cat.categories)
    return None if inplace else target
