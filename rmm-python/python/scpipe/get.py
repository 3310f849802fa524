"""Moving an AnnData's matrices between the host and the GPU, as rapids-singlecell's
``rsc.get``: with CuPy installed, ``anndata_to_GPU`` turns X and the layers into CuPy arrays /
cupyx sparse matrices over memory from rmm_core's resource, and ``anndata_to_CPU`` brings them
back as numpy / scipy.
"""

from __future__ import annotations

from typing import Iterable

from rmm_core import _lib
from scpipe import _parts

__all__ = ["anndata_to_GPU", "anndata_to_CPU"]


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
