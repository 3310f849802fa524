"""Preprocessing: scanpy's ``sc.pp`` functions (and rapids-singlecell's ``harmony_integrate``),
with scanpy's names, arguments, defaults and output slots, run by scpipe's steps on the GPU
(``scpipe.settings.device``) or the CPU.

Each function works on the AnnData in place, or on a copy it returns with ``copy=True``. It
writes its results only once the step has succeeded: an error (or Ctrl-C) leaves the object as
it was. X is computed in float32, as scpipe's command does.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from scpipe import _parts
from scpipe._settings import settings

__all__ = [
    "combat",
    "calculate_qc_metrics",
    "filter_cells",
    "filter_genes",
    "normalize_total",
    "log1p",
    "highly_variable_genes",
    "flag_gene_family",
    "filter_highly_variable",
    "regress_out",
    "normalize_pearson_residuals",
    "scrublet",
    "scrublet_simulate_doublets",
    "sqrt",
    "scale",
    "pca",
    "harmony_integrate",
    "neighbors",
    "bbknn",
    "recipe",
]


def _set_matrix(adata, layer: str | None, m) -> None:
    if layer is None:
        adata.X = m
    else:
        adata.layers[layer] = m


@functools.cache
def _not_counts_kernel():
    """A CuPy reduction: whether any value is not a count (made once, at first use)."""
    import cupy

    # NaN fails both comparisons; 3.402823466e38 is float32's largest finite value.
    return cupy.ReductionKernel(
        "T x", "bool y", "!(x >= 0 && x <= 3.402823466e38f)", "a || b", "y = a", "false", "scpipe_not_counts"
    )


def _any_not_count(values) -> bool:
    """Whether a CuPy array holds a value that is not a count, in one pass on the GPU."""
    return bool(_not_counts_kernel()(values))


def _check_counts(part: tuple, what: str) -> None:
    """Refuses NaN, infinite or negative values where a step reads counts: one reduction on the
    GPU for a CuPy matrix; on the host the smallest and the largest value, which NaN
    propagates to."""
    values = _parts.part_values(part)
    if values.size == 0:
        return
    if part[0].startswith("cuda") and not _any_not_count(values):
        return
    lo, hi = float(values.min()), float(values.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{what} holds NaN or infinite values; the step needs counts")
    if lo < 0:
        raise ValueError(f"{what} holds negative values; the step needs counts")


def _var_names(adata) -> list[str]:
    return _parts.names(adata.var_names)


def calculate_qc_metrics(
    adata,
    *,
    expr_type: str = "counts",
    var_type: str = "genes",
    qc_vars: Sequence[str] | str = (),
    percent_top: Sequence[int] | None = (50, 100, 200, 500),
    layer: str | None = None,
    use_raw: bool = False,
    inplace: bool = False,
    log1p: bool = True,
    parallel: bool | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Quality-control metrics per cell and per gene (scanpy's ``calculate_qc_metrics``).

    Parameters
    ----------
    adata
        Counts in X (or ``layer`` / ``.raw``), cells by genes.
    expr_type, var_type
        What the values and the variables are called in the columns' names.
    qc_vars
        Boolean ``var`` columns (e.g. ``"mt"``) whose share of each cell's counts is reported.
    percent_top
        Share of each cell's counts in its top-n genes, for each n.
    layer, use_raw
        Read this layer, or ``.raw.X``, instead of X.
    inplace
        Write into ``obs`` and ``var`` (else return the two tables), as scanpy (default False).
    log1p
        Also write ``log1p_`` columns.

    Writes
    ------
    ``obs``: ``n_genes_by_counts``, ``total_counts``, ``pct_counts_in_top_{n}_genes``,
    ``total_counts_{qc_var}``, ``pct_counts_{qc_var}`` (and their ``log1p_`` forms);
    ``var``: ``n_cells_by_counts``, ``mean_counts``, ``pct_dropout_by_counts``, ``total_counts``
    (and ``log1p_`` forms).
    """
    qc_vars = [qc_vars] if isinstance(qc_vars, str) else list(qc_vars)
    for q in qc_vars:
        if q not in adata.var.columns:
            raise KeyError(f"qc_vars: var has no column {q!r}")
    x, what = _parts.matrix_of(adata, layer, use_raw)
    xp = _parts.matrix_part(x, what)
    _check_counts(xp, what)
    n_vars = x.shape[1]
    var = {q: _parts.column_part(adata.var[q].astype(bool), f"var[{q!r}]") for q in qc_vars}
    if use_raw:
        var = {q: _parts.column_part(adata.var[q].reindex(adata.raw.var_names).fillna(False).astype(bool), q) for q in qc_vars}
    top = None if percent_top is None else sorted(int(n) for n in percent_top)
    if top and top[-1] > n_vars:
        raise ValueError(f"percent_top: {top[-1]} exceeds the {n_vars} genes")
    # No gene names: the metrics do not read them (20,000 names cost a few ms each way).
    parts = {"X": xp, "var": var}
    params = {"qc_vars": qc_vars, "percent_top": top if top is not None else [], "log1p": log1p}
    out = _parts.call("calculate_qc_metrics", parts, params)
    obs_cols = {_qc_name(k, qc_vars, expr_type, var_type): _parts.column_from(v) for k, v in out["obs"].items()}
    var_cols = {_qc_name(k, qc_vars, expr_type, None): _parts.column_from(v) for k, v in out["var"].items() if k not in var}
    # scanpy 1.12 keeps the genes' means in float32 (1.11, and scpipe's command, float64).
    for k in (_qc_name(k, (), expr_type, None) for k in SCANPY_112_FLOAT32_VAR):
        if k in var_cols:
            var_cols[k] = var_cols[k].astype(np.float32)
    if not inplace:
        obs_df = pd.DataFrame(obs_cols, index=adata.obs_names)
        var_df = pd.DataFrame(var_cols, index=adata.raw.var_names if use_raw else adata.var_names)
        return obs_df, var_df
    _parts.view_to_actual(adata)
    for k, v in obs_cols.items():
        adata.obs[k] = v
    if not use_raw:
        for k, v in var_cols.items():
            adata.var[k] = v
    return None


# The QC columns that scanpy 1.12 writes as float32 where 1.11 wrote float64.
SCANPY_112_FLOAT32_VAR = ("mean_counts", "log1p_mean_counts")


def _qc_name(name: str, qc_vars, expr_type: str, var_type: str | None) -> str:
    """A QC column's name with scanpy's ``expr_type`` for "counts" and ``var_type`` for "genes"
    (in the cells' table), the QC variable's own name left as it is."""
    suffix = ""
    for q in qc_vars:
        if name.endswith("_" + q):
            name, suffix = name[: -len(q) - 1], "_" + q
            break
    name = name.replace("counts", expr_type)
    if var_type is not None:
        name = name.replace("genes", var_type)
    return name + suffix


