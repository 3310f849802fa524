"""The parts of an AnnData that a step reads, in the layouts the extension takes, and the
step's results written back where scanpy writes them.

A step never sees the user's object: it gets the parts it reads (X or a layer, a few columns,
an ``obsm`` entry, the neighbors graph), works on its own copy, and the results are written
only once it has succeeded, so an error or Ctrl-C leaves the AnnData as it was.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rmm_core import _lib
from scpipe._settings import settings

ACCEPTED_X = (
    "scipy.sparse CSR or CSC (csr_matrix / csr_array / csc_matrix / csc_array), a numpy "
    "ndarray, or a CuPy array / cupyx.scipy.sparse CSR or CSC matrix"
)

# float32 holds every integer up to 2**24 exactly.
_F32_EXACT = 2**24


def _cupy_module(m: Any) -> bool:
    """Whether ``m`` is a CuPy array or a cupyx sparse matrix."""
    return type(m).__module__.startswith("cupy")


def matrix_part(m: Any, what: str = "X", dense_ok: bool = False) -> tuple:
    """``("csr", shape, data, indices, indptr)`` or ``("dense", array)`` for a matrix.
    ``dense_ok``: the step takes a dense matrix on the GPU as it is (PCA, regress_out, scale);
    the other steps read a dense CuPy matrix as a CSR copy made on the device."""
    if m is None:
        raise ValueError(f"{what} is None: the step needs a matrix there")
    if _cupy_module(m):
        if settings.resolved_device() == "gpu":
            return _cuda_part(m, what, dense_ok)
        m = m.get()  # on the CPU: to the host
    if sp.issparse(m):
        if m.format not in ("csr", "csc"):
            raise TypeError(f"{what} is a {m.format.upper()} sparse matrix; accepted: {ACCEPTED_X}")
        m = m.tocsr() if m.format == "csc" else m
        data = _float32(m.data, what)
        indices, indptr = m.indices, m.indptr
        if indices.dtype not in (np.int32, np.int64):
            indices = indices.astype(np.int64)
        if indptr.dtype not in (np.int32, np.int64):
            indptr = indptr.astype(np.int64)
        return ("csr", m.shape, data, np.ascontiguousarray(indices), np.ascontiguousarray(indptr))
    if isinstance(m, np.ndarray) and not isinstance(m, np.ma.MaskedArray):
        if m.ndim != 2:
            raise TypeError(f"{what} must be 2-dimensional, not {m.ndim}-dimensional")
        return ("dense", np.ascontiguousarray(_float32(m, what)))
    raise TypeError(f"{what} is a {type(m).__module__}.{type(m).__name__}; accepted: {ACCEPTED_X}")


def _cuda_part(m: Any, what: str, dense_ok: bool = False) -> tuple:
    """A CuPy matrix as the extension takes it on the GPU, never through the host: float32
    values, int32 column indices and int32 or int64 row offsets (each the user's own array when
    it is of that type already; else converted by CuPy on the device). The extension checks its
    structure on the device and names what is wrong (offsets out of order, a column index past
    the columns, a column stored twice in a row)."""
    import cupy
    import cupyx.scipy.sparse as cusparse

    if cusparse.issparse(m):
        if m.format not in ("csr", "csc"):
            raise TypeError(f"{what} is a cupyx {m.format.upper()} matrix; accepted: {ACCEPTED_X}")
        m = m.tocsr() if m.format == "csc" else m
        data = cupy.ascontiguousarray(_float32(m.data, what))
        # int32 or int64 offsets as they are: the extension widens int32 ones and refuses
        # malformed ones (not from 0 to the values' count in order) with its own kernels, as
        # CuPy would compile its elementwise kernels on a machine's first call (seconds).
        indptr = m.indptr if m.indptr.dtype in (cupy.int32, cupy.int64) else m.indptr.astype(cupy.int64)
        indptr = cupy.ascontiguousarray(indptr)
        # Column indices lie below the column count, which cupyx keeps within int32.
        indices = cupy.ascontiguousarray(m.indices.astype(cupy.int32, copy=False))
        return ("cuda_csr", m.shape, data, indices, indptr)
    if m.ndim != 2:
        raise TypeError(f"{what} must be 2-dimensional, not {m.ndim}-dimensional")
    if not dense_ok:
        # The steps' GPU kernels other than PCA's read CSR (as the command holds X).
        return _cuda_part(cusparse.csr_matrix(_float32(m, what)), what)
    return ("cuda_dense", cupy.ascontiguousarray(_float32(m, what)))


def writes_in_place(m: Any, part: tuple) -> bool:
    """Whether a value-only step may write into ``m``'s own values on the GPU (as
    rapids-singlecell does, with no copy of X): ``part`` holds the very values (float32) of a
    cupyx CSR ``m``; its offsets and indices are only read. Else (a dense or CSC CuPy X, other
    value types) the step works on a copy and ``m`` is replaced by its result."""
    return part[0] == "cuda_csr" and part[2] is m.data


def part_values(part: tuple) -> Any:
    """The stored values of a matrix part (numpy or CuPy)."""
    return part[2] if part[0] in ("csr", "cuda_csr") else part[1]


def names(index: pd.Index) -> list:
    """Row or column names as Python strings (through numpy: iterating a pyarrow-backed index
    element by element takes 30 ms for 20,000 genes)."""
    return list(map(str, index.to_numpy(dtype=object)))


def no_x(n_obs: int) -> tuple:
    """X for the steps that do not read it (they work on ``obsm`` or the graph): no genes."""
    return ("csr", (n_obs, 0), np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(n_obs + 1, np.int32))


def _float32(a: Any, what: str) -> Any:
    """``a`` (numpy or CuPy) as float32 (a copy only when it is not), refusing what float32
    cannot hold."""
    kind = a.dtype.kind
    if kind == "f":
        return a.astype(np.float32, copy=False)
    if kind in "iu":
        if a.size and (int(a.max()) > _F32_EXACT or int(a.min()) < -_F32_EXACT):
            raise ValueError(f"{what} holds integers beyond 2**24, which float32 cannot hold exactly")
        return a.astype(np.float32)
    if kind == "b":
        return a.astype(np.float32)
    raise TypeError(f"{what} has values of type {a.dtype}; numbers are needed")


def matrix_from(part: tuple, like: Any = None) -> Any:
    """A matrix back from its part: scipy CSR (an ``sp.csr_array`` when ``like`` is a sparse
    array) or a numpy array; on the GPU (CuPy) when ``like`` is there."""
    if part[0] in ("cuda_csr", "cuda_dense"):
        return _from_cuda(part, like)
    if like is not None and _cupy_module(like):
        return _to_cupy(matrix_from(part))
    if part[0] == "dense":
        return part[1]
    _, shape, data, indices, indptr = part
    cls = sp.csr_array if isinstance(like, sp.sparray) else sp.csr_matrix
    return cls((data, indices, indptr), shape=tuple(shape))


def _from_cuda(part: tuple, like: Any = None) -> Any:
    """A result the extension left on the GPU, as CuPy arrays over its buffers (no copy)."""
    import cupy
    import cupyx.scipy.sparse as cusparse

    if part[0] == "cuda_dense":
        _, shape, data = part
        return cupy.asarray(data).view(cupy.float32).reshape(shape)
    _, shape, data, indices, indptr = part
    data = cupy.asarray(data).view(cupy.float32)
    # int32 offsets while they fit, as scipy and cupyx choose (narrowed by the extension), else
    # int64: told apart by their size.
    indptr = cupy.asarray(indptr)
    indptr = indptr.view(cupy.int32 if indptr.nbytes == 4 * (shape[0] + 1) else cupy.int64)
    m = cusparse.csr_matrix((data, cupy.asarray(indices).view(cupy.int32), indptr), shape=tuple(shape))
    # A dense CuPy X stays dense (it went to the step as a CSR copy).
    return m.toarray() if isinstance(like, cupy.ndarray) else m


def _to_cupy(m: Any) -> Any:
    """A result back on the GPU, where the user's matrix was (as rapids-singlecell keeps it)."""
    import cupy
    import cupyx.scipy.sparse as cusparse

    return cusparse.csr_matrix(m) if sp.issparse(m) else cupy.asarray(m)


