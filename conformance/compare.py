#!/usr/bin/env python3
"""Conformance of `scpipe run` with scanpy.

For each dataset (the two real count datasets in ../shared/data and a synthetic one written by
`scpipe generate`) and each highly-variable-gene flavour (with and without a batch key where the
data has batches), runs `scpipe run` and scanpy's classic recipe on the same input with the same
parameters, then compares every output with the tolerances of issue 4:

- QC columns exactly: integer-valued columns (counts, totals, gene numbers, top-n shares of
  integer counts) bit for bit; derived float columns (log1p, percentages) to the last unit of
  their float type (numpy's SIMD log1p is not libm's);
- log-normalized values (`.raw.X`) to 1e-5 relative;
- highly variable gene sets identical for seurat and cell_ranger; for seurat_v3 identical to
  scanpy's with tied genes ranked in gene order (numpy's default argsort orders ties
  arbitrarily: scanpy is run under a stable argsort for the reference, and its default run is
  checked to differ only in genes whose normalized variance ties with another gene's);
- scaled values (`X`) to 1e-5;
- PCA variance ratios to 1e-3 relative, components and scores up to sign (1e-3);
- kNN sets overlapping >= 99%, connectivities to 1e-4 (on cells whose kNN sets agree);
- umap, leiden and rank_genes_groups on the first run of each dataset, against scanpy's on
  scpipe's own graph and labels (graph_steps.py), and the same run twice giving the same layout
  and labels bit for bit.

Prints one line per check, one `SKIP` line (with its reason) per group of comparisons not made,
and `N passed, M failed, K skipped (U unexpected)`. A skip is expected only when its kind is in
ALLOWED_SKIPS, with the reason given there; exits non-zero on any failure or unexpected skip.

Usage: python compare.py [--scpipe PATH] [--data DIR] [--work DIR] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

warnings.filterwarnings("ignore")
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "numba-cache"))

import anndata as ad  # noqa: E402
import scanpy as sc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graph_steps import compare_graph_steps, compare_marker_calls, compare_repeat  # noqa: E402
from graph_metrics import knn_agreement  # noqa: E402
from zarr_files import check_zarr  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# The parameters both sides run with (scpipe's defaults, spelled out).
MITO = "MT-"
MIN_GENES = 200
MIN_CELLS = 10
TARGET_SUM = 1e4
N_TOP = 2000
MAX_VALUE = 10.0
N_COMPS = 50
N_NEIGHBORS = 15

QC_OBS = [
    "n_genes_by_counts",
    "log1p_n_genes_by_counts",
    "total_counts",
    "log1p_total_counts",
    "pct_counts_in_top_50_genes",
    "pct_counts_in_top_100_genes",
    "pct_counts_in_top_200_genes",
    "pct_counts_in_top_500_genes",
    "total_counts_mt",
    "log1p_total_counts_mt",
    "pct_counts_mt",
]
QC_VAR = [
    "n_cells_by_counts",
    "mean_counts",
    "log1p_mean_counts",
    "pct_dropout_by_counts",
    "total_counts",
    "log1p_total_counts",
]
# Columns whose values are sums or counts of integers, or exact ratios of them: bit for bit.
EXACT = {
    "n_genes_by_counts",
    "total_counts",
    "total_counts_mt",
    "pct_counts_in_top_50_genes",
    "pct_counts_in_top_100_genes",
    "pct_counts_in_top_200_genes",
    "pct_counts_in_top_500_genes",
    "n_cells_by_counts",
    "pct_dropout_by_counts",
    "n_genes",
    "n_cells",
}


# The comparisons that may be skipped, by kind, with the reason. Any other skip is unexpected: it
# hides a comparison that should have been made, so it fails the run.
ALLOWED_SKIPS = {
    "flavour-independent": "QC columns, scipy usability, .raw.X and uns do not depend on the HVG "
    "flavour: compared on the first run of each dataset only",
    "quick": "--quick runs one flavour per dataset",
}


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.unexpected = 0

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        ok = bool(ok)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
        return ok

    def skip(self, name: str, kind: str, why: str = "") -> None:
        """Comparisons `name` not made. Expected when `kind` is in ALLOWED_SKIPS (whose reason is
        printed); otherwise `why` is printed and the skip fails the run."""
        self.skipped += 1
        if kind in ALLOWED_SKIPS:
            print(f"SKIP  {name}  ({ALLOWED_SKIPS[kind]})", flush=True)
        else:
            self.unexpected += 1
            print(f"SKIP  {name}  ({why})  UNEXPECTED: '{kind}' is not in ALLOWED_SKIPS", flush=True)

    def summary(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped ({self.unexpected} unexpected)"

    def ok(self) -> bool:
        return self.failed == 0 and self.unexpected == 0


# --------------------------------------------------------------------------------------------
# Running both sides


def run_scpipe(scpipe: Path, src: Path, out: Path, flavor: str, batch_key: str | None, extra: list[str] | None = None) -> float:
    cmd = [
        str(scpipe), "run", str(src), "-o", str(out), "--device", "cpu",
        "--mito-prefix", MITO, "--min-genes", str(MIN_GENES), "--min-cells", str(MIN_CELLS),
        "--target-sum", str(TARGET_SUM), "--hvg-flavor", flavor, "--n-top-genes", str(N_TOP),
        "--max-value", str(MAX_VALUE), "--n-comps", str(N_COMPS), "--n-neighbors", str(N_NEIGHBORS),
    ]
    if batch_key:
        cmd += ["--batch-key", batch_key]
    t = time.perf_counter()
    run_command(cmd + (extra or []))
    return time.perf_counter() - t


def run_command(cmd: list[str]) -> None:
    """Runs scpipe's command line `cmd`; a RuntimeError with its output when it fails."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"scpipe failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")


