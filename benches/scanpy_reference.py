#!/usr/bin/env python3
"""Times scanpy on the pipeline of benches/WORKLOADS.md section B, step by step, so `scpipe run` can be
set beside it on the same machine and the same file (see benches/RESULTS.md).

    python benches/scanpy_reference.py INPUT.h5ad --warmup SMALL.h5ad --json OUT.json

The warm-up file runs the whole recipe once first so numba's compilation stays out of the figures
(as the scanpy table of WORKLOADS.md does). Results are written after every step, so a run stopped
early still leaves what it measured. Run it under the same thread limits as scpipe (e.g.
`taskset -c 0,1` with OMP/NUMBA/OPENBLAS threads = 2).
"""

import argparse
import json
import resource
import time

import scanpy as sc


def recipe(path, record):
    def step(name, fn):
        t = time.perf_counter()
        out = fn()
        record(name, time.perf_counter() - t)
        return out

    adata = step("read h5ad", lambda: sc.read_h5ad(path))
    adata.var["mt"] = adata.var_names.str.startswith("MT-")
    step("calculate_qc_metrics", lambda: sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True))
    step("filter_cells", lambda: sc.pp.filter_cells(adata, min_genes=200))
    step("filter_genes", lambda: sc.pp.filter_genes(adata, min_cells=10))
    step("normalize_total", lambda: sc.pp.normalize_total(adata, target_sum=1e4))
    step("log1p", lambda: sc.pp.log1p(adata))
    step("highly_variable_genes", lambda: sc.pp.highly_variable_genes(adata, flavor="cell_ranger", n_top_genes=2000))

    def subset():
        nonlocal adata
        adata.raw = adata
        adata = adata[:, adata.var["highly_variable"]].copy()

    step("subset to HVG (raw frozen)", subset)
    step("scale", lambda: sc.pp.scale(adata, max_value=10))
    step("pca", lambda: sc.tl.pca(adata, n_comps=50))
    step("neighbors", lambda: sc.pp.neighbors(adata, n_neighbors=15))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("--warmup", help="a small h5ad run first, untimed, to compile numba")
    p.add_argument("--json", required=True)
    args = p.parse_args()
    if args.warmup:
        recipe(args.warmup, lambda name, s: None)
    steps = []

    def record(name, seconds):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        steps.append({"step": name, "seconds": seconds, "peak_rss_bytes": peak})
        print(f"{name:28s} {seconds:9.3f} s", flush=True)
        with open(args.json, "w") as f:
            json.dump({"scanpy": sc.__version__, "input": args.input, "steps": steps}, f, indent=1)

    recipe(args.input, record)
    print(f"{'total':28s} {sum(s['seconds'] for s in steps):9.3f} s")


if __name__ == "__main__":
    main()
