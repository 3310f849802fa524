#!/usr/bin/env python3
"""scpipe's Python API timed in one Python process on the GPU, the way rapids-singlecell's
benchmark (`.rsc-bench/rsc_bench.py`) times rapids-singlecell on the same file: each step twice
(run 1 cold, run 2 warm), steps that change X in place on a fresh device copy of X made outside
the timer. X lives on the GPU between calls (`scpipe.get.anndata_to_GPU`), every allocation
comes from one rmm_core pool that CuPy shares (`rmm_core.allocators.cupy`). Also times the
notebook flow end to end (QC through markers with harmony, each step once, as a user runs it:
the steps of `scpipe run --harmony batch`) and records rmm_core.statistics over it.

Usage: [STEPS=0] [FLOWS=raw,tutorial] python3 python_api.py FILE.h5ad OUT.json [EMBEDDING.npy]
STEPS=0 skips the step-by-step timings; FLOWS names the flows to run (`run_flow`; default raw).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time


def main() -> int:
    path, out_path = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    import anndata as ad
    import cupy as cp

    import rmm_core
    from rmm_core.allocators.cupy import rmm_cupy_allocator

    import scpipe

    report = {"file": path, "steps": [], "import_s": round(time.perf_counter() - t0, 3)}
    rmm_core.reinitialize(pool_allocator=True)
    cp.cuda.set_allocator(rmm_cupy_allocator)
    stats = rmm_core.statistics
    stats.enable_statistics()
    scpipe.settings.device = "gpu"

    t = time.perf_counter()
    adata0 = ad.read_h5ad(path)
    report["read_s"] = round(time.perf_counter() - t, 3)
    report["shape"] = list(adata0.shape)
    report["nnz"] = int(adata0.X.nnz)
    dev = cp.cuda.Device()

    def bench(name, run, prep=None, n=2):
        rec = {"step": name, "times_s": []}
        out = None
        for _ in range(n):
            arg = prep() if prep is not None else None
            gc.collect()
            dev.synchronize()
            t = time.perf_counter()
            out = run(arg)
            dev.synchronize()
            rec["times_s"].append(round(time.perf_counter() - t, 5))
        print(f"{name}: " + ", ".join(f"{x * 1e3:.1f} ms" for x in rec["times_s"]), flush=True)
        report["steps"].append(rec)
        return out

    if os.environ.get("STEPS", "1") == "0":
        adata = None
    else:
        adata = step_benches(bench, adata0)
    del adata
    gc.collect()

    # The flows, each on a fresh copy of the file's AnnData; the embedding of the last is saved.
    for variant in os.environ.get("FLOWS", "raw").split(","):
        run_flow(variant, adata0, report, dev, stats, emb_path=sys.argv[3] if len(sys.argv) > 3 else None)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)
    return 0


def step_benches(bench, adata0):
    """Each step twice on the flow's data (in-place steps on a fresh copy)."""
    import anndata as ad
    import numpy as np

    import scpipe

    def gcopy(a):
        return ad.AnnData(X=a.X.copy(), obs=a.obs.copy(), var=a.var.copy())

    adata = bench("anndata_to_GPU", lambda a: (scpipe.get.anndata_to_GPU(a), a)[1],
                  prep=lambda: ad.AnnData(X=adata0.X, obs=adata0.obs.copy(), var=adata0.var.copy()))
    adata.var["mt"] = np.asarray(adata.var_names.str.startswith("MT-"), dtype=bool)
    bench("calculate_qc_metrics(qc_vars=['mt'])", lambda _: scpipe.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True))
    adata = bench("filter_cells(min_genes=200)", lambda a: (scpipe.pp.filter_cells(a, min_genes=200), a)[1], prep=lambda: gcopy(adata))
    adata = bench("filter_genes(min_cells=10)", lambda a: (scpipe.pp.filter_genes(a, min_cells=10), a)[1], prep=lambda: gcopy(adata))
    adata = bench("normalize_total(target_sum=1e4)", lambda a: (scpipe.pp.normalize_total(a, target_sum=1e4), a)[1], prep=lambda: gcopy(adata))
    adata = bench("log1p", lambda a: (scpipe.pp.log1p(a), a)[1], prep=lambda: gcopy(adata))
    adata.raw = adata  # the log-normalized genes, for the markers (scanpy's tutorial)
    bench("highly_variable_genes(flavor='cell_ranger', n_top_genes=2000)",
          lambda _: scpipe.pp.highly_variable_genes(adata, n_top_genes=2000, flavor="cell_ranger"))
    hv = adata.var["highly_variable"].to_numpy().copy()
    bench("highly_variable_genes(flavor='seurat', n_top_genes=2000)",
          lambda _: scpipe.pp.highly_variable_genes(adata, n_top_genes=2000, flavor="seurat"))
    adata.var["highly_variable"] = hv
    adata = bench("subset to HVG (adata[:, hvg].copy())", lambda _: adata[:, hv].copy())
    adata = bench("scale(max_value=10)", lambda a: (scpipe.pp.scale(a, max_value=10), a)[1], prep=lambda: gcopy(adata))
    bench("pca(n_comps=50)", lambda _: scpipe.pp.pca(adata, n_comps=50))
    bench("harmony_integrate(key='batch')", lambda _: scpipe.pp.harmony_integrate(adata, "batch"))
    bench("neighbors(n_neighbors=15)", lambda _: scpipe.pp.neighbors(adata, n_neighbors=15, use_rep="X_pca_harmony"))
    bench("umap", lambda _: scpipe.tl.umap(adata))
    bench("leiden", lambda _: scpipe.tl.leiden(adata))
    bench("rank_genes_groups(leiden, wilcoxon)", lambda _: scpipe.tl.rank_genes_groups(adata, "leiden", method="wilcoxon", n_genes=100))
    return adata