def _filter(adata, step: str, bounds: dict, axis: str, inplace: bool, copy: bool):
    if sum(v is not None for v in bounds.values()) != 1:
        names = ", ".join(bounds)
        raise ValueError(f"give exactly one of {names}")
    xp = _parts.matrix_part(adata.X, "X")
    _check_counts(xp, "X")
    n = adata.n_obs if axis == "obs" else adata.n_vars
    row = {"__scpipe_row": np.arange(n, dtype=np.int64)}
    parts = {"X": xp, "obs" if axis == "obs" else "var": row}
    out = _parts.call(step, parts, bounds, return_x=inplace)
    cols = out[axis]
    kept = cols.pop("__scpipe_row")
    (name, values), = cols.items()
    if not inplace:
        mask = np.zeros(n, dtype=bool)
        mask[kept] = True
        # The per-element numbers of every cell (or gene), before subsetting, as scanpy returns.
        full = _full_numbers(adata, step, bounds, n)
        return mask, full
    target = _parts.target(adata, copy)
    x_new = _parts.matrix_from(out["X"], like=target.X)
    target.X = None
    if axis == "obs":
        target._inplace_subset_obs(kept)
        target.obs[name] = values
    else:
        target._inplace_subset_var(kept)
        target.var[name] = values
    target.X = x_new
    return target if copy else None


def _full_numbers(adata, step: str, bounds: dict, n: int) -> np.ndarray:
    """The counts the filter computes for every cell (gene), from a run that keeps all."""
    key = next(k for k, v in bounds.items() if v is not None)
    every = {k: None for k in bounds}
    every[key.replace("max", "min")] = 0
    xp = _parts.matrix_part(adata.X, "X")
    out = _parts.call(step, {"X": xp}, every)
    axis = "obs" if step == "filter_cells" else "var"
    (_, values), = out[axis].items()
    return values


def filter_cells(
    data,
    *,
    min_counts: float | None = None,
    min_genes: int | None = None,
    max_counts: float | None = None,
    max_genes: int | None = None,
    inplace: bool = True,
    copy: bool = False,
):
    """Keeps the cells with at least / at most so many counts or genes (scanpy's
    ``filter_cells``; one bound per call).

    Writes ``obs['n_genes']`` (or ``n_counts``) and removes the other cells. With
    ``inplace=False`` returns ``(cells_subset, number_per_cell)`` instead.
    """
    bounds = {"min_counts": min_counts, "min_genes": min_genes, "max_counts": max_counts, "max_genes": max_genes}
    return _filter(data, "filter_cells", bounds, "obs", inplace, copy)


def filter_genes(
    data,
    *,
    min_counts: float | None = None,
    min_cells: int | None = None,
    max_counts: float | None = None,
    max_cells: int | None = None,
    inplace: bool = True,
    copy: bool = False,
):
    """Keeps the genes with at least / at most so many counts or cells (scanpy's
    ``filter_genes``; one bound per call).

    Writes ``var['n_cells']`` (or ``n_counts``) and removes the other genes. With
    ``inplace=False`` returns ``(gene_subset, number_per_gene)`` instead.
    """
    bounds = {"min_counts": min_counts, "min_cells": min_cells, "max_counts": max_counts, "max_cells": max_cells}
    return _filter(data, "filter_genes", bounds, "var", inplace, copy)


def normalize_total(
    adata,
    *,
    target_sum: float | None = None,
    exclude_highly_expressed: bool = False,
    max_fraction: float = 0.05,
    key_added: str | None = None,
    layer: str | None = None,
    inplace: bool = True,
    copy: bool = False,
):
    """Scales each cell to the same total count (scanpy's ``normalize_total``).

    Parameters
    ----------
    target_sum
        Total after normalization; ``None``: the median of the cells' totals.
    exclude_highly_expressed, max_fraction
        Leave genes above ``max_fraction`` of any cell's total out of the totals.
    key_added
        ``obs`` column for each cell's factor.
    layer
        Normalize this layer instead of X.
    inplace
        Write the result (else return ``{"X": ..., "norm_factor": ...}``). A float32 cupyx CSR
        X (``scpipe.get.anndata_to_GPU``) is divided in its own memory, as rapids-singlecell
        does: arrays that share it see the change. Values that are not counts (negative, NaN,
        infinite) are refused before anything is written.
    """
    if copy and not inplace:
        raise ValueError("`copy=True` cannot be used with `inplace=False`.")
    target = _parts.target(adata, copy) if inplace else adata
    x, what = _parts.matrix_of(target, layer)
    xp = _parts.matrix_part(x, what)
    in_place = inplace and _parts.writes_in_place(x, xp)
    # The step itself refuses values that are not counts before its one write (CPU and GPU).
    params = {
        "target_sum": target_sum,
        "exclude_highly_expressed": exclude_highly_expressed,
        "max_fraction": max_fraction,
        "per_cell": key_added is not None or not inplace,
    }
    out = _parts.call("normalize_total", {"X": xp}, params, return_x=True, in_place=in_place)
    if not inplace:
        return {"X": _parts.matrix_from(out["X"], like=x), "norm_factor": out.get("norm_factor")}
    if not in_place:
        _set_matrix(target, layer, _parts.matrix_from(out["X"], like=x))
    if key_added is not None:
        target.obs[key_added] = out["norm_factor"]
    return target if copy else None


def log1p(data, *, base: float | None = None, copy: bool = False, layer: str | None = None, **_chunking):
    """``log(1 + x)`` of X or ``layer`` (scanpy's ``log1p``); records ``uns['log1p']['base']``.
    A float32 cupyx CSR X is changed in its own memory, as scanpy and rapids-singlecell do."""
    target = _parts.target(data, copy)
    x, what = _parts.matrix_of(target, layer)
    xp = _parts.matrix_part(x, what)
    in_place = _parts.writes_in_place(x, xp)
    out = _parts.call("log1p", {"X": xp}, {"base": base}, return_x=True, in_place=in_place)
    if not in_place:
        _set_matrix(target, layer, _parts.matrix_from(out["X"], like=x))
    # scanpy records the base, None included (the command writes only a given one: anndata
    # stores nothing for None).
    target.uns["log1p"] = {"base": base}
    return target if copy else None