def column_part(s: pd.Series | np.ndarray, what: str) -> Any:
    """A column as the extension takes it."""
    if isinstance(s, pd.Series) and isinstance(s.dtype, pd.CategoricalDtype):
        cat = s.cat
        categories = cat.categories
        cats = (
            [str(c) for c in categories]
            if categories.dtype == object or categories.dtype.kind in "OUS"
            else _numeric(np.asarray(categories), what)
        )
        return ("cat", np.ascontiguousarray(cat.codes.to_numpy(), dtype=np.int32), cats, bool(cat.ordered))
    a = s.to_numpy() if isinstance(s, pd.Series) else np.asarray(s)
    if a.dtype == object or a.dtype.kind in "US":
        return [str(v) for v in a]
    return _numeric(a, what)


def _numeric(a: np.ndarray, what: str) -> np.ndarray:
    if a.dtype.kind == "b":
        return np.ascontiguousarray(a, dtype=np.bool_)
    if a.dtype.kind in "iu":
        return np.ascontiguousarray(a, dtype=np.int32 if a.dtype.itemsize < 4 or a.dtype == np.int32 else np.int64)
    if a.dtype.kind == "f":
        return np.ascontiguousarray(a, dtype=np.float32 if a.dtype == np.float32 else np.float64)
    raise TypeError(f"{what} has values of type {a.dtype}, which scpipe cannot read")