def run_flow(variant, adata0, report, dev, stats, emb_path=None):
    """The notebook flow, once, as a user runs it (QC through markers; X on the GPU), each
    line's time recorded (the device waited for after each: what the line costs).

    variant "raw": the older tutorial, `adata.raw = adata`, the highly variable subset and
    scale (`scpipe run --harmony batch`'s steps); "tutorial": scanpy's current clustering
    tutorial, no `.raw`, no subset, no scale (PCA on the highly variable genes by their mask,
    the markers on X: `scpipe run --harmony batch --no-subset --no-scale`)."""
    import anndata as ad
    import numpy as np

    import scpipe

    stats.push_statistics()
    dev.synchronize()
    flow = []
    t = time.perf_counter()
    mark = [t]

    def done(what):
        dev.synchronize()
        now = time.perf_counter()
        flow.append({"step": what, "s": round(now - mark[0], 4)})
        mark[0] = now

    a = ad.AnnData(X=adata0.X, obs=adata0.obs.copy(), var=adata0.var.copy())
    scpipe.get.anndata_to_GPU(a)
    done("anndata_to_GPU")
    a.var["mt"] = np.asarray(a.var_names.str.startswith("MT-"), dtype=bool)
    scpipe.pp.calculate_qc_metrics(a, qc_vars=["mt"], inplace=True)
    done("calculate_qc_metrics")
    scpipe.pp.filter_cells(a, min_genes=200)
    done("filter_cells")
    scpipe.pp.filter_genes(a, min_cells=10)
    done("filter_genes")
    scpipe.pp.normalize_total(a, target_sum=1e4)
    done("normalize_total")
    scpipe.pp.log1p(a)
    done("log1p")
    scpipe.pp.highly_variable_genes(a, n_top_genes=2000, flavor="cell_ranger")
    done("highly_variable_genes")
    if variant == "raw":
        a.raw = a
        done("adata.raw = adata")
        a = a[:, a.var["highly_variable"].to_numpy()].copy()
        done("adata[:, hvg].copy()")
        scpipe.pp.scale(a, max_value=10)
        done("scale")
    scpipe.pp.pca(a, n_comps=50)
    done("pca")
    scpipe.pp.harmony_integrate(a, "batch")
    done("harmony_integrate")
    scpipe.pp.neighbors(a, n_neighbors=15, use_rep="X_pca_harmony")
    done("neighbors")
    scpipe.tl.umap(a)
    done("umap")
    scpipe.tl.leiden(a)
    done("leiden")
    scpipe.tl.rank_genes_groups(a, "leiden", method="wilcoxon", n_genes=100)
    done("rank_genes_groups")
    scpipe.get.anndata_to_CPU(a)
    done("anndata_to_CPU")
    total = round(time.perf_counter() - t, 3)
    s = dict(stats.pop_statistics())
    report.setdefault("flows", {})[variant] = {"s": total, "steps": flow, "statistics": s}
    for r in flow:
        print(f"  flow {variant}: {r['step']}: {r['s']:.3f} s", flush=True)
    print(f"notebook flow {variant}: {total:.2f} s, rmm_core.statistics {s}", flush=True)
    if emb_path is not None:
        # The harmony embedding for `experiments/scanpy_rest.py` (scanpy's host steps after
        # harmony on the same cells).
        np.save(emb_path, np.asarray(a.obsm["X_pca_harmony"]))


if __name__ == "__main__":
    sys.exit(main())