def highly_variable_genes(
    adata,
    *,
    layer: str | None = None,
    n_top_genes: int | None = None,
    min_disp: float = 0.5,
    max_disp: float = np.inf,
    min_mean: float = 0.0125,
    max_mean: float = 3,
    span: float = 0.3,
    n_bins: int = 20,
    flavor: str = "seurat",
    subset: bool = False,
    inplace: bool = True,
    batch_key: str | None = None,
    check_values: bool = True,
    theta: float = 100,
    clip: float | None = None,
):
    """Highly variable genes (scanpy's ``highly_variable_genes``): flavours ``seurat``,
    ``cell_ranger``, ``seurat_v3`` and ``seurat_v3_paper`` (the last two read counts), with
    ``batch_key``; and ``pearson_residuals`` (scanpy's ``experimental.pp`` flavour, as
    rapids-singlecell offers it: the variance of each gene's clipped Pearson residuals with
    ``theta`` and ``clip``, ranked; ``n_top_genes`` required; with a GPU the residual variances
    are summed there, the host's bits).

    Writes ``var['highly_variable']``, ``means``, ``dispersions``, ``dispersions_norm`` (or
    seurat_v3's ``variances``, ``variances_norm``, ``highly_variable_rank``), with a batch key
    ``highly_variable_nbatches`` and ``highly_variable_intersection``, and ``uns['hvg']``.
    ``subset=True`` keeps only the selected genes; ``inplace=False`` returns the table.
    """
    if flavor == "pearson_residuals":
        return _hvg_pearson_residuals(adata, layer, n_top_genes, batch_key, theta, clip, check_values, subset, inplace)
    x, what = _parts.matrix_of(adata, layer)
    xp = _parts.matrix_part(x, what)
    if flavor.startswith("seurat_v3") and check_values:
        _check_counts(xp, what)
    obs = {}
    if batch_key is not None:
        if batch_key not in adata.obs.columns:
            raise KeyError(f"batch_key: obs has no column {batch_key!r}")
        obs[batch_key] = _parts.column_part(adata.obs[batch_key].astype("category"), f"obs[{batch_key!r}]")
    uns = {"log1p": _parts.uns_part(adata.uns["log1p"])} if "log1p" in adata.uns else {}
    parts = {"X": xp, "var_names": _var_names(adata), "obs": obs, "uns": uns}
    params = {
        "flavor": flavor,
        "n_top_genes": n_top_genes,
        "batch_key": batch_key,
        "min_mean": min_mean,
        "max_mean": max_mean,
        "min_disp": min_disp,
        "max_disp": max_disp,
        "span": span,
        "n_bins": n_bins,
    }
    out = _parts.call("highly_variable_genes", parts, params)
    return _hvg_results(adata, out, _parts.value_from(out["uns"]["hvg"]), subset, inplace)


def _hvg_results(adata, out: dict, hvg: dict, subset: bool, inplace: bool):
    """The HVG table of a call: returned (``inplace=False``) or written into ``var`` with
    ``uns['hvg']``, the genes subset with ``subset``."""
    table = {k: _parts.column_from(v) for k, v in out["var"].items()}
    if not inplace:
        df = pd.DataFrame(table, index=adata.var_names)
        return df.loc[df["highly_variable"]] if subset else df
    _parts.view_to_actual(adata)
    for k, v in table.items():
        adata.var[k] = v
    adata.uns["hvg"] = hvg
    if subset:
        adata._inplace_subset_var(np.asarray(adata.var["highly_variable"], dtype=bool))
    return None


def _hvg_pearson_residuals(adata, layer, n_top_genes, batch_key, theta, clip, check_values, subset, inplace):
    """``highly_variable_genes(flavor="pearson_residuals")``: see there."""
    if n_top_genes is None:
        raise ValueError(
            "`pp.highly_variable_genes` requires the argument `n_top_genes` for `flavor='pearson_residuals'`"
        )
    x, what = _parts.matrix_of(adata, layer)
    # Read where it lies: a GPU X is lent to the twin as it is (a CuPy X comes back only on
    # the CPU).
    parts = {"X": _parts.matrix_part(x, what)}
    if check_values and not _whole_numbers(parts["X"]):
        warnings.warn(
            "`flavor='pearson_residuals'` expects raw count data, but non-integers were found.",
            UserWarning,
            stacklevel=3,
        )
    if batch_key is not None:
        if batch_key not in adata.obs.columns:
            raise KeyError(f"batch_key: obs has no column {batch_key!r}")
        parts["obs"] = {batch_key: _parts.column_part(adata.obs[batch_key].astype(str), f"obs[{batch_key!r}]")}
    params = {"theta": float(theta), "clip": None if clip is None else float(clip), "n_top_genes": int(n_top_genes), "batch_key": batch_key}
    out = _parts.call("hvg_pearson_residuals", parts, params)
    hvg = {"flavor": "pearson_residuals", "computed_on": layer if layer else "adata.X"}
    return _hvg_results(adata, out, hvg, subset, inplace)


def flag_gene_family(
    adata,
    *,
    gene_family_name: str,
    gene_family_prefix: str | None = None,
    gene_list: Iterable[str] | None = None,
) -> None:
    """Marks a family of genes in ``var[gene_family_name]`` (bool), as rapids-singlecell's
    ``flag_gene_family``: the genes whose names start with ``gene_family_prefix`` (``"MT-"`` for
    human mitochondrial genes, ``"mt-"`` for mouse; ``("RPS", "RPL")``-style tuples too) or the
    genes named in ``gene_list``. Give exactly one of the two. The column is what
    ``calculate_qc_metrics(qc_vars=[gene_family_name])`` reads.
    """
    if (gene_family_prefix is None) == (gene_list is None):
        raise ValueError("flag_gene_family: give exactly one of gene_family_prefix and gene_list")
    names = adata.var_names
    if gene_family_prefix is not None:
        if isinstance(gene_family_prefix, list):
            gene_family_prefix = tuple(gene_family_prefix)
        flags = names.str.startswith(gene_family_prefix)
    else:
        if isinstance(gene_list, str):
            raise ValueError("flag_gene_family: gene_list is a list of gene names, not one string")
        flags = names.isin(list(gene_list))
    _parts.view_to_actual(adata)
    adata.var[gene_family_name] = np.asarray(flags, dtype=bool)


def filter_highly_variable(adata) -> None:
    """Keeps only the highly variable genes (``var['highly_variable']``, from
    ``highly_variable_genes``), as rapids-singlecell's ``filter_highly_variable``: X, layers and
    ``var`` are subset where they lie (on the GPU for a CuPy X); ``.raw`` is left as it is."""
    if "highly_variable" not in adata.var.columns:
        raise KeyError("filter_highly_variable: var has no 'highly_variable' column; run highly_variable_genes first")
    mask = np.asarray(adata.var["highly_variable"], dtype=bool)
    _parts.view_to_actual(adata)
    adata._inplace_subset_var(mask)


