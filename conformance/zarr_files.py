"""zarr in and out, checked with anndata: the input converted to zarr by anndata (formats 2 and
3) runs to the same result as the h5ad input, and scpipe's zarr output (format 3, each
compression) read by `anndata.read_zarr` equals its h5ad output element by element."""

from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp


def _same_matrix(a, b) -> bool:
    if sp.issparse(a) != sp.issparse(b):
        return False
    if sp.issparse(a):
        a, b = sp.csr_matrix(a), sp.csr_matrix(b)
        return a.shape == b.shape and (a != b).nnz == 0 and a.dtype == b.dtype
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def _same_uns(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_uns(a[k], b[k]) for k in a)
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    if sp.issparse(a):
        return _same_matrix(a, b)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.names:
        return b.dtype.names == a.dtype.names and all(
            np.array_equal(a[f].astype(str) if a[f].dtype.kind in "OU" else a[f],
                           b[f].astype(str) if b[f].dtype.kind in "OU" else b[f], equal_nan=a[f].dtype.kind == "f")
            for f in a.dtype.names)
    if a.dtype.kind in "OU" or b.dtype.kind in "OU":
        return np.array_equal(a.astype(str), b.astype(str))
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def same_objects(rep, tag: str, z: ad.AnnData, h: ad.AnnData) -> None:
    """Element by element: X, obs, var, obsm, varm, obsp, layers, uns, raw."""
    rep.check(f"{tag}: X", _same_matrix(z.X, h.X))
    rep.check(f"{tag}: obs", z.obs.equals(h.obs))
    rep.check(f"{tag}: var", z.var.equals(h.var))
    for part in ("obsm", "varm", "obsp", "layers"):
        zs, hs = getattr(z, part), getattr(h, part)
        ok = set(zs.keys()) == set(hs.keys()) and all(_same_matrix(zs[k], hs[k]) for k in hs.keys())
        rep.check(f"{tag}: {part} ({', '.join(sorted(hs.keys())) or 'none'})", ok)
    rep.check(f"{tag}: uns ({len(h.uns)} entries)", _same_uns(dict(z.uns), dict(h.uns)))
    raw_ok = (z.raw is None) == (h.raw is None) and (
        h.raw is None or (_same_matrix(z.raw.X, h.raw.X) and z.raw.var.equals(h.raw.var)))
    rep.check(f"{tag}: raw", raw_ok)


def check_zarr(rep, run_scpipe, scpipe: Path, src: Path, h5ad_out: Path, work: Path, flavor: str) -> None:
    """`h5ad_out`: scpipe's output for `src` (an h5ad file) with `flavor`."""
    h = ad.read_h5ad(h5ad_out)
    source = ad.read_h5ad(src)
    # The sample's index is a pandas StringArray, which anndata writes only when allowed.
    ad.settings.allow_write_nullable_strings = True
    for fmt in (2, 3):
        zin = work / f"input_v{fmt}.zarr"
        ad.settings.zarr_write_format = fmt
        source.write_zarr(zin)
        out = work / f"from_v{fmt}.h5ad"
        run_scpipe(scpipe, zin, out, flavor, None)
        same_objects(rep, f"zarr input (anndata, format {fmt}) -> h5ad, against the h5ad input", ad.read_h5ad(out), h)
    for codec in ("zstd", "lz4", "none"):
        out = work / f"out_{codec}.zarr"
        run_scpipe(scpipe, src, out, flavor, None, ["--zarr-compression", codec])
        same_objects(rep, f"zarr output ({codec}) read by anndata, against the h5ad output", ad.read_zarr(out), h)