def uns_part(v: Any) -> Any:
    """An ``uns`` entry as the extension takes it (dicts, scalars, strings, arrays)."""
    if isinstance(v, dict):
        return {str(k): uns_part(x) for k, x in v.items()}
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
        return np.ascontiguousarray(v)
    return v


def column_from(part: Any) -> Any:
    """A column back from its part."""
    if isinstance(part, tuple) and part[0] == "cat":
        _, codes, categories, ordered = part
        return pd.Categorical.from_codes(codes, categories=pd.Index(categories), ordered=ordered)
    if isinstance(part, tuple) and part[0] == "nullable":
        _, values, mask = part
        return pd.array(np.ma.masked_array(values, mask=mask).tolist())
    if isinstance(part, list):
        return np.array(part, dtype=object)
    return part


def value_from(part: Any) -> Any:
    """An ``uns`` entry back from its part."""
    if isinstance(part, dict):
        return {k: value_from(v) for k, v in part.items()}
    if isinstance(part, tuple):
        kind = part[0]
        if kind == "rec":
            fields = part[1]
            return np.rec.fromarrays([np.asarray(a) for _, a in fields], names=[n for n, _ in fields])
        if kind == "df":
            _, index, cols = part
            return pd.DataFrame({k: column_from(c) for k, c in cols.items()}, index=pd.Index(index))
        if kind == "csr":
            return matrix_from(part)
    if isinstance(part, list):
        return np.array(part)
    return part


def call(step: str, parts: dict, params: dict, return_x: bool = False, in_place: bool = False) -> dict:
    """Runs ``step`` in the extension, where ``scpipe.settings.device`` says; ``in_place``: a
    value-only step writes into the GPU X's own values (see :func:`writes_in_place`)."""
    device = settings.resolved_device()
    start = time.perf_counter()
    out = _lib._sc_call(step, parts, params, device, return_x, settings.progress, in_place)
    if settings.progress:
        t_in, t_step, t_out = out["timings"]
        print(
            f"scpipe: {step} on the {device.upper()} in {time.perf_counter() - start:.3f} s "
            f"(parts in {t_in:.3f} s, step {t_step:.3f} s, results out {t_out:.3f} s)",
            file=sys.stderr,
        )
    return out


def view_to_actual(adata) -> None:
    """A view becomes an object of its own before a step writes into it (as scanpy does)."""
    if adata.is_view:
        adata._init_as_actual(adata.copy())


def write_columns(df: pd.DataFrame, cols: dict, skip: set = frozenset()) -> None:
    for name, part in cols.items():
        if name not in skip:
            df[name] = column_from(part)


