#!/usr/bin/env python3
"""regress_out and the scale after it, scpipe's Python API beside rapids-singlecell's, the way
a notebook runs rapids-singlecell's tutorial: X on the GPU, QC, filters, normalize, log1p, the
2,000 cell_ranger genes, then `regress_out(adata, ["total_counts", "pct_counts_mt"])`,
`scale(max_value=10)` on the dense result, and `regress_out(adata, "batch")` (a categorical
key) on the subset; each timed twice (run 1 cold, run 2
warm) on a fresh device copy made outside the timer. One library per process; the first
`ROWS` rows of both results are saved to compare the libraries (`--compare`).

Usage: [PROFILE=1 SCPIPE_TRACE_PHASES=1] python3 regress_side_by_side.py scpipe|rsc FILE.h5ad OUT.json
       python3 regress_side_by_side.py --compare OUT_DIR
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

ROWS = 20000
KEYS = ["total_counts", "pct_counts_mt"]


def run(lib: str, path: str, out_path: str) -> None:
    import anndata as ad
    import cupy as cp
    import numpy as np

    if lib == "scpipe":
        import rmm_core
        from rmm_core.allocators.cupy import rmm_cupy_allocator

        import scpipe as m

        rmm_core.reinitialize(pool_allocator=True)
        cp.cuda.set_allocator(rmm_cupy_allocator)
        m.settings.device = "gpu"
        # PROFILE=1: each call's parts in / step / results out, and the step's phases
        # (SCPIPE_TRACE_PHASES=1 set by the caller).
        m.settings.progress = os.environ.get("PROFILE") == "1"
    else:
        sys.path.insert(0, ".rsc-bench")
        import rapids_stubs  # cuML and the other RAPIDS modules rsc imports but these steps do not use

        rapids_stubs.install()
        import rapids_singlecell as m
    dev = cp.cuda.Device()
    a = ad.read_h5ad(path)
    m.get.anndata_to_GPU(a)
    a.var["mt"] = np.asarray(a.var_names.str.startswith("MT-"), dtype=bool)
    # scanpy's (and scpipe's) default is inplace=False; rapids-singlecell's writes in place.
    m.pp.calculate_qc_metrics(a, qc_vars=["mt"], **({"inplace": True} if lib == "scpipe" else {}))
    m.pp.filter_cells(a, min_genes=200)
    m.pp.filter_genes(a, min_cells=10)
    m.pp.normalize_total(a, target_sum=1e4)
    m.pp.log1p(a)
    m.pp.highly_variable_genes(a, n_top_genes=2000, flavor="cell_ranger")
    a = a[:, a.var["highly_variable"].to_numpy()].copy()
    report = {"lib": lib, "shape": list(a.shape), "steps": []}

    def bench(name, step, src):
        rec = {"step": name, "times_s": []}
        out = None
        for _ in range(2):
            b = ad.AnnData(X=src.X.copy(), obs=src.obs.copy(), var=src.var.copy())
            gc.collect()
            dev.synchronize()
            t = time.perf_counter()
            step(b)
            dev.synchronize()
            rec["times_s"].append(round(time.perf_counter() - t, 5))
            out = b
        print(f"{lib} {name}: " + ", ".join(f"{x * 1e3:.1f} ms" for x in rec["times_s"]), flush=True)
        report["steps"].append(rec)
        return out

    # rapids-singlecell regresses more than 100,000 cells on continuous keys with cuML (100
    # genes at a time) unless batchsize="all", its one-solve path, which needs no cuML (not
    # installable here) and is the faster of the two.
    extra = {"batchsize": "all"} if lib == "rsc" else {}
    r = bench(f"regress_out({KEYS})", lambda b: m.pp.regress_out(b, KEYS, **extra), a)
    report["regressed_X"] = f"{type(r.X).__module__}.{type(r.X).__name__} {r.X.dtype}"
    s = bench("scale(max_value=10) after regress_out", lambda b: m.pp.scale(b, max_value=10), r)
    c = bench("regress_out('batch') (categorical)", lambda b: m.pp.regress_out(b, "batch"), a)
    base = out_path.removesuffix(".json")
    np.save(base + "_regressed.npy", cp.asnumpy(r.X[:ROWS]).astype(np.float32))
    np.save(base + "_scaled.npy", cp.asnumpy(s.X[:ROWS]).astype(np.float32))
    np.save(base + "_categorical.npy", cp.asnumpy(c.X[:ROWS]).astype(np.float32))
    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)


def compare(out_dir: str) -> None:
    import numpy as np

    for what in ("regressed", "scaled", "categorical"):
        ours = np.load(f"{out_dir}/scpipe_{what}.npy").astype(np.float64)
        theirs = np.load(f"{out_dir}/rsc_{what}.npy").astype(np.float64)
        d = np.abs(ours - theirs)
        scale = np.abs(theirs).max()
        print(f"{what}: {ours.shape}, max |ours - rsc| {d.max():.3g}, relative to the largest "
              f"value {d.max() / scale:.3g}, mean {d.mean():.3g}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2])
    else:
        run(sys.argv[1], sys.argv[2], sys.argv[3])
