"""scanpy's and rapids-singlecell's ``get``: moving an AnnData's matrices between the host and
the GPU (with CuPy installed, ``anndata_to_GPU`` turns X and the layers into CuPy arrays /
cupyx sparse matrices over memory from rmm_core's resource, and ``anndata_to_CPU`` brings them
back as numpy / scipy), and ``aggregate``: per-group sums, means, variances, non-zero counts
and medians (pseudobulks).
"""

from __future__ import annotations

import warnings
from typing import Any, Collection, Iterable, Literal

import numpy as np
import pandas as pd

from rmm_core import _lib
from scpipe import _parts

__all__ = ["aggregate", "anndata_to_GPU", "anndata_to_CPU"]

_AGG_FUNCS = ("count_nonzero", "mean", "sum", "var", "median")


def _cupy():
    try:
        import cupy
        import cupyx.scipy.sparse as cusparse
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError(
            "scpipe.get.anndata_to_GPU needs CuPy (pip install cupy-cuda12x / cupy-cuda13x); "
            "without it the functions copy X to the GPU at each call"
        ) from e
    return cupy, cusparse


def _targets(adata, convert_all: bool, layer: str | Iterable[str] | None):
    keys = [None]
    if convert_all:
        keys += list(adata.layers.keys())
    elif layer is not None:
        keys += [layer] if isinstance(layer, str) else list(layer)
    return keys


def anndata_to_GPU(adata, layer: str | Iterable[str] | None = None, convert_all: bool = False, copy: bool = False):
    """X (and ``layer``, or every layer with ``convert_all``) onto the GPU as CuPy arrays: CSR
    (a CSC matrix becomes CSR, the layout every step reads) or dense float32, uploaded through
    pinned staging buffers into memory from rmm_core's resource, read from the host arrays in
    place."""
    _cupy()
    target = adata.copy() if copy else adata
    for key in _targets(target, convert_all, layer):
        m = target.X if key is None else target.layers[key]
        if _parts._cupy_module(m):
            continue
        what = "X" if key is None else f"layers[{key!r}]"
        g = _parts.matrix_from(_lib._sc_to_device(_parts.matrix_part(m, what)))
        if key is None:
            target.X = g
        else:
            target.layers[key] = g
    return target if copy else None


def anndata_to_CPU(adata, layer: str | Iterable[str] | None = None, convert_all: bool = False, copy: bool = False):
    """X (and ``layer``, or every layer with ``convert_all``) back to numpy / scipy."""
    target = adata.copy() if copy else adata
    for key in _targets(target, convert_all, layer):
        m = target.X if key is None else target.layers[key]
        if not _parts._cupy_module(m):
            continue
        h = m.get()
        if key is None:
            target.X = h
        else:
            target.layers[key] = h
    return target if copy else None


def aggregate(
    adata,
    by: str | Collection[str],
    func: str | Iterable[str],
    *,
    axis: Literal["obs", 0, "var", 1] | None = None,
    mask: np.ndarray | str | None = None,
    dof: int = 1,
    layer: str | None = None,
    obsm: str | None = None,
    varm: str | None = None,
):
    """Aggregates X (or ``layer``, ``obsm``, ``varm``) by categories, as scanpy 1.12's
    ``sc.get.aggregate``: a new AnnData with one row per combination of the ``by`` columns'
    categories that occurs (named ``a_b``), ``obs['n_obs_aggregated']`` (rows counted, the
    ``mask`` respected), and one layer per ``func`` of ``count_nonzero``, ``mean``, ``sum``,
    ``var`` (with ``dof``) and ``median``.

    Rows with a missing category or masked out count nowhere. ``var`` is NaN (with a warning)
    for groups of at most ``dof`` rows. ``sum`` is int64 for an integer matrix, float64
    otherwise; ``count_nonzero`` int64; the rest float64. Values are read as float32 (a float64
    ``obsm`` rounded), accumulated in float64. A sparse X (or layer) on the GPU grouped by cells
    is aggregated there (the host's numbers, bit for bit) unless ``median`` is asked; otherwise
    it is computed on the host in Rust (a GPU matrix read back).
    """
    from anndata import AnnData

    if not isinstance(adata, AnnData):
        raise NotImplementedError(f"aggregate takes an AnnData, not a {type(adata).__name__}")
    if sum(p is not None for p in (varm, obsm, layer)) > 1:
        raise TypeError("Please only provide one (or none) of varm, obsm, or layer")
    if axis is None:
        axis = 1 if varm else 0
    dim = {0: "obs", "obs": "obs", 1: "var", "var": "var"}.get(axis)
    if dim is None:
        raise ValueError(f"axis must be 0, 1, 'obs' or 'var', not {axis!r}")
    funcs = [func] if isinstance(func, str) else list(func)
    if unknown := sorted(set(funcs) - set(_AGG_FUNCS)):
        raise ValueError(f"func {unknown} is not one of {list(_AGG_FUNCS)}")
    if not funcs:
        raise ValueError(f"func: give at least one of {list(_AGG_FUNCS)}")
    if isinstance(dof, bool) or not isinstance(dof, (int, np.integer)) or dof < 0:
        raise ValueError(f"dof must be an integer >= 0, not {dof!r}")

    data, what, rows_grouped = _aggregated_data(adata, dim, layer, obsm, varm)
    table = getattr(adata, dim)
    keep = _mask(adata, mask, dim)
    codes, labels = _combined_categories(table, [by] if isinstance(by, str) else list(by), dim)
    if keep is not None:
        codes[~keep] = -1

    if isinstance(data, pd.DataFrame):
        var = pd.DataFrame(index=data.columns)
        data = data.to_numpy()
    elif obsm is not None or varm is not None:
        var = pd.DataFrame(index=pd.RangeIndex(data.shape[1]).astype(str))
    else:
        var = getattr(adata, "var" if dim == "obs" else "obs")
    integer = np.dtype(data.dtype).kind in "iub"
    # A sparse CuPy matrix grouped by its rows is aggregated on the GPU (all but the median).
    on_gpu = rows_grouped and "median" not in funcs
    on_gpu = on_gpu and _parts._cupy_module(data) and _sparse_format(data) is not None
    x = data if on_gpu else _parts.host(data)
    if not rows_grouped and _sparse_format(x) == "csc":
        x, rows_grouped = x.T, True  # the transpose of a CSC matrix is CSR: no copy
    params = {
        "groups": np.ascontiguousarray(codes),
        "n_groups": len(labels),
        "func": sorted(set(funcs)),
        "dof": int(dof),
        "axis": "obs" if rows_grouped else "var",
    }
    out = _parts.call("aggregate", {"X": _parts.matrix_part(x, what)}, params)["aggregate"]
    counts = out.pop("counts")
    labels["n_obs_aggregated"] = counts
    if dof > 0 and "var" in funcs and (few := counts <= dof).any():
        warnings.warn(
            f"Group counts matches dof, resulting var for groups {list(labels.index[few])} will be nan",
            RuntimeWarning,
            stacklevel=2,
        )
    if integer and "sum" in out and not isinstance(data, np.ndarray):
        out["sum"] = out["sum"].astype(np.int64)
    result = AnnData(layers={f: out[f] for f in funcs if f in out}, obs=labels, var=var)
    return result if dim == "obs" else result.T