def run_markers_only(scpipe: Path, src: Path, out: Path, extra: list[str]):
    """scpipe run on `src` with `extra` (the markers-only flags), read back."""
    run_command([str(scpipe), "run", str(src), "-o", str(out), "--device", "cpu"] + extra)
    return ad.read_h5ad(out)


@contextlib.contextmanager
def stable_argsort():
    """numpy's argsort with kind="stable": ties in gene order, the order scpipe uses."""
    orig = np.argsort

    def stable(a, axis=-1, kind=None, order=None, **kw):
        return orig(a, axis=axis, kind="stable", order=order, **kw)

    np.argsort = stable
    try:
        yield
    finally:
        np.argsort = orig


def run_scanpy(src: Path, flavor: str, batch_key: str | None) -> tuple[ad.AnnData, float]:
    t = time.perf_counter()
    a = ad.read_h5ad(src)
    if sp.issparse(a.X):
        a.X = csr(a.X)  # scipy needs one index dtype (checked separately for scpipe's files)
    a.var["mt"] = np.asarray(a.var_names.str.startswith(MITO), dtype=bool)
    sc.pp.calculate_qc_metrics(a, qc_vars=["mt"], inplace=True)
    sc.pp.filter_cells(a, min_genes=MIN_GENES)
    sc.pp.filter_genes(a, min_cells=MIN_CELLS)
    v3 = flavor.startswith("seurat_v3")
    if v3:
        a.layers["counts"] = a.X.copy()
    sc.pp.normalize_total(a, target_sum=TARGET_SUM)
    sc.pp.log1p(a)
    default_hv = None
    if v3:
        # scanpy ranks genes with numpy's default (unstable) argsort, whose order of tied genes
        # is arbitrary; the reference run breaks ties in gene order (stable argsort), scanpy's
        # default run is kept to show that every difference from it is a tie.
        df = sc.pp.highly_variable_genes(a, flavor=flavor, n_top_genes=N_TOP, batch_key=batch_key, layer="counts", inplace=False)
        default_hv = df["highly_variable"].to_numpy().astype(bool)
        with stable_argsort():
            sc.pp.highly_variable_genes(a, flavor=flavor, n_top_genes=N_TOP, batch_key=batch_key, layer="counts")
    else:
        sc.pp.highly_variable_genes(a, flavor=flavor, n_top_genes=N_TOP, batch_key=batch_key)
    counts = a.layers.pop("counts") if v3 else None
    a.raw = a
    keep = a.var["highly_variable"].to_numpy()
    a = a[:, keep].copy()
    sc.pp.scale(a, max_value=MAX_VALUE)
    sc.pp.pca(a, n_comps=N_COMPS)
    sc.pp.neighbors(a, n_neighbors=N_NEIGHBORS)
    a.uns["_counts"] = counts  # for the seurat_v3 tie analysis
    a.uns["_default_hv"] = default_hv
    return a, time.perf_counter() - t