def write_results(adata, out: dict, passed: dict) -> None:
    """Writes what the step made (every ``obs``/``var`` column, ``obsm``/``varm``/``obsp``
    entry and ``uns`` key it returns that was not handed to it) into ``adata``."""
    write_columns(adata.obs, out["obs"], set(passed.get("obs", ())))
    write_columns(adata.var, out["var"], set(passed.get("var", ())))
    for slot in ("obsm", "varm"):
        for k, a in out[slot].items():
            if k not in passed.get(slot, ()):
                getattr(adata, slot)[k] = a
    for k, part in out["obsp"].items():
        if k not in passed.get("obsp", ()):
            adata.obsp[k] = matrix_from(part)
    for k, v in out["uns"].items():
        if k not in passed.get("uns", ()):
            adata.uns[k] = value_from(v)


def numpy_seed(seed: Any, name: str) -> None:
    """Refuses what numpy's ``RandomState`` would not take as a seed (the functions that draw
    scanpy's numbers repeat its draws): an int in [0, 2**32)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{name} must be an int (a numpy RandomState seed), not {seed!r}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"{name} must be in [0, 2**32) as numpy's RandomState takes it, not {seed}")


def target(adata, copy: bool):
    """The AnnData a function writes into: a copy with ``copy``, else the object itself, made
    an object of its own if it is a view (as scanpy does)."""
    if copy:
        return adata.copy()
    view_to_actual(adata)
    return adata


def matrix_of(adata, layer: str | None, use_raw: bool = False) -> tuple[Any, str]:
    """The matrix a step reads and its name: a layer, ``.raw.X`` or X."""
    if layer is not None and use_raw:
        raise ValueError("give layer or use_raw=True, not both")
    if layer is not None:
        if layer not in adata.layers:
            raise KeyError(f"layer {layer!r} does not exist (layers: {list(adata.layers.keys())})")
        return adata.layers[layer], f"layers[{layer!r}]"
    if use_raw:
        if adata.raw is None:
            raise ValueError("use_raw=True but the AnnData has no .raw")
        return adata.raw.X, "raw.X"
    return adata.X, "X"


def representation(adata, use_rep: str | None, n_pcs: int | None, step: str) -> tuple[Any, str]:
    """The cells' representation a step reads and its name, as scanpy chooses it: ``use_rep``
    (``"X"`` for X), else X when it has at most 50 genes, else ``X_pca``; its first ``n_pcs``
    columns. Refuses a missing representation and ``n_pcs`` above its columns by name."""
    if use_rep is None and n_pcs == 0:
        use_rep = "X"
    if use_rep is None:
        if adata.n_vars <= 50:
            use_rep = "X"
        elif "X_pca" in adata.obsm:
            use_rep = "X_pca"
        else:
            raise KeyError(f"{step}: no obsm['X_pca'] (run scpipe.pp.pca first, or give use_rep)")
    if use_rep == "X":
        rep = adata.X
    elif use_rep in adata.obsm:
        rep = adata.obsm[use_rep]
    else:
        raise KeyError(f"{step}: use_rep: obsm has no {use_rep!r} (obsm: {list(adata.obsm.keys())})")
    if n_pcs is not None:
        if n_pcs > rep.shape[1]:
            raise ValueError(f"{step}: n_pcs={n_pcs} but {use_rep} has {rep.shape[1]} columns")
        rep = rep[:, :n_pcs]
    return rep, use_rep


def dense_representation(adata, use_rep: str | None, n_pcs: int | None, step: str) -> tuple[dict, str]:
    """:func:`representation` as the steps that read it take it (``obsm['rep']``, dense
    float32 on the host), and its name."""
    rep, name = representation(adata, use_rep, n_pcs, step)
    return {"rep": dense_host(rep)}, name


def dense_host(m: Any) -> np.ndarray:
    """A matrix (sparse or dense, CuPy included) as a C-ordered float32 numpy array."""
    m = host(m)
    m = m.toarray() if hasattr(m, "toarray") else np.asarray(m)
    return np.ascontiguousarray(m, dtype=np.float32)


def count(v: Any, name: str, minimum: int) -> int:
    """``v`` as an int of at least ``minimum``, or a ValueError naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {v!r}")
    return int(v)


def host(m: Any) -> Any:
    """A CuPy matrix's host copy (for the steps computed on the host); any other as it is."""
    return m.get() if _cupy_module(m) else m