def _sparse_format(m: Any) -> str | None:
    return getattr(m, "format", None) if hasattr(m, "tocsr") else None


def _aggregated_data(adata, dim: str, layer, obsm, varm) -> tuple[Any, str, bool]:
    """The matrix aggregate reads, its name, and whether its rows are what is grouped (else its
    columns: X or a layer grouped by var)."""
    for slot, key, axis, number in [("varm", varm, "var", 1), ("obsm", obsm, "obs", 0)]:
        if key is None:
            continue
        if dim != axis:
            raise ValueError(f"{slot} can only be used when axis is {number}")
        table = getattr(adata, slot)
        if key not in table:
            raise KeyError(f"{slot} has no {key!r} ({slot}: {list(table.keys())})")
        return table[key], f"{slot}[{key!r}]", True
    m, what = _parts.matrix_of(adata, layer)
    return m, what, dim == "obs"


def _mask(adata, mask, dim: str) -> np.ndarray | None:
    """``mask`` as a boolean array over ``dim``: an array, or the name of a boolean column."""
    if mask is None:
        return None
    table = getattr(adata, dim)
    if isinstance(mask, str):
        if mask not in table.columns:
            raise ValueError(f"Did not find `adata.{dim}[{mask!r}]`: add the mask there, or pass it as an array")
        mask = table[mask].to_numpy()
    mask = _parts.host(mask) if not isinstance(mask, pd.Series) else mask.to_numpy()
    mask = np.asarray(mask)
    if mask.shape != (len(table),):
        raise ValueError(f"The shape of the mask ({mask.shape}) does not match {dim} ({len(table)})")
    if not pd.api.types.is_bool_dtype(mask.dtype):
        raise ValueError(f"mask must be boolean, not {mask.dtype}")
    return mask.astype(bool)


def _combined_categories(table: pd.DataFrame, cols: list[str], dim: str) -> tuple[np.ndarray, pd.DataFrame]:
    """The group of each row (-1: a missing category) and the table of the groups: the
    combinations of the ``cols`` categories that occur, named ``a_b``, in the order of the
    product of the columns' categories, as scanpy builds them. Counted, not sorted (pandas'
    ``remove_unused_categories`` and ``np.unique`` take 30 and 13 ms a million rows)."""
    if not cols:
        raise ValueError("by: give at least one column")
    for c in cols:
        if c not in table.columns:
            raise KeyError(f"by: {dim} has no column {c!r}")
    n = len(table)
    categories, sizes = [], []
    code = np.zeros(n, dtype=np.int64)
    missing = np.zeros(n, dtype=bool)
    for c in cols:
        cat = pd.Categorical(table[c])
        codes = np.asarray(cat.codes, dtype=np.int64)
        absent = codes < 0
        # The categories that occur, in their order, and each row's code among them.
        occurs = np.bincount(codes[~absent], minlength=len(cat.categories)) > 0
        within = np.cumsum(occurs) - 1
        categories.append(cat.categories[occurs])
        sizes.append(int(occurs.sum()))
        # Row-major codes of the product: the last column varies fastest.
        code = code * sizes[-1] + within[np.maximum(codes, 0)] if len(occurs) else code
        missing |= absent
    code[missing] = -1
    kept = code[~missing]
    product = int(np.prod(sizes, dtype=np.float64)) if sizes else 0
    if product <= 4 * n + 1_000_000:
        present = np.bincount(kept, minlength=product) > 0
        used = np.flatnonzero(present)
        rank = np.cumsum(present) - 1
        groups = np.where(missing, -1, rank[np.maximum(code, 0)] if product else -1)
    else:
        used = np.unique(kept)
        groups = np.where(missing, -1, np.searchsorted(used, code))
    combos = np.array(np.unravel_index(used, sizes)).reshape(len(cols), -1) if sizes else np.empty((0, 0), int)
    names = pd.Index(["_".join(str(cats[combos[i, k]]) for i, cats in enumerate(categories)) for k in range(len(used))])
    labels = pd.DataFrame(
        {col: pd.Categorical.from_codes(combos[i], cats) for i, (col, cats) in enumerate(zip(cols, categories))},
        index=names,
    )
    return groups, labels