# --------------------------------------------------------------------------------------------
# Comparisons


def csr(x) -> sp.csr_matrix:
    """A CSR copy with one index dtype (scipy's kernels need indptr and indices alike)."""
    m = sp.csr_matrix(x)
    if m.indices.dtype != m.indptr.dtype:
        m = sp.csr_matrix((m.data, m.indices.astype(np.int64), m.indptr.astype(np.int64)), shape=m.shape)
    return m


def scipy_usable(x) -> tuple[bool, str]:
    """Whether scipy (and so scanpy's tools: leiden, umap, ...) can use a sparse output as read."""
    m = sp.csr_matrix(x)
    try:
        m.tocoo()
        m @ np.ones(m.shape[1], dtype=m.dtype)
        return True, f"indptr {m.indptr.dtype}, indices {m.indices.dtype}"
    except Exception as e:  # noqa: BLE001
        return False, f"indptr {m.indptr.dtype}, indices {m.indices.dtype}: {e}"


def dense(x) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def ulps_close(a: np.ndarray, b: np.ndarray, ulps: int = 1) -> tuple[bool, float]:
    """Equal to `ulps` units in the last place of the wider of the two float types."""
    a = np.asarray(a)
    b = np.asarray(b)
    both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    dt = np.float32 if (a.dtype == np.float32 or b.dtype == np.float32) else np.float64
    eps = np.finfo(dt).eps
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = ulps * eps * np.maximum(np.abs(a64), np.abs(b64))
    diff = np.abs(a64 - b64)
    ok = (diff <= tol) | both_nan
    worst = float(np.nanmax(np.where(both_nan, 0, diff / np.maximum(np.abs(b64), 1e-300)))) if diff.size else 0.0
    return bool(ok.all()), worst


def compare_column(rep: Report, tag: str, col: str, where: str, ours, theirs) -> None:
    o = np.asarray(ours)
    t = np.asarray(theirs)
    name = f"{where}['{col}']"
    if o.shape != t.shape:
        rep.check(f"{tag} {name}", False, f"shape {o.shape} vs {t.shape}")
        return
    if col in EXACT:
        eq = (o.astype(np.float64) == t.astype(np.float64)) | (np.isnan(o.astype(np.float64)) & np.isnan(t.astype(np.float64)))
        rep.check(f"{tag} {name} exactly", eq.all(), f"{int((~eq).sum())} of {eq.size} differ")
    else:
        ok, worst = ulps_close(o, t, 2)
        rep.check(f"{tag} {name} to the last float unit", ok, f"largest relative difference {worst:.2e}")


def close(a, b, rtol: float, atol: float) -> tuple[bool, float]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff = np.abs(a - b)
    ok = diff <= atol + rtol * np.abs(b)
    return bool(ok.all()), float(diff.max()) if diff.size else 0.0


def per_batch_normalized_variance(counts, batches, n_obs_keep) -> list[np.ndarray]:
    """seurat_v3's per-batch normalized variance, as scanpy computes it (for the tie analysis)."""
    from scanpy.preprocessing._utils import _get_mean_var
    from skmisc.loess import loess

    out = []
    labels = np.zeros(counts.shape[0], dtype=int) if batches is None else np.asarray(batches)
    for b in np.unique(labels):
        d = counts[labels == b]
        mean, var = _get_mean_var(d)
        nc = var > 0
        est = np.zeros(d.shape[1])
        m = loess(np.log10(mean[nc]), np.log10(var[nc]), span=0.3, degree=2)
        m.fit()
        est[nc] = m.outputs.fitted_values
        rs = np.sqrt(10**est)
        n = d.shape[0]
        clip = rs * np.sqrt(n) + mean
        x = d.tocsr().astype(np.float64)
        x.data = np.minimum(x.data, clip[x.indices])
        sq = np.asarray(x.multiply(x).sum(0)).ravel()
        s = np.asarray(x.sum(0)).ravel()
        out.append((1 / ((n - 1) * rs**2)) * (n * mean**2 + sq - 2 * s * mean))
    return out