def regress_out(
    adata,
    keys: str | Sequence[str],
    *,
    layer: str | None = None,
    n_jobs: int | None = None,
    copy: bool = False,
):
    """Regresses out unwanted sources of variation (scanpy's ``regress_out``): each gene is
    replaced by its least-squares residuals on the ``obs`` columns ``keys``.

    Parameters
    ----------
    keys
        Numeric ``obs`` columns (an intercept is added), or one categorical column (text
        columns are taken as categories, as scanpy does): then each gene is regressed on its
        mean within the cell's category. An empty list takes every ``obs`` column, as scanpy.
    layer
        Regress this layer instead of X.
    n_jobs
        scanpy's; unused (every core works).
    copy
        Return a new AnnData instead of changing this one.

    X (or the layer) becomes dense float32 (scanpy returns float64 for a categorical key). A
    GPU X is regressed on the GPU, with the host's results bit for bit (a CSR one is written
    dense with its residuals in one pass, without a dense copy of its values first).
    """
    del n_jobs
    target = _parts.target(adata, copy)
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        keys = list(target.obs.columns)
    obs = {}
    for i, k in enumerate(keys):
        if k not in target.obs.columns:
            raise KeyError(f"keys: obs has no column {k!r}")
        col = target.obs[k]
        if i == 0 and (col.dtype == object or pd.api.types.is_string_dtype(col.dtype)):
            col = col.astype("category")
        obs[k] = _parts.column_part(col, f"obs[{k!r}]")
    x, what = _parts.matrix_of(target, layer)
    # A dense GPU X is regressed as it is (a CSR copy would be densified again).
    xp = _parts.matrix_part(x, what, dense_ok=True)
    out = _parts.call("regress_out", {"X": xp, "obs": obs}, {"keys": keys}, return_x=True)
    _set_matrix(target, layer, _parts.matrix_from(out["X"], like=x))
    return target if copy else None


def normalize_pearson_residuals(
    adata,
    *,
    theta: float = 100,
    clip: float | None = None,
    check_values: bool = True,
    layer: str | None = None,
    inplace: bool = True,
    copy: bool = False,
):
    """Analytic Pearson residuals of the counts (scanpy's
    ``experimental.pp.normalize_pearson_residuals``, rapids-singlecell's
    ``pp.normalize_pearson_residuals``; Lause et al. 2021): with ``mu = cell total * gene total /
    total``, each value becomes ``(x - mu) / sqrt(mu + mu**2 / theta)``, clipped to
    ``[-clip, clip]``.

    Parameters
    ----------
    theta
        The negative binomial's overdispersion, shared by every gene (> 0).
    clip
        Clip the residuals to ``[-clip, clip]``; ``None``: ``sqrt(n_obs)``.
    check_values
        Warn (``UserWarning``) when X holds values that are not whole numbers, as scanpy does.
    layer
        Use this layer instead of X.
    inplace
        Write the residuals into X (or the layer) and ``uns['pearson_residuals_normalization']``
        (``theta``, ``clip``, ``computed_on``); else return them, with those fields, as a dict.
    copy
        Return a new AnnData instead of changing this one (not with ``inplace=False``).

    X (or the layer) becomes dense float32. A cell or a gene without any count is refused
    (``ValueError``; scanpy gives it NaN residuals): filter them first. A sparse X on the GPU
    gets its residuals there (the host's bits); another GPU X comes back, and its residuals go
    to the GPU as a dense matrix.
    """
    if copy and not inplace:
        raise ValueError("`copy=True` cannot be used with `inplace=False`.")
    target = _parts.target(adata, copy)
    x, what = _parts.matrix_of(target, layer)
    xp = _parts.matrix_part(x, what)
    # The raw-count check runs in the same call, before the residuals (one round trip).
    params = {"theta": float(theta), "clip": clip, "check_values": bool(check_values)}
    out = _parts.call("normalize_pearson_residuals", {"X": xp}, params, return_x=True)
    if check_values and not out["whole_numbers"]:
        warnings.warn(
            "`normalize_pearson_residuals()` expects raw count data, but non-integers were found.",
            UserWarning,
            stacklevel=2,
        )
    residuals = _parts.matrix_from(out["X"], like=x)
    record = {"theta": theta, "clip": clip, "computed_on": layer if layer else "adata.X"}
    if not inplace:
        return {"X": residuals, **record}
    _set_matrix(target, layer, residuals)
    target.uns["pearson_residuals_normalization"] = record
    return target if copy else None


def _whole_numbers(part: tuple) -> bool:
    """Whether every value of a matrix part (``_parts.matrix_part``'s) is a whole number:
    checked in the extension where the matrix lies (no CuPy kernel to compile on a first call),
    on the part the step then reads."""
    out = _parts.call("whole_numbers", {"X": part}, {})
    return bool(out["whole_numbers"])


