"""What the scpipe tests share: the real datasets, the device gate, and the comparisons with
scanpy at the tolerances the command meets in conformance/ (whose graph-step checks they
reuse)."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "conformance"))

sc = pytest.importorskip("scanpy", reason="the scpipe tests compare with scanpy (conformance/requirements.txt)")
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)

import scpipe  # noqa: E402


def data_dir() -> Path:
    d = Path(os.environ.get("SCPIPE_DATA", ROOT.parent / "shared" / "data"))
    if not d.is_dir():
        pytest.skip(f"no datasets at {d} (set SCPIPE_DATA)")
    return d


def device_gate() -> str:
    """Where the suite runs: the GPU when one is usable (and must be under REQUIRE_GPU=1)."""
    device = scpipe.settings.resolved_device()
    if os.environ.get("REQUIRE_GPU") == "1" and device != "gpu":
        pytest.fail("REQUIRE_GPU=1 but scpipe would run on the CPU")
    return device


class Checks:
    """Collects named checks (conformance's `rep`) and fails the test with every failed one."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed: list[str] = []
        self.known: list[tuple[str, str, bool]] = []

    def known_failure(self, name: str, reason: str, strict: bool = True) -> None:
        """A check (by the start of its name) known to fail, with the reason: it does not fail
        the test, but (when `strict`) its passing does, so that the note is taken back."""
        self.known.append((name, reason, strict))

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        (self.passed if ok else self.failed).append(f"{name}: {detail}")

    def skip(self, name: str, kind: str, reason: str) -> None:
        self.failed.append(f"{name}: skipped ({kind}: {reason})")

    def done(self) -> None:
        failed = []
        for f in self.failed:
            if not any(f.startswith(name) for name, _, _ in self.known):
                failed.append(f)
        for name, reason, strict in self.known:
            if strict and not any(f.startswith(name) for f in self.failed):
                failed.append(f"{name}: known to fail ({reason}) but passed: take the note back")
        assert not failed, "failed checks:\n" + "\n".join(failed)


def dense(x) -> np.ndarray:
    return np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float64)


def close(ours, theirs, rtol: float, atol: float) -> tuple[bool, float]:
    a, b = dense(ours), dense(theirs)
    if a.shape != b.shape:
        return False, float("inf")
    d = np.abs(a - b)
    ok = bool(np.all((d <= atol + rtol * np.abs(b)) | (np.isnan(a) & np.isnan(b))))
    return ok, float(np.nanmax(d)) if d.size else 0.0


def same_columns(c: Checks, tag: str, ours: pd.DataFrame, theirs: pd.DataFrame, names, rtol: float = 1e-6, atol: float = 1e-12) -> None:
    """Columns `names` present in both with scanpy's dtype; integers equal, floats to `rtol`
    (and `atol` near zero)."""
    for name in names:
        if name not in ours.columns:
            c.check(f"{tag} column {name!r}", False, "missing")
            continue
        o, t = ours[name], theirs[name]
        c.check(f"{tag} {name!r} dtype", o.dtype == t.dtype, f"{o.dtype} vs {t.dtype}")
        if t.dtype.kind in "biu" or isinstance(t.dtype, pd.CategoricalDtype):
            c.check(f"{tag} {name!r} values", np.array_equal(o.to_numpy(), t.to_numpy()), "differ")
        else:
            ok, worst = close(o.to_numpy(np.float64), t.to_numpy(np.float64), rtol, atol)
            c.check(f"{tag} {name!r} values to {rtol:g}", ok, f"largest difference {worst:.2e}")


def same_slots(c: Checks, tag: str, ours, theirs) -> None:
    """The same keys in obs, var, obsm, varm, obsp and uns, and the same shapes."""
    for slot in ("obs", "var"):
        o, t = set(getattr(ours, slot).columns), set(getattr(theirs, slot).columns)
        c.check(f"{tag} {slot} columns", o == t, f"only ours {sorted(o - t)}, only scanpy's {sorted(t - o)}")
    for slot in ("obsm", "varm", "obsp", "uns"):
        o, t = set(getattr(ours, slot).keys()), set(getattr(theirs, slot).keys())
        c.check(f"{tag} {slot} keys", o == t, f"only ours {sorted(o - t)}, only scanpy's {sorted(t - o)}")
    for slot in ("obsm", "varm", "obsp"):
        for k in getattr(theirs, slot).keys():
            if k in getattr(ours, slot):
                os_, ts = getattr(ours, slot)[k].shape, getattr(theirs, slot)[k].shape
                c.check(f"{tag} {slot}[{k!r}] shape", os_ == ts, f"{os_} vs {ts}")
    c.check(f"{tag} shape", ours.shape == theirs.shape, f"{ours.shape} vs {theirs.shape}")


def pca_matches(c: Checks, tag: str, ours, theirs) -> None:
    """conformance's PCA gates: variance ratios to 1e-3, the subspace of the components."""
    ov = np.asarray(ours.uns["pca"]["variance_ratio"], dtype=np.float64)
    tv = np.asarray(theirs.uns["pca"]["variance_ratio"], dtype=np.float64)
    ok = ov.shape == tv.shape and bool(np.all(np.abs(ov - tv) <= 1e-3 * np.abs(tv)))
    c.check(f"{tag} PCA variance_ratio to 1e-3", ok, f"{ov[:3]} vs {tv[:3]}")
    oc, tc = np.asarray(ours.varm["PCs"], np.float64), np.asarray(theirs.varm["PCs"], np.float64)
    q1, _ = np.linalg.qr(oc)
    q2, _ = np.linalg.qr(tc)
    cos = np.linalg.svd(q1.T @ q2, compute_uv=False)
    c.check(f"{tag} PCA subspace", cos.min() > 0.99, f"smallest principal cosine {cos.min():.6f}")
    c.check(f"{tag} X_pca dtype", ours.obsm["X_pca"].dtype == theirs.obsm["X_pca"].dtype, f"{ours.obsm['X_pca'].dtype}")


def neighbors_match(c: Checks, tag: str, ours, theirs) -> None:
    """conformance's kNN gates: sets overlapping >= 99%, connectivities to 1e-4 where equal."""
    from graph_metrics import knn_agreement

    overlap, _, worst = knn_agreement(ours, theirs)
    c.check(f"{tag} kNN overlap >= 99%", overlap >= 0.99, f"{overlap:.4f}")
    c.check(f"{tag} connectivities to 1e-4", worst <= 1e-4, f"{worst:.2e}")
    p = ours.uns["neighbors"]["params"]
    c.check(f"{tag} uns['neighbors'] params", p["n_neighbors"] == theirs.uns["neighbors"]["params"]["n_neighbors"] and p["method"] == "umap", str(dict(p)))