def compare_runs(rep: Report, tag: str, ours: ad.AnnData, theirs: ad.AnnData, flavor: str, batch_key, full: bool) -> None:
    # Cells and genes kept.
    rep.check(f"{tag} cells kept", list(ours.obs_names) == list(theirs.obs_names), f"{ours.n_obs} vs {theirs.n_obs}")
    if ours.raw is None or theirs.raw is None:
        rep.check(f"{tag} .raw present", False)
        rep.skip(f"{tag} genes kept, QC, HVG, scale, PCA, neighbors", "no-raw", "no .raw to compare")
        return
    same_genes = list(ours.raw.var_names) == list(theirs.raw.var_names)
    rep.check(f"{tag} genes kept (.raw)", same_genes, f"{ours.raw.n_vars} vs {theirs.raw.n_vars}")
    if not same_genes or list(ours.obs_names) != list(theirs.obs_names):
        rep.skip(f"{tag} QC, HVG, scale, PCA, neighbors", "kept-differ", "the kept cells or genes differ")
        return

    if full:
        # QC columns (obs) and filter annotations.
        for c in QC_OBS + ["n_genes"]:
            if c not in ours.obs:
                rep.check(f"{tag} obs['{c}'] present", False)
                continue
            compare_column(rep, tag, c, "obs", ours.obs[c].to_numpy(), theirs.obs[c].to_numpy())
        for c in QC_VAR + ["n_cells"]:
            if c not in ours.raw.var:
                rep.check(f"{tag} raw.var['{c}'] present", False)
                continue
            compare_column(rep, tag, c, "raw.var", ours.raw.var[c].to_numpy(), theirs.raw.var[c].to_numpy())
        # Sparse outputs usable by scipy as read.
        for what, m in [(".raw.X", ours.raw.X), ("obsp['distances']", ours.obsp["distances"]), ("obsp['connectivities']", ours.obsp["connectivities"])]:
            ok, detail = scipy_usable(m)
            rep.check(f"{tag} {what} usable by scipy as read", ok, detail)
        # Log-normalized values.
        o = csr(ours.raw.X)
        t = csr(theirs.raw.X)
        d = abs(o - t)
        denom = abs(t).maximum(abs(o))
        rel = d.multiply(denom.power(-1)) if d.nnz else d
        worst = float(rel.max()) if rel.nnz else 0.0
        rep.check(f"{tag} log-normalized values (.raw.X) to 1e-5 relative", worst <= 1e-5, f"largest relative difference {worst:.2e}")
        for key in ["log1p", "hvg", "pca", "neighbors"]:
            rep.check(f"{tag} uns['{key}'] present", key in ours.uns)
    else:
        rep.skip(f"{tag} QC columns, scipy usability, .raw.X, uns", "flavour-independent")

    # Highly variable genes.
    oh = ours.raw.var["highly_variable"].to_numpy().astype(bool)
    th = theirs.raw.var["highly_variable"].to_numpy().astype(bool)
    diff = np.flatnonzero(oh != th)
    if flavor.startswith("seurat_v3"):
        rep.check(
            f"{tag} HVG set ({flavor}) identical to scanpy's with ties in gene order",
            len(diff) == 0,
            f"{len(diff)} genes differ, {int(th.sum())} selected",
        )
        dh = theirs.uns["_default_hv"]
        ddiff = np.flatnonzero(oh != dh)
        counts = theirs.uns.get("_counts")
        labels = None if batch_key is None else theirs.obs[batch_key].astype(str).to_numpy()
        per = per_batch_normalized_variance(sp.csr_matrix(counts), labels, theirs.n_obs) if len(ddiff) else []
        untied = [g for g in ddiff if not any((np.sum(v == v[g]) > 1) for v in per)]
        rep.check(
            f"{tag} HVG set ({flavor}) identical to scanpy's default run up to ties",
            not untied,
            f"{len(ddiff)} genes differ, all tied in some batch" if not untied else f"{len(untied)} genes differ without a tie",
        )
        ok, worst = close(ours.raw.var["variances_norm"], theirs.raw.var["variances_norm"], 1e-6, 1e-9)
        rep.check(f"{tag} variances_norm to 1e-6", ok, f"largest difference {worst:.2e}")
    else:
        rep.check(f"{tag} HVG set ({flavor}) identical", len(diff) == 0, f"{len(diff)} genes differ, {int(th.sum())} selected")
        ok, worst = close(ours.raw.var["dispersions_norm"], theirs.raw.var["dispersions_norm"], 0, 1e-4)
        rep.check(f"{tag} dispersions_norm to 1e-4", ok, f"largest difference {worst:.2e}")
        ok, worst = close(ours.raw.var["means"], theirs.raw.var["means"], 1e-6, 1e-12)
        rep.check(f"{tag} means to 1e-6", ok, f"largest difference {worst:.2e}")
    if batch_key is not None and "highly_variable_nbatches" not in theirs.raw.var:
        rep.skip(f"{tag} highly_variable_nbatches", "no-nbatches", "scanpy wrote no highly_variable_nbatches")
    elif batch_key is not None:
        nb_diff = int((ours.raw.var["highly_variable_nbatches"].to_numpy() != theirs.raw.var["highly_variable_nbatches"].to_numpy()).sum())
        rep.check(f"{tag} highly_variable_nbatches", nb_diff == 0, f"{nb_diff} differ")

    if list(ours.var_names) != list(theirs.var_names):
        rep.skip(f"{tag} scale / PCA / neighbors", "hvg-differ", "the HVG sets differ, so X holds different genes")
        return

    # Scale.
    ok, worst = close(dense(ours.X), dense(theirs.X), 1e-5, 1e-5)
    rep.check(f"{tag} scaled X to 1e-5", ok, f"largest difference {worst:.2e}")
    for c in ["mean", "std"]:
        ok, worst = close(ours.var[c], theirs.var[c], 1e-5, 1e-9)
        rep.check(f"{tag} var['{c}'] to 1e-5", ok, f"largest difference {worst:.2e}")

    # PCA.
    ov = np.asarray(ours.uns["pca"]["variance_ratio"], dtype=np.float64)
    tv = np.asarray(theirs.uns["pca"]["variance_ratio"], dtype=np.float64)
    ok = ov.shape == tv.shape and np.all(np.abs(ov - tv) <= 1e-3 * np.abs(tv))
    rep.check(f"{tag} PCA variance_ratio to 1e-3", ok, f"largest relative difference {np.max(np.abs(ov - tv) / np.abs(tv)):.2e}" if ov.shape == tv.shape else "shape")
    oc = np.asarray(ours.varm["PCs"], dtype=np.float64)
    tc = np.asarray(theirs.varm["PCs"], dtype=np.float64)
    osc = np.asarray(ours.obsm["X_pca"], dtype=np.float64)
    tsc = np.asarray(theirs.obsm["X_pca"], dtype=np.float64)
    if oc.shape != tc.shape:
        rep.check(f"{tag} PCA components shape", False, f"{oc.shape} vs {tc.shape}")
        rep.skip(f"{tag} PCA components and scores, neighbors", "pca-shape", "the PCA shapes differ")
        return
    signs = np.sign(np.sum(oc * tc, axis=0))
    comp_err = np.max(np.abs(oc * signs - tc), axis=0)
    score_err = np.max(np.abs(osc * signs - tsc), axis=0) / np.max(np.abs(tsc), axis=0)
    # A component is determined (up to sign) only when its eigenvalue is apart from its neighbours'.
    var = np.asarray(theirs.uns["pca"]["variance"], dtype=np.float64)
    gaps = np.minimum(np.r_[np.inf, -np.diff(var)], np.r_[-np.diff(var), np.inf]) / var
    determined = gaps > 1e-3
    bad = np.flatnonzero(determined & ((comp_err > 1e-3) | (score_err > 1e-3)))
    rep.check(
        f"{tag} PCA components and scores up to sign to 1e-3",
        len(bad) == 0,
        f"{int(determined.sum())} of {len(var)} components with eigenvalues apart by > 0.1%; worst {comp_err[determined].max() if determined.any() else 0:.1e}; failing {list(bad)}",
    )
    same_sign = signs[determined] > 0
    rep.check(f"{tag} PCA signs as sklearn's svd_flip", same_sign.all(), f"{int((~same_sign).sum())} flipped")
    # The subspace of all components (robust to near-equal eigenvalues): principal angles.
    q1, _ = np.linalg.qr(oc)
    q2, _ = np.linalg.qr(tc)
    cos = np.linalg.svd(q1.T @ q2, compute_uv=False)
    rep.check(f"{tag} PCA subspace (all {oc.shape[1]} components)", cos.min() > 0.99, f"smallest principal cosine {cos.min():.6f}")

    # Neighbors.
    overlap, same_rows, worst = knn_agreement(ours, theirs)
    rep.check(f"{tag} kNN sets overlap >= 99%", overlap >= 0.99, f"{overlap * 100:.2f}%, {int(same_rows.sum())} of {ours.n_obs} cells identical")
    rep.check(f"{tag} connectivities to 1e-4", worst <= 1e-4, f"largest difference {worst:.2e} over cells whose kNN sets agree")