def scrublet(
    adata,
    adata_sim=None,
    *,
    batch_key: str | None = None,
    sim_doublet_ratio: float = 2.0,
    expected_doublet_rate: float = 0.05,
    stdev_doublet_rate: float = 0.02,
    synthetic_doublet_umi_subsampling: float = 1.0,
    knn_dist_metric: str = "euclidean",
    normalize_variance: bool = True,
    log_transform: bool = False,
    mean_center: bool = True,
    n_prin_comps: int = 30,
    use_approx_neighbors: bool | None = None,
    get_doublet_neighbor_parents: bool = False,
    n_neighbors: int | None = None,
    threshold: float | None = None,
    verbose: bool = True,
    copy: bool = False,
    random_state: int = 0,
):
    """Doublets by Scrublet (scanpy's ``pp.scrublet``, Wolock et al. 2019): each cell's score
    from a kNN classifier of the observed cells among simulated doublets.

    X must hold raw counts (unless ``adata_sim`` is given). Per batch of ``batch_key``: genes in
    fewer than 3 cells and cells with fewer than 3 genes are dropped, the counts normalized and
    their highly variable genes (seurat flavour) kept, ``sim_doublet_ratio`` doublets per cell
    simulated from the raw counts, both normalized to 1e6, z-scored and embedded by a PCA of
    ``n_prin_comps`` fitted on the observed cells; each cell is scored from the doublets among
    its ``round(n_neighbors * (1 + sim_doublet_ratio))`` nearest neighbours
    (``n_neighbors = round(0.5 * sqrt(n_cells))`` by default), and called a doublet above
    ``threshold`` (by default the minimum between the two modes of the doublets' scores).

    Writes ``obs['doublet_score']``, ``obs['predicted_doublet']`` and ``uns['scrublet']``
    (``doublet_scores_sim``, ``doublet_parents``, ``parameters``, ``threshold``; with
    ``batch_key`` one per batch under ``batches``, and ``batched_by``), as scanpy. A cell
    scrublet's filter dropped gets a NaN score and is not called.

    The doublets are scanpy's for the same ``random_state`` (numpy's ``RandomState`` draws
    repeated), so below 2,731 cells a batch's scores, threshold and calls are scanpy's.
    Differences from scanpy: the neighbours are exact up to 32,768 cells and doublets, and above
    that found in an inverted file that scans at least 12 times the neighbours asked for
    (``use_approx_neighbors`` is accepted and changes nothing; scanpy uses pynndescent's
    approximate kNN from 2,731 cells); thinned
    doublets (``synthetic_doublet_umi_subsampling < 1``) use scpipe's own numbers; only
    ``knn_dist_metric='euclidean'``. ``get_doublet_neighbor_parents`` stores, as scanpy, each
    cell's list of its doublet neighbours' parents. With ``settings.device`` on a GPU, the
    preparation (for ``log_transform=False`` and no thinning) and the neighbour counts run on it,
    the rest on the host; X is read on the device (a CuPy X where it lies, a host CSR X
    uploaded without a host copy; X itself is never changed).
    """
    del verbose  # scanpy's info messages; the warning below is shown whatever it says
    if knn_dist_metric != "euclidean":
        raise ValueError(f"knn_dist_metric: only 'euclidean' is supported, not {knn_dist_metric!r}")
    _parts.numpy_seed(random_state, "random_state")
    target = _parts.target(adata, copy)
    params = {
        "sim_doublet_ratio": float(sim_doublet_ratio),
        "expected_doublet_rate": float(expected_doublet_rate),
        "stdev_doublet_rate": float(stdev_doublet_rate),
        "synthetic_doublet_umi_subsampling": float(synthetic_doublet_umi_subsampling),
        "mean_center": bool(mean_center),
        "normalize_variance": bool(normalize_variance),
        "log_transform": bool(log_transform),
        "n_prin_comps": int(n_prin_comps),
        "n_neighbors": None if n_neighbors is None else int(n_neighbors),
        "threshold": None if threshold is None else float(threshold),
        "random_state": int(random_state),
        "get_doublet_neighbor_parents": bool(get_doublet_neighbor_parents),
    }
    # On the GPU, X is read where it lies (a host X goes straight to the device); on the CPU
    # a CuPy X comes back first.
    on_gpu = settings.resolved_device() == "gpu"
    parts = {"X": _parts.matrix_part(target.X if on_gpu else _parts.host(target.X), "X")}
    if adata_sim is not None:
        if batch_key is not None:
            raise ValueError("give batch_key or adata_sim, not both (adata_sim holds the doublets of one batch)")
        if adata_sim.n_vars != target.n_vars:
            raise ValueError(f"adata_sim has {adata_sim.n_vars} genes, adata {target.n_vars}: they must be the same genes")
        if "doublet_parents" not in adata_sim.obsm:
            raise KeyError("adata_sim.obsm has no 'doublet_parents' (make adata_sim with scrublet_simulate_doublets)")
        parents = np.asarray(adata_sim.obsm["doublet_parents"])
        params["sim"] = _parts.matrix_part(_parts.host(adata_sim.X), "adata_sim.X")
        params["sim_parents"] = np.ascontiguousarray(parents.astype(np.int64).reshape(-1))
    elif batch_key is not None:
        if batch_key not in target.obs.columns:
            raise ValueError(
                f"`batch_key` must be a column of .obs in the input AnnData object, but {batch_key!r} is not in "
                f"{list(target.obs.columns)!r}."
            )
        params["batch_key"] = batch_key
        parts["obs"] = {batch_key: _parts.column_part(target.obs[batch_key], f"obs[{batch_key!r}]")}
    out = _parts.call("scrublet", parts, params)
    target.obs["doublet_score"] = out["obs"]["doublet_score"]
    target.obs["predicted_doublet"] = out["obs"]["predicted_doublet"]
    record = _parts.value_from(out["uns"]["scrublet"])
    if adata_sim is not None:
        record["doublet_parents"] = adata_sim.obsm["doublet_parents"]
        record["parameters"]["sim_doublet_ratio"] = (
            adata_sim.uns.get("scrublet", {}).get("parameters", {}).get("sim_doublet_ratio", None)
        )
    found = [record] if batch_key is None else list(record["batches"].values())
    for r in found:
        if "doublet_neighbor_parents" in r:
            ragged = r["doublet_neighbor_parents"]
            values, offsets = np.asarray(ragged["values"], dtype=np.intp), ragged["offsets"]
            r["doublet_neighbor_parents"] = [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
    target.uns["scrublet"] = record
    if any("threshold" not in r for r in found):
        warnings.warn(
            "Failed to automatically identify doublet score threshold. Run `call_doublets` with user-specified threshold.",
            UserWarning,
            stacklevel=2,
        )
    return target if copy else None


def scrublet_simulate_doublets(
    adata,
    *,
    layer: str | None = None,
    sim_doublet_ratio: float = 2.0,
    synthetic_doublet_umi_subsampling: float = 1.0,
    random_seed: int = 0,
):
    """Simulated doublets (scanpy's ``pp.scrublet_simulate_doublets``): an AnnData of
    ``int(n_obs * sim_doublet_ratio)`` doublets, each the raw counts of two cells added (no
    pair twice), thinned to a binomial draw at ``synthetic_doublet_umi_subsampling`` when it is
    below 1. Returns it with ``obs['n_counts']``, ``obsm['doublet_parents']`` and
    ``uns['scrublet']['parameters']``. The pairs are scanpy's for the same ``random_seed``."""
    import anndata

    _parts.numpy_seed(random_seed, "random_seed")
    x, what = _parts.matrix_of(adata, layer)
    out = _parts.call(
        "scrublet_simulate_doublets",
        {"X": _parts.matrix_part(_parts.host(x), what)},
        {
            "sim_doublet_ratio": float(sim_doublet_ratio),
            "synthetic_doublet_umi_subsampling": float(synthetic_doublet_umi_subsampling),
            "random_seed": int(random_seed),
        },
        return_x=True,
    )
    sim = anndata.AnnData(_parts.matrix_from(out["X"]))
    sim.obs["n_counts"] = out["obs"]["n_counts"]
    sim.obsm["doublet_parents"] = out["obsm"]["doublet_parents"]
    sim.uns["scrublet"] = _parts.value_from(out["uns"]["scrublet"])
    return sim


def sqrt(data, *, copy: bool = False, chunked: bool = False, chunk_size: int | None = None):
    """The square root of each value (scanpy's ``pp.sqrt``), of an AnnData's X or of a matrix
    (numpy, scipy sparse, CuPy: a CuPy X stays on the GPU). ``chunked`` and ``chunk_size`` are
    scanpy's and change nothing. Negative or NaN values are refused (scanpy gives NaN); the
    input is left as it was."""
    del chunked, chunk_size
    if hasattr(data, "X") and hasattr(data, "obs_names"):
        target = _parts.target(data, copy)
        target.X = sqrt(target.X)
        return target if copy else None
    x = data
    values = x.data if hasattr(x, "nnz") else x
    if _parts._cupy_module(x):
        import cupy

        bad = bool(cupy.any(~(values >= 0)))
    else:
        bad = bool(np.any(~(np.asarray(values) >= 0)))
    if bad:
        raise ValueError("sqrt: the matrix holds negative or NaN values")
    if hasattr(x, "nnz"):
        return x.sqrt()
    if _parts._cupy_module(x):
        import cupy

        return cupy.sqrt(x)
    return np.sqrt(x)


def combat(adata, key: str = "batch", *, covariates: Sequence[str] | None = None, inplace: bool = True):
    """ComBat batch correction (scanpy's ``pp.combat``, Johnson et al. 2007): per gene, a
    linear model on the batches (``obs[key]``) and the ``covariates``, the values
    standardized, each batch's location and scale shrunk across genes by empirical Bayes, and
    removed. X becomes dense (float32; scanpy's is float64), or the corrected matrix is
    returned with ``inplace=False``. Computed in f64 on the GPU when ``settings.device`` is
    one (the host's values, bit for bit), else on the host in Rust.

    A numeric covariate is one column of the model; a categorical one (or strings) one column
    per level but its first, as R's ``model.matrix`` and sva's ComBat code it. scanpy's patsy
    formula keeps every level of the first categorical covariate, columns that add up to the
    batches' own (a singular model, which numpy's inverse then answers with arbitrary values):
    with numeric covariates the two agree to float32 rounding, with categorical ones ours is
    the least-squares fit of the full-rank model. A covariate that makes the model singular
    (e.g. the batches again under another name) is refused by name.
    """
    if key not in adata.obs:
        raise ValueError(f"Could not find the key {key!r} in adata.obs")
    covariates = list(covariates) if covariates is not None else []
    missing = [c for c in covariates if c not in adata.obs.columns]
    if missing:
        raise ValueError(f"Could not find the covariate(s) {missing!r} in adata.obs")
    if key in covariates:
        raise ValueError("Batch key and covariates cannot overlap")
    if len(covariates) != len(set(covariates)):
        raise ValueError("Covariates must be unique")
    columns = []
    for c in covariates:
        col = adata.obs[c]
        if pd.api.types.is_numeric_dtype(col) and not isinstance(col.dtype, pd.CategoricalDtype):
            values = col.to_numpy(dtype=np.float64)
            if not np.isfinite(values).all():
                raise ValueError(f"combat: covariate {c!r} has values that are NaN or infinite")
            columns.append(values)
            continue
        levels = col.astype("category").cat.remove_unused_categories()
        codes = levels.cat.codes.to_numpy()
        if (codes < 0).any():
            raise ValueError(f"combat: {int((codes < 0).sum())} cells have no value of covariate {c!r}")
        columns.extend((codes == level).astype(np.float64) for level in range(1, len(levels.cat.categories)))
    batches = adata.obs[key].astype("category").cat.remove_unused_categories()
    codes = batches.cat.codes.to_numpy().astype(np.int64)
    if (codes < 0).any():
        raise ValueError(f"combat: {int((codes < 0).sum())} cells have no {key!r} batch")
    sizes = np.bincount(codes, minlength=len(batches.cat.categories))
    if (small := [str(b) for b, n in zip(batches.cat.categories, sizes) if n < 2]):
        raise ValueError(f"Batches {small!r} have fewer than 2 cells. ComBat requires at least 2 cells per batch to estimate within-batch variance. Filter these batches before running combat.")
    params = {
        "groups": codes,
        "n_groups": len(batches.cat.categories),
        "covariates": [[float(v) for v in column] for column in columns],
    }
    out = _parts.call("combat", {"X": _parts.matrix_part(_parts.host(adata.X), "X")}, params, return_x=True)
    x = _parts.matrix_from(out["X"])
    if not inplace:
        return x
    _parts.view_to_actual(adata)
    adata.X = x
    return None


def scale(
    data,
    *,
    zero_center: bool = True,
    max_value: float | None = None,
    copy: bool = False,
    layer: str | None = None,
    obsm: str | None = None,
    mask_obs=None,
):
    """Scales each gene to unit variance, centred at zero by default (scanpy's ``scale``);
    clips at ``max_value``. Writes ``var['mean']`` and ``var['std']``."""
    if obsm is not None or mask_obs is not None:
        raise ValueError("scale: obsm and mask_obs are not supported by scpipe yet")
    target = _parts.target(data, copy)
    x, what = _parts.matrix_of(target, layer)
    # A dense GPU X (after regress_out, say) is scaled in place of a CSR copy of every value.
    xp = _parts.matrix_part(x, what, dense_ok=True)
    params = {"zero_center": zero_center, "max_value": max_value}
    out = _parts.call("scale", {"X": xp}, params, return_x=True)
    _set_matrix(target, layer, _parts.matrix_from(out["X"], like=x))
    if layer is None:
        for k in ("mean", "std"):
            target.var[k] = _parts.column_from(out["var"][k])
    else:
        for k in ("mean", "std"):
            target.var[f"{layer}_{k}"] = _parts.column_from(out["var"][k])
    return target if copy else None


def pca(
    data,
    n_comps: int | None = None,
    *,
    layer: str | None = None,
    zero_center: bool = True,
    svd_solver: str | None = None,
    random_state: Any = 0,
    return_info: bool = False,
    mask_var: Any = "_default",
    use_highly_variable: bool | None = None,
    dtype: Any = "float32",
    chunked: bool = False,
    chunk_size: int | None = None,
    key_added: str | None = None,
    copy: bool = False,
):
    """Principal components of X (scanpy's ``pca``), on the highly variable genes when
    ``var['highly_variable']`` exists (scanpy's ``mask_var`` default).

    Writes ``obsm['X_pca']`` (cells x comps), ``varm['PCs']`` (genes x comps, zero outside
    the mask) and ``uns['pca']`` (``variance``, ``variance_ratio``, ``params``); ``key_added``
    renames the ``obsm`` and ``uns`` keys and ``varm`` key, as scanpy.
    """
    if not zero_center:
        raise ValueError("pca: scpipe's PCA is zero-centred (zero_center=False is not supported)")
    target = _parts.target(data, copy)
    x, what = _parts.matrix_of(target, layer)
    n_obs, n_vars = target.shape
    if use_highly_variable is not None:
        mask_var = "highly_variable" if use_highly_variable else None
    if isinstance(mask_var, str) and mask_var == "_default":
        mask_var = "highly_variable" if "highly_variable" in target.var.columns else None
    var = {}
    if mask_var is not None:
        mask = target.var[mask_var] if isinstance(mask_var, str) else pd.Series(np.asarray(mask_var))
        var["highly_variable"] = _parts.column_part(np.asarray(mask, dtype=bool), "mask_var")
    # A dense GPU X (scaled) is read as it is, unless some genes are masked out: the columns
    # of a dense matrix are not selected on the GPU, those of its CSR copy are.
    whole = not var or bool(np.asarray(var["highly_variable"]).all())
    xp = _parts.matrix_part(x, what, dense_ok=whole)
    if n_comps is None:
        n_sel = int(np.asarray(var["highly_variable"]).sum()) if var else n_vars
        n_comps = min(50, n_obs - 1, n_sel - 1)
    parts = {"X": xp, "var": var}
    out = _parts.call("pca", parts, {"n_comps": int(n_comps)})
    key_obsm, key_varm, key_uns = (key_added, key_added, key_added) if key_added else ("X_pca", "PCs", "pca")
    target.obsm[key_obsm] = out["obsm"]["X_pca"]
    target.varm[key_varm] = out["varm"]["PCs"]
    uns = _parts.value_from(out["uns"]["pca"])
    if mask_var is not None and isinstance(mask_var, str):
        uns.setdefault("params", {})["mask_var"] = mask_var
    target.uns[key_uns] = uns
    return target if copy else None


def harmony_integrate(
    adata,
    key: str,
    *,
    basis: str = "X_pca",
    adjusted_basis: str = "X_pca_harmony",
    flavor: str = "harmony2",
    theta: float | None = None,
    sigma: float | None = None,
    n_clusters: int | None = None,
    max_iter_harmony: int | None = None,
    max_iter_clustering: int | None = None,
    tol_harmony: float | None = None,
    tol_clustering: float | None = None,
    ridge_lambda: float | None = None,
    block_proportion: float | None = None,
    tau: float | None = None,
    random_state: int | None = None,
    **_kwargs,
) -> None:
    """Corrects ``obsm[basis]`` for the batches in ``obs[key]`` with harmony (rapids-singlecell's
    and scanpy.external's ``harmony_integrate``), into ``obsm[adjusted_basis]``.

    ``flavor="harmony2"`` (the default, as R harmony 2, harmonypy 2 and rapids-singlecell 0.18)
    or ``"harmony1"``; the other parameters default to that flavour's.
    """
    if key not in adata.obs.columns:
        raise KeyError(f"key: obs has no column {key!r}")
    if basis not in adata.obsm:
        raise KeyError(f"basis: obsm has no {basis!r} (run scpipe.pp.pca first)")
    z = np.ascontiguousarray(adata.obsm[basis], dtype=np.float32)
    parts = {
        "X": _parts.no_x(adata.n_obs),
        "obs": {key: _parts.column_part(adata.obs[key].astype("category"), f"obs[{key!r}]")},
        "obsm": {"X_pca": z},
    }
    params = dict(
        key=key, flavor=flavor, theta=theta, sigma=sigma, n_clusters=n_clusters,
        max_iter_harmony=max_iter_harmony, max_iter_clustering=max_iter_clustering,
        tol_harmony=tol_harmony, tol_clustering=tol_clustering, ridge_lambda=ridge_lambda,
        block_proportion=block_proportion, tau=tau,
        random_state=settings.random_state if random_state is None else random_state,
    )
    out = _parts.call("harmony_integrate", parts, params)
    _parts.view_to_actual(adata)
    adata.obsm[adjusted_basis] = out["obsm"]["X_pca_harmony"]


def neighbors(
    adata,
    n_neighbors: int = 15,
    n_pcs: int | None = None,
    *,
    use_rep: str | None = None,
    knn: bool = True,
    method: str = "umap",
    metric: str = "euclidean",
    algorithm: str = "auto",
    random_state: Any = 0,
    key_added: str | None = None,
    copy: bool = False,
    **_kwargs,
):
    """The kNN graph and its UMAP connectivities (scanpy's ``neighbors``).

    ``algorithm`` (rapids-singlecell's name): ``"exact"`` (``"brute"``), ``"ivf"`` (an
    inverted file refined by NN-descent) or ``"auto"`` (exact below 200,000 cells). The
    representation: ``use_rep``, else X when it has at most 50 genes, else ``X_pca``; its first
    ``n_pcs`` columns.

    Writes ``obsp['distances']``, ``obsp['connectivities']`` and ``uns['neighbors']``
    (``key_added`` prefixes them, as scanpy).
    """
    if method != "umap" or metric != "euclidean" or not knn:
        raise ValueError("neighbors: scpipe computes method='umap', metric='euclidean', knn=True")
    target = _parts.target(adata, copy)
    obsm, rep_name = _parts.dense_representation(target, use_rep, n_pcs, "neighbors")
    params = {"n_neighbors": int(n_neighbors), "use_rep": "rep", "algorithm": algorithm}
    out = _parts.call("neighbors", {"X": _parts.no_x(target.n_obs), "obsm": obsm}, params)
    uns = _parts.value_from(out["uns"]["neighbors"])
    p = uns["params"]
    p["random_state"] = random_state
    if rep_name == "X_pca" and use_rep is None:
        p.pop("use_rep", None)
    else:
        p["use_rep"] = rep_name
    if n_pcs is not None:
        p["n_pcs"] = n_pcs
    _write_graph(target, out, uns, key_added)
    return target if copy else None


def bbknn(
    adata,
    neighbors_within_batch: int = 3,
    n_pcs: int | None = None,
    *,
    batch_key: str | None = None,
    use_rep: str | None = None,
    random_state: Any = 0,
    algorithm: str = "brute",
    metric: str = "euclidean",
    metric_kwds: Any = None,
    algorithm_kwds: Any = None,
    trim: int | None = None,
    key_added: str | None = None,
    copy: bool = False,
):
    """Batch-balanced kNN (rapids-singlecell's ``pp.bbknn``, Polański et al. 2020): each
    cell's ``neighbors_within_batch`` nearest cells in every batch of ``obs[batch_key]``
    (default ``"batch"``; the exact search), sorted by distance, their UMAP connectivities as
    ``pp.neighbors`` makes them, then bbknn's trim (an edge stays when its weight is among the
    ``trim`` largest of each of its two cells; default 10 times the neighbours a cell, 0 keeps
    every edge). In place of ``pp.neighbors``' graph: ``obsp['distances']``,
    ``obsp['connectivities']`` and ``uns['neighbors']`` (``key_added`` prefixes them), for
    ``tl.umap`` and ``tl.leiden``. Each batch's search runs on the GPU when scpipe runs there
    (the host's neighbours), the graph's weights on the host.
    """
    if algorithm not in ("brute", "exact") or metric != "euclidean":
        raise ValueError("bbknn: scpipe computes the exact kNN (algorithm='brute') with metric='euclidean'")
    for name, v in [("metric_kwds", metric_kwds), ("algorithm_kwds", algorithm_kwds)]:
        if v:
            raise NotImplementedError(f"bbknn: {name} is not supported by scpipe")
    key = "batch" if batch_key is None else batch_key
    if key not in adata.obs:
        raise ValueError(f"Batch key {key!r} not present in `adata.obs`.")
    within = _parts.count(neighbors_within_batch, "bbknn: neighbors_within_batch", 1)
    if trim is not None:
        trim = _parts.count(trim, "bbknn: trim", 0)
    batches = adata.obs[key].astype("category").cat.remove_unused_categories()
    codes = batches.cat.codes.to_numpy().astype(np.int64)
    if (codes < 0).any():
        raise ValueError(f"bbknn: {int((codes < 0).sum())} cells have no {key!r} batch")
    sizes = np.bincount(codes, minlength=len(batches.cat.categories))
    if (small := [str(b) for b, n in zip(batches.cat.categories, sizes) if n < within]):
        raise ValueError(f"bbknn: batches {small!r} have fewer than neighbors_within_batch={within} cells")
    target = _parts.target(adata, copy)
    obsm, rep_name = _parts.dense_representation(target, use_rep, n_pcs, "bbknn")
    params = {"groups": codes, "n_groups": len(batches.cat.categories), "neighbors_within_batch": within, "trim": trim}
    out = _parts.call("bbknn", {"X": _parts.no_x(target.n_obs), "obsm": obsm}, params)
    uns = _parts.value_from(out["uns"]["neighbors"])
    p = uns["params"]
    p["use_rep"] = rep_name
    p["random_state"] = random_state
    p["bbknn"]["batch_key"] = key
    _write_graph(target, out, uns, key_added)
    return target if copy else None


def _write_graph(target, out: dict, uns: dict, key_added: str | None) -> None:
    """The graph a step returned into ``obsp`` and its record into ``uns``, under scanpy's
    names: ``distances``, ``connectivities`` and ``neighbors``, or prefixed by ``key_added``."""
    if key_added is None:
        name, dist, conn = "neighbors", "distances", "connectivities"
    else:
        name, dist, conn = key_added, f"{key_added}_distances", f"{key_added}_connectivities"
    uns["distances_key"], uns["connectivities_key"] = dist, conn
    target.obsp[dist] = _parts.matrix_from(out["obsp"]["distances"])
    target.obsp[conn] = _parts.matrix_from(out["obsp"]["connectivities"])
    target.uns[name] = uns


def recipe(
    adata,
    *,
    mito_prefix: str | None = None,
    min_genes: int = 200,
    min_cells: int = 10,
    target_sum: float = 1e4,
    n_top_genes: int = 2000,
    flavor: str = "cell_ranger",
    batch_key: str | None = None,
    n_comps: int = 50,
    harmony_key: str | None = None,
    n_neighbors: int = 15,
    algorithm: str = "auto",
    resolution: float | Iterable[float] = 1.0,
    markers: bool = True,
    tie_correct: bool = False,
    copy: bool = False,
):
    """The whole default flow of ``scpipe run``, in one call and through the same runner:
    QC (mitochondrial genes by ``mito_prefix``, else ``MT-``/``mt-``), ``filter_cells``,
    ``filter_genes``, ``normalize_total``, ``log1p``, highly variable genes (``.raw`` frozen,
    X subset to them), ``scale`` (max 10), ``pca``, optional harmony, ``neighbors``, ``umap``,
    ``leiden`` and the Wilcoxon marker genes. X must hold counts.

    The AnnData's X, ``.raw``, ``obs``, ``var`` and the results' slots are replaced by the
    run's; its other ``obs`` / ``var`` columns are kept for the cells and genes that remain.
    """
    target = adata.copy() if copy else adata
    xp = _parts.matrix_part(target.X, "X")
    obs = {"__scpipe_row": np.arange(target.n_obs, dtype=np.int64)}
    for key in (batch_key, harmony_key):
        if key is not None:
            if key not in target.obs.columns:
                raise KeyError(f"obs has no column {key!r}")
            obs[key] = _parts.column_part(target.obs[key].astype("category"), f"obs[{key!r}]")
    var = {"__scpipe_row": np.arange(target.n_vars, dtype=np.int64)}
    parts = {"X": xp, "var_names": _var_names(target), "obs": obs, "var": var}
    resolutions = [float(resolution)] if np.isscalar(resolution) else [float(r) for r in resolution]
    params = dict(
        mito_prefix=mito_prefix, min_genes=min_genes, min_cells=min_cells, target_sum=target_sum,
        n_top_genes=n_top_genes, flavor=flavor, batch_key=batch_key, n_comps=n_comps,
        harmony_key=harmony_key, n_neighbors=n_neighbors, algorithm=algorithm,
        resolutions=resolutions, markers=markers, tie_correct=tie_correct,
    )
    out = _parts.call("recipe", parts, params, return_x=True)
    _parts.view_to_actual(target)
    kept_obs = out["obs"].pop("__scpipe_row")
    kept_var = out["var"].pop("__scpipe_row")
    raw = out.get("raw")
    import anndata as ad

    target.X = None
    target._inplace_subset_obs(kept_obs)
    if raw is not None:
        # .raw: every gene that passed filter_genes, log-normalized (frozen before the subset).
        raw_cols = {k: _parts.column_from(v) for k, v in raw["var"].items() if k != "__scpipe_row"}
        raw_var = pd.DataFrame(raw_cols, index=pd.Index(raw["var_names"]))
        raw_ad = ad.AnnData(_parts.matrix_from(raw["X"]), obs=target.obs[[]], var=raw_var)
    target._inplace_subset_var(kept_var)
    target.X = _parts.matrix_from(out["X"])
    passed = {"obs": set(obs), "var": set(var)}
    _parts.write_results(target, out, passed)
    if raw is not None:
        target.raw = raw_ad
    return target if copy else None