# --------------------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scpipe", type=Path, default=None, help="scpipe binary (default: target/release/scpipe)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--work", type=Path, default=None, help="keep the outputs here")
    p.add_argument("--quick", action="store_true", help="one flavour per dataset")
    p.add_argument("--synthetic-cells", type=int, default=2000)
    p.add_argument("--synthetic-genes", type=int, default=6000)
    args = p.parse_args()

    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    scpipe = args.scpipe or target / "release" / "scpipe"
    if not scpipe.exists():
        print(f"scpipe binary not found at {scpipe} (build it with `cargo build --release -p sc-pipeline`)")
        print("0 passed, 1 failed, 0 skipped (0 unexpected)")
        return 1
    if args.work is None:
        # The outputs (about 200 MB) are removed at the end unless --work asks to keep them.
        with tempfile.TemporaryDirectory(prefix="scpipe-conformance-") as tmp:
            return check(args, scpipe, Path(tmp))
    args.work.mkdir(parents=True, exist_ok=True)
    return check(args, scpipe, args.work)


def check(args, scpipe, work):
    """Runs every comparison, writing scpipe's outputs under `work`; returns the exit status."""
    sc.settings.verbosity = 0
    rep = Report()
    print(f"scanpy {sc.__version__}, anndata {ad.__version__}, scpipe {scpipe}")

    synth = work / "synthetic.h5ad"
    subprocess.run([str(scpipe), "generate", str(args.synthetic_cells), str(args.synthetic_genes), "-o", str(synth), "--seed", "1"], check=True, capture_output=True)
    g = ad.read_h5ad(synth)
    ok, detail = scipy_usable(g.X)
    rep.check("synthetic: `scpipe generate` X usable by scipy as read", ok, detail)
    rep.check("synthetic: obs['batch'] is categorical", str(g.obs["batch"].dtype) == "category", str(g.obs["batch"].dtype))
    del g

    flavors_all = ["cell_ranger", "seurat", "seurat_v3"]
    datasets = [
        ("celltypist", args.data / "celltypist_sample_559x32786_counts.h5ad", [(f, None) for f in flavors_all]),
        ("scvi", args.data / "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad", [(f, None) for f in flavors_all] + [(f, "batch") for f in flavors_all]),
        ("synthetic", synth, [("cell_ranger", None), ("seurat", "batch"), ("seurat_v3", "batch")]),
    ]
    for name, src, runs in datasets:
        if not src.exists():
            rep.check(f"{name}: input {src}", False, "missing")
            continue
        for k, (flavor, batch_key) in enumerate(runs):
            tag = f"{name}/{flavor}" + (f"/batch={batch_key}" if batch_key else "")
            if args.quick and k > 0:
                rep.skip(f"{tag} (the whole run)", "quick")
                continue
            out = work / f"{name}_{flavor}_{batch_key or 'nobatch'}.h5ad"
            try:
                t_ours = run_scpipe(scpipe, src, out, flavor, batch_key)
            except RuntimeError as e:
                rep.check(f"{tag} scpipe run", False, str(e).splitlines()[0])
                continue
            theirs, t_theirs = run_scanpy(src, flavor, batch_key)
            ours = ad.read_h5ad(out)
            print(f"----  {tag}: scpipe {t_ours:.2f} s, scanpy {t_theirs:.2f} s", flush=True)
            compare_runs(rep, tag, ours, theirs, flavor, batch_key, full=(k == 0))
            if k == 0:
                compare_graph_steps(rep, tag, ours)
                compare_marker_calls(rep, tag, lambda extra: run_markers_only(scpipe, out, work / f"{name}_markers.h5ad", extra))
                again = work / f"{name}_again.h5ad"
                run_scpipe(scpipe, src, again, flavor, batch_key)
                compare_repeat(rep, tag, ours, ad.read_h5ad(again))
                if name == "celltypist":
                    check_zarr(rep, run_scpipe, scpipe, src, out, work, flavor)
    print(rep.summary())
    return 0 if rep.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
